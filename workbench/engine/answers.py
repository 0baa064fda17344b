"""The receiver's answer from many repaired caches at once, with a reference answer's score.

For each cell (a set of rows to repair over the splice) one batched layer-serial pass
(`engine.cells.run_cells`) computes, in order of position,

    the repaired rows  |  the question suffix  |  the reference answer, teacher-forced

which is exactly repair, then suffix prefill, then teacher forcing, because each row only
attends to rows at earlier positions. The last suffix row and the teacher-forced rows give the
reference answer's log-probability and, read as a draft, the greedy answer: while the greedy
token equals the reference token, the next teacher-forced row is the greedy decode's own next
row. Only cells whose answer leaves the reference decode further (`engine.decode.decode_cells`,
one batched row per step, with every row already computed kept as known K/V). The stopping rule,
the loop, the steps and the teacher-forced score are `engine.decode`'s; hooks (`engine.hooks`)
run on the batched pass and every decode step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.batching import DEFAULT_MAX_BYTES
from workbench.engine.cells import Cell, CellRows, run_cells
from workbench.engine.decode import Answer, StopRule, Walk, decode_cells, forced_score
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.engine.masks import check_context, check_positions
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel


@dataclass(frozen=True)
class CellAnswer:
    """One repaired cell's outcome: its repaired rows, its greedy answer, the reference's score."""

    repaired: CellRows  # the repaired rows only: K/V per layer at positions [row]
    answer: Answer
    reference_logprob: float  # sum of log p(reference token) teacher-forced over the cell
    decode_steps: int  # rows decoded beyond the teacher-forced pass
    reference_token_logprobs: tuple[float, ...] = ()  # log p of each reference token, teacher-forced
    first_token: int = -1  # the greedy first answer token (an end-of-turn id when it stops at once)
    first_logp: torch.Tensor | None = None  # [vocab] float32 log-probabilities of the first answer token


@torch.inference_mode()
def answer_cells(model: LoadedModel, base: KVCache, ids: torch.Tensor, row_sets: list[torch.Tensor],
                 suffix_ids: torch.Tensor, reference_ids, max_new_tokens: int = 24,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 progress: Callable[[int, int], None] | None = None,
                 contexts: list[torch.Tensor | None] | None = None, hooks=None,
                 stop_at_newline: bool = True) -> list[CellAnswer]:
    """Repair each row set of `row_sets` over `base` and answer from it (see the module docstring).

    ids: the context's token ids [pos] (row sets index into it); suffix_ids: [suffix];
    reference_ids: the answer to teacher-force (for example the dense answer and its end token), or
    None: each cell's own greedy answer, scored as it is decoded (`StopRule.decision` of it: the
    log-probabilities of its tokens at the steps that chose them), so that an answer that later
    serves as the reference is computed once;
    contexts: per row set, None or a context mask (bool [n]) its repaired rows are restricted to
    (`Cell.context`; the suffix and the answer always see every key); hooks: {name: fn}
    (`engine.hooks`), run on every pass; stop_at_newline: end an answer at its first line break and
    score that line (`StopRule`), or decode on and score the whole answer.
    """
    n, n_suffix = base.n_positions, len(suffix_ids)
    row_sets = [check_positions(rows, n, f"row set {i}") for i, rows in enumerate(row_sets)]  # before any work
    contexts = list(contexts) if contexts is not None else [None] * len(row_sets)
    if len(contexts) != len(row_sets):
        raise WorkbenchError(f"contexts has {len(contexts)} entries for {len(row_sets)} row sets; give one per row set")
    contexts = [None if c is None else check_context(c, f"the context of row set {i}") for i, c in enumerate(contexts)]
    long = [i for i, c in enumerate(contexts) if c is not None and c.numel() > n]
    if long:
        raise WorkbenchError(f"the context masks of row sets {long[:8]} pass the base cache's {n} positions: a "
                             "context covers the handed-off rows only (the suffix always sees every key)")
    hooks = Hooks.of(hooks, model.adapter)
    own = reference_ids is None  # each cell's greedy answer is its reference
    reference = [] if own else [int(t) for t in reference_ids]
    forced = torch.tensor(reference[:-1], dtype=torch.long)  # inputs of the teacher-forced rows
    tail = torch.arange(n, n + n_suffix + len(forced))
    tail_ids = torch.cat([suffix_ids.cpu().long(), forced])
    cells = [Cell(torch.cat([rows.long().cpu(), tail]), torch.cat([ids.cpu()[rows.long().cpu()], tail_ids]),
                  context=context) for rows, context in zip(row_sets, contexts)]
    passes = run_cells(model, base, cells, max_bytes, progress, hooks)
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    results, walks, known, seen = [], [], {}, {}  # seen (own): cell -> each decoded step's log-probs [vocab]
    for c, (rows, done) in enumerate(zip(row_sets, passes)):
        r = int(rows.numel())
        first = r + n_suffix - 1  # the row that predicts the first answer token
        pred = slice(first, first + max(len(reference), 1))
        # the predicting rows, one cell: the caller's cell c
        rows = Rows.one_cell(done.positions[pred], torch.tensor([c], device=done.positions.device)) if hooks else None
        logits = final_logits(model.adapter, done.hidden[pred], rows, hooks).float()  # [pred, vocab]
        logp = torch.log_softmax(logits, dim=-1)
        forced = forced_score(logits, reference, logp)
        greedy = logits.argmax(-1).tolist()
        walk, i = Walk(), 0
        while rule.push(walk, greedy[i]):
            if greedy[i] == (reference[i] if i < len(reference) else None) and i + 1 < len(greedy):
                i += 1  # the next teacher-forced row is the greedy decode's own next row
            else:  # the answer leaves the reference: keep the rows before its next one
                keep = r + n_suffix + i
                none = torch.zeros(0, dtype=torch.long)
                known[c] = Cell(none, none, done.positions[:keep], done.keys[:, :, :keep], done.values[:, :, :keep])
                break
        walks.append(walk)
        seen[c] = [logp[0]]
        repaired = CellRows(done.positions[:r], done.keys[:, :, :r], done.values[:, :, :r], done.hidden[:r])
        results.append([repaired, forced.logprob, forced.token_logprobs, greedy[0], logp[0].cpu()])
    observe = (lambda c, logits: seen[c].append(torch.log_softmax(logits.float(), dim=-1))) if own else None
    decode_cells(model, base, walks, known, n + n_suffix, rule, max_bytes, hooks, observe)
    if own:  # the teacher-forced score of each cell's own answer, from the rows that chose it
        for c, walk in enumerate(walks):
            rows = torch.stack(seen[c])  # [decision, vocab]: the pass's first row, then each step's
            scored = forced_score(rows, rule.decision(rule.answer(walk)), rows)
            results[c][1:3] = [scored.logprob, scored.token_logprobs]
    return [CellAnswer(repaired, rule.answer(walk), score, walk.steps, token_logprobs, first, first_logp)
            for walk, (repaired, score, token_logprobs, first, first_logp) in zip(walks, results)]
