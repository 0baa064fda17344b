"""One request through a pipeline under one reuse method: every agent in topological order.

    state = get_method("kvcomm").make_state()
    result = run_request(model, spec, example, "kvcomm", state)
    result.answer, result.calls                  # the final agent's answer, one CallRecord per agent
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import torch

from workbench.atomic import json_safe
from workbench.decode import greedy_answer
from workbench.models import LoadedModel
from workbench.diagnosis import DiagnoseConfig
from workbench.layout import build_layout
from workbench.pipeline.calls import AGENT_FORMAT, agent_example, template_ids
from workbench.pipeline.methods import CallContext, MethodState, get_method
from workbench.pipeline.repair import repair_call
from workbench.pipeline.spec import PipelineSpec
from workbench.seeds import derive_seed
from workbench.tasks import Example


@dataclass(frozen=True)
class CallRecord:
    """One agent call of one request."""

    agent: int
    role: str
    depth: int
    n_tokens: int
    reused: bool
    gate_entropy: tuple[float, ...]  # per slot (nan where no gate ran or < 2 anchors)
    gate_threshold: tuple[float, ...]
    n_anchors: tuple[int, ...]
    confidence: float  # OpenGate's draft confidence (nan for other methods)
    n_repaired: int  # rows recomputed exactly in the served cache (BCR; 0 for other methods)
    template_differs: bool  # the whole prompt tokenized as one differs from the merged segment ids
    output: str
    seconds: float


@dataclass(frozen=True)
class RequestResult:
    example_id: str
    method: str
    answer: str  # the final agent's output
    calls: tuple[CallRecord, ...]
    repair: tuple[dict, ...] = ()  # the final call's repair outcomes (see `run_request`'s `repair`)

    def to_dict(self) -> dict:
        """JSON-safe (nan as None)."""
        return {"example_id": self.example_id, "method": self.method, "answer": self.answer,
                "calls": [{k: json_safe(v) for k, v in asdict(c).items()} for c in self.calls],
                "repair": list(self.repair)}

    @classmethod
    def from_dict(cls, data: dict) -> RequestResult:
        calls = []
        for c in data["calls"]:
            fields = {k: (tuple(_float(x) if k.startswith("gate_") else x for x in v) if isinstance(v, list) else v)
                      for k, v in c.items()}
            fields["confidence"] = _float(fields["confidence"])
            fields.setdefault("n_repaired", 0)  # requests written before BCR was a method
            calls.append(CallRecord(**fields))
        return cls(data["example_id"], data["method"], data["answer"], tuple(calls), tuple(data.get("repair", ())))


def _float(value) -> float:
    return math.nan if value is None else float(value)


def task_text(example: Example) -> str:
    """The shared task T: the example's instruction (a retrieval data set's, if any), its passages,
    then its question."""
    head = f"{example.system}\n" if example.system else ""
    return head + "\n".join(example.passages) + f"\nQuestion: {example.question}"


def call_seed(seed: int, example_id: str, agent: int) -> int:
    """A drawn policy's seed for one call: from the run seed, the request's id and the agent."""
    return derive_seed(seed, example_id, "agent", agent)


def run_request(model: LoadedModel, spec: PipelineSpec, example: Example, method: str, state: MethodState,
                max_new_tokens: int = 24, seed: int = 0, replay: RequestResult | None = None,
                repair: DiagnoseConfig | None = None) -> RequestResult:
    """Run every agent of `spec` on `example` with reuse method `method` (its `state` carries over
    between requests). The final agent writes the example's answer lead, if it has one.

    `replay` (a finished result of this request) rebuilds `state` on resume: every call runs its
    method again, so the anchor pool learns exactly what it learned, but each agent's output is
    read from the record instead of decoded; `replay` itself is returned.

    `repair`: when the final agent's call was served from a predicted cache, a Diagnosis of that
    call under this config (BCR's repair on top, every selector; see `pipeline.repair`); its
    outcomes are the result's `repair` rows."""
    fn = get_method(method).fn
    state.bases.clear()  # slot bases are shared by the calls of one request only
    task = task_text(example)
    outputs: dict[int, str] = {}
    calls, repaired = [], []
    for agent in spec.order:
        start = time.perf_counter()
        lead = example.meta.get("answer_lead", "") if agent == spec.final else ""
        call_example, slots = agent_example(spec, agent, task, outputs, lead, example.gold, example.id)
        layout = build_layout(model.tokenizer, call_example, AGENT_FORMAT, max_positions=model.max_positions)
        result = fn(CallContext(model, spec, agent, layout, slots, state, call_seed(seed, example.id, agent),
                                call_example))
        if replay is not None:
            outputs[agent] = next(c.output for c in replay.calls if c.agent == agent) or "(nothing)"
            continue
        answer = greedy_answer(model, result.cache, result.suffix(layout), max_new_tokens)
        if repair is not None and agent == spec.final and result.reused:
            rows = repair_call(model, layout, result.span(layout), call_example,
                               replace(repair, max_new_tokens=max_new_tokens))
            repaired = [{k: json_safe(v) for k, v in row.items()} for row in rows.to_dict("records")]
        outputs[agent] = answer.text or "(nothing)"
        calls.append(CallRecord(agent, spec.agents[agent].role, spec.depth(agent), layout.n_tokens, result.reused,
                                tuple(d.entropy for d in result.decisions),
                                tuple(d.threshold for d in result.decisions),
                                tuple(d.n_anchors for d in result.decisions), result.confidence, result.n_repaired,
                                not torch.equal(template_ids(model.tokenizer, layout), layout.ids),
                                answer.text, time.perf_counter() - start))
    if replay is not None:
        return replay
    return RequestResult(example.id, method, outputs[spec.final], tuple(calls), tuple(repaired))
