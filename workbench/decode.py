"""Answering from a cache: greedy decoding (one cache or a batch) and teacher forcing.

`greedy_answer` and `teacher_forced` run the receiver's suffix (question, generation prompt,
answer lead-in), and the forced answer, over the handed-off cache through the engine's layer
step (`repair.recompute_rows`: rows past the cache's end extend a copy of it), so hooks
(`engine.hooks`) reach them; with none they equal HF's forward of the same tokens bit for bit
(tests/unit/test_question_path.py). The greedy decode then steps through HF's modules on the
CPU without hooks (`HFSteps`), and through the engine's `Decoder` on CUDA (captured as a CUDA
graph) or when hooked (`engine.decode.continue_answer`). `greedy_answers` (many caches) and
`draft_confidence` still run HF's modules (`HFSteps`). The cache passed in is never changed. The
loop, its stopping rule, the stepper interface and the teacher-forced score are the engine's
(`engine.decode`): an end-of-turn token (not kept), a newline in the answer, or `max_new_tokens`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.batching import pack_sizes
from workbench.engine.decode import (
    Answer, StopRule, TeacherForced, Walk, continue_answer, decode_greedy, forced_score, graphs_wanted, stop_token_ids,
)
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, hf_cache
from workbench.models import LoadedModel
from workbench.repair import recompute_rows

__all__ = ["Answer", "HFSteps", "TeacherForced", "continue_greedy", "draft_confidence", "forced_score", "greedy_answer",
           "greedy_answers", "question_logits", "question_pass", "stop_token_ids", "teacher_forced"]


class HFSteps:
    """The `engine.decode.Stepper` through HF's modules over an HF cache (extended in place, and
    kept as `.cache`): each step's rows are the tokens fed, one per cache of the batch; ended rows
    leave it. `lens` ([batch] each cache's own length) and `mask` ([batch, pos] or None) are for a
    padded batch (`greedy_answers`): positions are then given as `lens + n_suffix + step` and the mask
    grows by a column a step. Without `lens`, HF places the row after the cache itself."""

    def __init__(self, model: LoadedModel, cache, lens: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                 n_suffix: int = 0):
        self.model, self.cache, self.lens, self.mask, self.n_suffix, self.step = model, cache, lens, mask, n_suffix, 0

    def __call__(self, keep: list[int], tokens: list[int]) -> torch.Tensor:
        device = self.model.device
        ids = torch.tensor(tokens, device=device)[:, None]  # [alive, 1]
        if self.lens is None:  # one cache: HF's own position after it
            out = self.model.hf(input_ids=ids, cache=self.cache, use_cache=True)
            self.cache = out.cache
            return out.logits[:, -1]  # [alive, vocab]
        if len(keep) < len(self.lens):
            index = torch.tensor(keep, device=device)
            self.cache.batch_select_indices(index)
            self.mask = None if self.mask is None else self.mask[index]
            self.lens = self.lens[index]
        if self.mask is not None:
            self.mask = torch.cat([self.mask, self.mask.new_ones(len(keep), 1)], dim=1)
        positions = (self.lens + self.n_suffix + self.step)[:, None]  # [alive, 1]
        self.step += 1
        out = self.model.hf(input_ids=ids, attention_mask=self.mask, position_ids=positions, cache=self.cache,
                            use_cache=True, logits_to_keep=1)
        self.cache = out.cache
        return out.logits[:, -1]  # [alive, vocab]


def question_pass(model: LoadedModel, cache: KVCache, inputs: torch.Tensor, hooks=None) -> tuple[KVCache, torch.Tensor]:
    """Run `inputs` ([row]) after `cache`'s rows through the engine (`recompute_rows`, at positions
    n.. : each row sees the cache and the rows before it), under `hooks` (checked; one cell).
    Returns (a copy of `cache` extended by the rows, their hidden states after the last layer
    [row, hidden]). With no hooks its rows equal HF's forward of `inputs` over `cache` bit for bit."""
    n = cache.n_positions
    ids = torch.cat([torch.zeros(n, dtype=torch.long), inputs.cpu().long()])  # only positions n.. are read
    return recompute_rows(model, cache, ids, torch.arange(n, len(ids)), hooks=hooks)


