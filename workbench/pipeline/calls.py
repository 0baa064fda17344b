"""One agent call: its prompt laid out, and its cache by a dense prefill or by KVComm's prediction.

An agent's prompt is a `Layout` whose prefix is the chat frame with the agent's system prompt,
whose "passages" are the placeholders it reads (the task, then its predecessors' outputs) and
whose suffix is its instruction. So the splice, the repair, the signals and the selectors of the
workbench apply to a call's cache unchanged.

    layout, slots = agent_layout(model.tokenizer, spec, agent, task, outputs)
    dense = dense_call(model, layout)                        # C(prompt), the reference
    call = kvcomm_call(model, pool, agent, layout, slots)     # call.cache, call.decisions, call.reused

KVComm runs in one of two variants (`KVCOMM_VARIANTS`, a run's `--kvcomm`):
- "code", as KVComm's code runs: the gate decides once per (slot, message) and the decision is
  kept; a reused call also serves the prompt's tail (the suffix but its last token) from the pool,
  its base moved and shifted by predicted Δs, and computes only the last token;
- "legacy", the workbench's KVComm before issue 28: the gate runs on every call and the suffix is
  prefilled exactly over the predicted cache (earlier runs reproduce with it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.layout import Layout, PromptFormat, build_layout
from workbench.models import LoadedModel
from workbench.pipeline.anchors import AnchorPool, GateDecision
from workbench.pipeline.spec import PipelineSpec
from workbench.splice import dense_cache, prefill
from workbench.tasks import Example

# The neutral prefix a placeholder's base cache is computed after and then dropped (KVComm
# computes user inputs after "Q:" so that no placeholder row is the attention sink at 0).
BASE_PREFIX = "Q:"
AGENT_FORMAT = PromptFormat(passage_separator="\n\n", question_template="{question}", answer_lead="")
KVCOMM_VARIANTS = ("code", "legacy")


@dataclass(frozen=True)
class Slot:
    """A placeholder of a call: its name (`"task"`, `"agent2"`) and the text that fills it."""

    name: str
    message: str


def agent_example(spec: PipelineSpec, agent: int, task: str, outputs: dict[int, str], answer_lead: str = "",
                  gold: tuple[str, ...] = (), request: str = "") -> tuple[Example, tuple[Slot, ...]]:
    """Agent `agent`'s prompt as an Example (its slots are the passages, its instruction the
    question, its system prompt the system) and its slots. `outputs` maps each predecessor to
    what it said; `gold` and `request` (an id) label the call for scoring."""
    me = spec.agents[agent]
    slots = [Slot("task", f"Task: {task}")]
    for j in spec.predecessors(agent):
        slots.append(Slot(f"agent{j}", f"{spec.agents[j].role.capitalize()} said: {outputs[j]}"))
    example = Example(f"{request}/agent{agent}" if request else f"agent{agent}", tuple(s.message for s in slots),
                      me.instruction, tuple(gold), system=me.system, meta={"answer_lead": answer_lead})
    return example, tuple(slots)


def agent_layout(tokenizer, spec: PipelineSpec, agent: int, task: str, outputs: dict[int, str],
                 answer_lead: str = "", max_positions: int | None = None) -> tuple[Layout, tuple[Slot, ...]]:
    """Agent `agent`'s prompt laid out (see `agent_example`), and its slots, one per passage of
    the layout in order."""
    example, slots = agent_example(spec, agent, task, outputs, answer_lead)
    return build_layout(tokenizer, example, AGENT_FORMAT, max_positions=max_positions), slots


# Token-matched Dense: one prefill of the call's own ids (each segment tokenized apart, as the reuse
# path lays them out) over the handed-off span [0, suffix_start): the example's dense reference.
dense_call = dense_cache


def template_ids(tokenizer, layout: Layout) -> torch.Tensor:
    """Chat-template Dense's ids: the call's whole text tokenized as one. [pos]"""
    text = "".join(seg.text for seg in layout.segments)
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def base_cache(model: LoadedModel, ids: torch.Tensor, start: int,
               memo: dict[tuple[int, ...], KVCache] | None = None) -> KVCache:
    """C(x | ∅) of a placeholder's ids ([len]), computed after BASE_PREFIX (then dropped) and moved
    by a delta rotation to absolute positions [start, start + len). `memo` keeps each computed
    base by its ids, so a slot every agent of a request reads (the task) is prefilled once."""
    lead = torch.tensor(model.tokenizer(BASE_PREFIX, add_special_tokens=False)["input_ids"], dtype=torch.long)
    key = tuple(ids.tolist())
    alone = memo.get(key) if memo is not None else None
    if alone is None:
        alone = prefill(model, torch.cat([lead, ids.cpu()])).slice(len(lead), len(lead) + len(ids))
        if memo is not None:
            memo[key] = alone
    return alone.moved(model.adapter, start - len(lead))


def tail_base(model: LoadedModel, agent: int, layout: Layout, slots: tuple[Slot, ...],
              templates: dict | None = None) -> KVCache:
    """The base of the prompt's tail (the suffix, [suffix_start, n)): the agent's prompt with each
    slot standing as its name ("{task}"), prefilled, its suffix rows moved to the real suffix's
    position (KVComm's code prefills each agent's template once and keeps its text segments).
    `templates` keeps each agent's latest template (a final agent's answer lead changes it)."""
    sep = AGENT_FORMAT.passage_separator
    holes = sum((model.tokenizer(f"{{{slot.name}}}{sep}", add_special_tokens=False)["input_ids"] for slot in slots), [])
    ids = torch.cat([layout.ids[: layout.prefix.end], torch.tensor(holes, dtype=torch.long),
                     layout.ids[layout.suffix_start:]])  # [template pos]
    key = tuple(ids.tolist())
    kept = templates.get(agent) if templates is not None else None
    if kept is None or kept[0] != key:
        start = len(ids) - (layout.n_tokens - layout.suffix_start)
        kept = key, prefill(model, ids).slice(start, len(ids)), start
        if templates is not None:
            templates[agent] = kept
    _, tail, start = kept
    return tail.moved(model.adapter, layout.suffix_start - start)


@dataclass(frozen=True)
class KVCommCall:
    """A call served by KVComm: its cache, each slot's gate decision, and whether it was reused."""

    cache: KVCache  # [0, suffix_start): predicted or dense; [0, n - 1) when the tail was served too
    decisions: tuple[GateDecision, ...]  # one per slot
    reused: bool  # served from the prediction; otherwise the call paid a dense prefill
    suffix_ids: torch.Tensor | None = None  # what is prefilled over `cache` (None: the layout's suffix)


