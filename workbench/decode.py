"""Answering from a cache: greedy decoding (one cache or a batch) and teacher forcing, every
pass through the engine, so hooks (`engine.hooks`) reach them all.

`greedy_answer` and `teacher_forced` run the receiver's suffix (question, generation prompt,
answer lead-in), and the forced answer, over the handed-off cache through the engine's layer
step (`question_pass`: `repair.recompute_rows`, rows past the cache's end extend a copy of it);
with no hooks these rows equal HF's forward of the same tokens bit for bit
(tests/unit/test_question_path.py). The greedy decode then steps through the engine's `Decoder`
(`engine.decode.continue_answer`; captured as a CUDA graph on CUDA without hooks), one row a step;
`greedy_answers` runs the suffix over many caches as engine cells (`engine.cells.run_cells`) and
decodes them together (`engine.decode.decode_cells`); `draft_confidence` (OpenGate) is a
`question_pass` and the same steps. HF's modules step nothing: they are the tests' oracle
(tests/hf_oracle.py). The engine's one-row step writes its softmax out in fp32 where HF's step runs
torch's fused kernel (over a sliding window's last rows only, on Gemma 3), so a step's logits
differ from HF's by float rounding (the tokens of every test and record checked are HF's). The
cache passed in is never changed. The loop, its stopping rule, the stepper interface and the
teacher-forced score are the engine's (`engine.decode`): an end-of-turn token (not kept), a
newline in the answer, or `max_new_tokens`.
"""
from __future__ import annotations

import torch

from workbench.batching import DEFAULT_MAX_BYTES
from workbench.engine.cells import Cell, run_cells
from workbench.engine.decode import (
    Answer, StopRule, TeacherForced, Walk, continue_answer, decode_cells, forced_score, stop_token_ids,
)
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.kv import KVCache
from workbench.models import LoadedModel
from workbench.repair import recompute_rows

__all__ = ["Answer", "TeacherForced", "continue_greedy", "draft_confidence", "forced_score", "greedy_answer",
           "greedy_answers", "last_logits", "question_logits", "question_pass", "stop_token_ids", "teacher_forced"]


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


def last_logits(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                hooks: Hooks | None) -> tuple[KVCache, torch.Tensor]:
    """`question_pass` of `suffix_ids` over `cache`: (the cache it extends, its last row's logits
    [vocab], through the final points when hooked; only that row's, as HF's logits_to_keep=1)."""
    prefilled, h = question_pass(model, cache, suffix_ids, hooks)
    return prefilled, question_logits(model, h[-1:], torch.tensor([prefilled.n_positions - 1]), hooks)[0]


def greedy_answer(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                  max_new_tokens: int = 24, stop_at_newline: bool = True, hooks=None) -> Answer:
    """Run `suffix_ids` ([pos]) over `cache` through the engine (`question_pass`), then decode
    greedily until end of turn (`continue_greedy`, the engine's steps).
    `hooks` ({name: fn} or [(name or filter, fn)], `engine.hooks`): run on the suffix (the final
    points on its last row, whose logits are read) and on every decode step."""
    hooks = Hooks.of(hooks, model.adapter)
    prefilled, logits = last_logits(model, cache, suffix_ids, hooks)
    return continue_greedy(model, logits, prefilled, max_new_tokens, stop_at_newline, hooks=hooks)


@torch.inference_mode()
def continue_greedy(model: LoadedModel, logits: torch.Tensor, cache: KVCache, max_new_tokens: int = 24,
                    stop_at_newline: bool = True, hooks=None) -> Answer:
    """Greedy decoding from a prefill that already ran: its last position's `logits` ([vocab]) over
    its `cache` (a `KVCache`, never changed; an HF cache is read into one), one row a step through
    the engine's `Decoder` (`engine.decode.continue_answer`: captured once as a CUDA graph and
    replayed on CUDA unless KVWB_CUDA_GRAPHS=0, eager otherwise). `hooks` (`engine.hooks`) run on
    every step (a cell of one; the steps then run eagerly)."""
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    prefilled = cache if isinstance(cache, KVCache) else KVCache.from_hf(cache)
    return rule.answer(continue_answer(model, prefilled, logits, rule, hooks))


@torch.inference_mode()
def greedy_answers(model: LoadedModel, caches: list[KVCache], suffix_ids: torch.Tensor,
                   max_new_tokens: int = 24, stop_at_newline: bool = True, max_bytes: int = DEFAULT_MAX_BYTES,
                   hooks=None) -> list[Answer]:
    """Greedy answers of the same suffix over many caches, batched through the engine.

    The suffix over each cache is one engine cell (`run_cells` over an empty base: the cache its
    cell's known rows, the suffix its rows at that cache's own positions), then every answer is
    decoded together (`decode_cells`, one row per cache a step); answers that stop leave the batch.
    Caches may differ in length: masks and sliding windows go by absolute position, so each answer
    is the one `greedy_answer` gives for that cache alone, up to the rounding of batched products.
    `max_bytes` bounds each group's attention inputs. `hooks` (`engine.hooks`) run on every pass,
    the cell axis (`HookPoint.cells`) indexing `caches`; the final points see each cache's last
    suffix row and every step.
    """
    hooks = Hooks.of(hooks, model.adapter)
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    walks = [Walk() for _ in caches]
    if not caches or max_new_tokens < 1:
        return [rule.answer(walk) for walk in walks]
    suffix, n_suffix = suffix_ids.cpu().long(), len(suffix_ids)
    lengths = [cache.n_positions for cache in caches]
    empty = KVCache(caches[0].keys[:, :, :0], caches[0].values[:, :, :0])  # no shared row: each cache is a cell's
    cells = [Cell(torch.arange(n, n + n_suffix), suffix, torch.arange(n), cache.keys, cache.values)
             for n, cache in zip(lengths, caches)]
    passes = run_cells(model, empty, cells, max_bytes, hooks=hooks)
    last = torch.tensor([n + n_suffix - 1 for n in lengths], device=model.device)  # [cache]
    rows = Rows.one_row_each(last, torch.arange(len(caches), device=model.device)) if hooks else None
    last_rows = torch.stack([done.hidden[-1] for done in passes])  # [cache, hidden]
    logits = final_logits(model.adapter, last_rows, rows, hooks)  # [cache, vocab]
    known = {}
    for c, (cache, done, token) in enumerate(zip(caches, passes, logits.argmax(-1).tolist())):
        if rule.push(walks[c], token):  # the first answer token; the steps decode on from it
            device = done.keys.device
            known[c] = Cell(suffix[:0], suffix[:0], torch.arange(lengths[c] + n_suffix),
                            torch.cat([cache.keys.to(device), done.keys], dim=2),
                            torch.cat([cache.values.to(device), done.values], dim=2))
    decode_cells(model, empty, walks, known, [n + n_suffix for n in lengths], rule, max_bytes, hooks)
    return [rule.answer(walk) for walk in walks]


@torch.inference_mode()
def draft_confidence(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor, k: int = 2, hooks=None) -> float:
    """OpenGate's trust in a cache: the mean top-1 probability of the first `k` greedy steps after
    `suffix_ids` over `cache` (fewer when an end-of-turn token comes first), through the engine
    (`question_pass`, then its decode steps) under `hooks` (`engine.hooks`)."""
    hooks = Hooks.of(hooks, model.adapter)
    prefilled, logits = last_logits(model, cache, suffix_ids, hooks)
    top = []
    continue_answer(model, prefilled, logits, StopRule.of(model, k, stop_at_newline=False), hooks,
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