def question_logits(model: LoadedModel, hidden: torch.Tensor, positions: torch.Tensor, hooks: Hooks | None) -> torch.Tensor:
    """The logits of rows `hidden` ([row, hidden]) at `positions` ([row]), through `ln_final` and
    `hook_unembed` when hooked (one cell, those rows)."""
    with torch.inference_mode():
        rows = Rows.one_cell(positions.to(hidden.device)) if hooks else None
        return final_logits(model.adapter, hidden, rows, hooks)  # [row, vocab]


def greedy_answer(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                  max_new_tokens: int = 24, stop_at_newline: bool = True, hooks=None) -> Answer:
    """Run `suffix_ids` ([pos]) over `cache` through the engine (`question_pass`), then decode
    greedily until end of turn (`continue_greedy`; through the engine's steps when hooked).
    `hooks` ({name: fn} or [(name or filter, fn)], `engine.hooks`): run on the suffix (the final
    points on its last row, whose logits are read) and on every decode step."""
    hooks = Hooks.of(hooks, model.adapter)
    prefilled, h = question_pass(model, cache, suffix_ids, hooks)
    last = torch.tensor([prefilled.n_positions - 1])
    logits = question_logits(model, h[-1:], last, hooks)[0]  # only the last row's, as HF's logits_to_keep=1
    return continue_greedy(model, logits, prefilled, max_new_tokens, stop_at_newline,
                           engine=True if hooks else None, hooks=hooks)


@torch.inference_mode()
def continue_greedy(model: LoadedModel, logits: torch.Tensor, cache, max_new_tokens: int = 24,
                    stop_at_newline: bool = True, engine: bool | None = None, hooks=None) -> Answer:
    """Greedy decoding from a prefill that already ran: its last position's `logits` ([vocab]) and
    its cache (an HF cache, which HF's decoding extends, or a `KVCache`, never changed).

    `engine`: decode through the engine's `Decoder` (`engine.decode.continue_answer`), whose steps
    are captured once as a CUDA graph and replayed; the default where the capture is wanted
    (`engine.decode.graphs_wanted`: on CUDA, unless KVWB_CUDA_GRAPHS=0), since HF's eager step is
    bound by the host's kernel launches there. Otherwise HF's modules step by step. The two give the
    same tokens up to float rounding (tests/unit/test_graphs.py). `hooks` (`engine.hooks`) run on
    every engine step; they need `engine` (the default when given)."""
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    hooks = Hooks.of(hooks, model.adapter)
    use_engine = (bool(hooks) or graphs_wanted(model, None)) if engine is None else engine
    if hooks and not use_engine:
        raise WorkbenchError("continue_greedy: hooks run on the engine's steps; give engine=True or leave it None")
    if use_engine:
        prefilled = cache if isinstance(cache, KVCache) else KVCache.from_hf(cache)
        return rule.answer(continue_answer(model, prefilled, logits, rule, hooks))
    cache = cache.to_hf() if isinstance(cache, KVCache) else cache
    walk = Walk()
    if max_new_tokens < 1:
        return rule.answer(walk)
    decode_greedy(rule, [walk], HFSteps(model, cache), logits[None])
    return rule.answer(walk)


def _groups(lengths: list[int], chunk: int, row_budget: int, same_length: bool = False) -> list[list[int]]:
    """Indices sorted by length, cut into batches of <= `chunk` caches and <= `row_budget` padded
    rows; with `same_length`, only caches of one length share a batch (no padding)."""
    def fits(members: list[int]) -> bool:
        longest = lengths[members[-1]]
        return (len(members) <= chunk and len(members) * longest <= row_budget
                and (not same_length or lengths[members[0]] == longest))
    return pack_sizes(lengths, fits)