def kvcomm_call(model: LoadedModel, pool: AnchorPool, agent: int, layout: Layout,
                slots: tuple[Slot, ...], force_dense: bool = False,
                bases_memo: dict[tuple[int, ...], KVCache] | None = None, variant: str = "code",
                templates: dict | None = None) -> KVCommCall:
    """Gate every slot; if none asks for a dense pass, assemble prefix (exact) + predicted slots
    (+ the predicted tail, "code"); else prefill densely and store the Δ of each slot the gate
    refused (the tail's too after the last slot, "code") as an anchor (the pool learns online).
    `force_dense` (a call-level policy) pays the dense prefill whatever the gate says; the gate
    still runs, so the pool learns as it would. `bases_memo`: see `base_cache`; `variant`: one of
    KVCOMM_VARIANTS; `templates`: see `tail_base`."""
    if variant not in KVCOMM_VARIANTS:
        raise WorkbenchError(f"unknown KVComm variant {variant!r}; use one of {', '.join(KVCOMM_VARIANTS)}")
    code = variant == "code"
    bases = [base_cache(model, layout.ids[seg.start:seg.end], seg.start, bases_memo) for seg in layout.passages]
    if code:  # a kept "no" asks each reader for one dense pass, which stores its Δ (has_active_anchor)
        decisions = tuple(pool.decide(s.name, s.message, agent, b.values) for s, b in zip(slots, bases))
        reuse = all(d.reuse or pool.holds(s.name, s.message, agent) for s, d in zip(slots, decisions))
    else:
        decisions = tuple(pool.gate(slot.name, agent, base.values) for slot, base in zip(slots, bases))
        reuse = all(d.reuse for d in decisions)
    if reuse and not force_dense:
        prefix = prefill(model, layout.ids[: layout.prefix.end])  # the agent's own prompt start: exact
        parts = [prefix] + [KVCache(*pool.predict(slot.name, agent, base.keys, base.values))
                            for slot, base in zip(slots, bases)]
        if not code:
            return KVCommCall(KVCache.cat(parts), decisions, True)
        served_rows = layout.n_tokens - 1 - layout.suffix_start  # the last token is computed, not served
        tail = tail_base(model, agent, layout, slots, templates).slice(0, served_rows)
        parts.append(KVCache(*pool.predict_tail(slots[-1].name, agent, bases[-1].keys, bases[-1].values,
                                                tail.keys, tail.values)))
        return KVCommCall(KVCache.cat(parts), decisions, True, layout.ids[-1:])  # only the last token runs
    dense = dense_call(model, layout)
    for slot, seg, base, decision in zip(slots, layout.passages, bases, decisions):
        if not decision.reuse:
            real = dense.slice(seg.start, seg.end)
            pool.store(slot.name, slot.message, agent, base.keys, base.values, real.keys, real.values)
    if code and not decisions[-1].reuse:  # the text after the last slot: the prompt's tail
        real = prefill(model, layout.ids[layout.suffix_start:], dense).slice(layout.suffix_start, layout.n_tokens)
        tail = tail_base(model, agent, layout, slots, templates)
        pool.store_tail(slots[-1].name, slots[-1].message, agent, tail.keys, tail.values, real.keys, real.values)
    return KVCommCall(dense, decisions, False)