@torch.inference_mode()
def greedy_answers(model: LoadedModel, caches: list[KVCache], suffix_ids: torch.Tensor,
                   max_new_tokens: int = 24, chunk: int = 64, row_budget: int = 6144,
                   stop_at_newline: bool = True) -> list[Answer]:
    """Greedy answers of the same suffix over many caches, decoded in batches.

    Same stopping rule as `greedy_answer`; rows that stop leave the batch. Caches of different
    lengths are padded at their end with masked rows, and the suffix gets each cache's own
    positions, so padding changes nothing but float rounding: up to the rounding of batched
    matrix products each answer is the one `greedy_answer` gives for that cache alone.
    Batches hold at most `chunk` caches and `row_budget` padded rows. A model with sliding-window
    layers batches only caches of one length: transformers applies the window by index in the
    padded batch, which would narrow a shorter cache's window by its padding.
    """
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    walks = [Walk() for _ in caches]
    lengths = [c.n_positions for c in caches]
    n_suffix = len(suffix_ids)
    for group in _groups(lengths, chunk, row_budget, same_length=model.adapter.has_windows):
        if max_new_tokens < 1:
            break
        width = max(lengths[i] for i in group)
        lens = torch.tensor([lengths[i] for i in group], device=model.device)  # [B]

        def pad(x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (0, 0, 0, width - x.shape[2])) if x.shape[2] < width else x

        keys = torch.stack([pad(caches[i].keys) for i in group], dim=1).to(model.device)  # [layer, B, kv_head, pos, d]
        values = torch.stack([pad(caches[i].values) for i in group], dim=1).to(model.device)
        cache = hf_cache([(keys[l], values[l]) for l in range(keys.shape[0])])
        mask = None
        if width != int(lens.min()):
            mask = (torch.arange(width + n_suffix, device=model.device)[None] < lens[:, None]).long()  # [B, pos]
            mask[:, width:] = 1
        positions = lens[:, None] + torch.arange(n_suffix, device=model.device)[None]  # [B, suffix]
        ids = suffix_ids.to(model.device)[None].expand(len(group), -1)
        out = model.hf(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                       logits_to_keep=1)  # only the last position's logits are read
        decode_greedy(rule, [walks[i] for i in group], HFSteps(model, out.cache, lens, mask, n_suffix),
                      out.logits[:, -1])
    return [rule.answer(walk) for walk in walks]


@torch.inference_mode()
def draft_confidence(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor, k: int = 2) -> float:
    """OpenGate's trust in a cache: the mean top-1 probability of the first `k` greedy steps after
    prefilling `suffix_ids` over `cache` (fewer when an end-of-turn token comes first)."""
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True)
    top = []
    decode_greedy(StopRule.of(model, k, stop_at_newline=False), [Walk()], HFSteps(model, out.cache), out.logits[:, -1],
                  observe=lambda logits, alive: top.append(float(logits[0].float().softmax(-1).max())))
    return sum(top) / len(top)


def teacher_forced(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                   answer_ids, hooks=None) -> TeacherForced:
    """One engine pass of suffix + answer over `cache` (`question_pass`): the answer's
    log-probability and agreement. `hooks` (`engine.hooks`) run on it, the final points on every row."""
    hooks = Hooks.of(hooks, model.adapter)
    answer = torch.as_tensor(list(answer_ids), dtype=torch.long)
    if answer.numel() == 0:
        return TeacherForced(0.0, (), 0, True)
    inputs = torch.cat([suffix_ids.cpu(), answer[:-1]])
    n = cache.n_positions
    _, h = question_pass(model, cache, inputs, hooks)
    logits = question_logits(model, h, torch.arange(n, n + len(inputs)), hooks)  # [row, vocab]: every row, as HF
    return forced_score(logits[len(suffix_ids) - 1:], answer)  # engine.decode's one teacher-forced reading
