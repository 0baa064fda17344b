"""The receiver's answer from many repaired caches at once, with a reference answer's score.

For each cell (a set of rows to repair over the splice) one batched layer-serial pass
(`overlay.run_cells`) computes, in order of position,

    the repaired rows  |  the question suffix  |  the reference answer, teacher-forced

which is exactly repair, then suffix prefill, then teacher forcing, because each row only
attends to rows at earlier positions. The last suffix row and the teacher-forced rows give the
reference answer's log-probability and, read as a draft, the greedy answer: while the greedy
token equals the reference token, the next teacher-forced row is the greedy decode's own next
row. Only cells whose answer leaves the reference decode further, one batched row per step,
with every row already computed kept as known K/V. The stopping rule is `decode._step`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.decode import Answer, _answer, _step, stop_token_ids
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel
from workbench.overlay import DEFAULT_MAX_BYTES, Cell, CellRows, Decoder, run_cells
from workbench.repair import check_context, check_positions


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


@dataclass
class _Walk:
    """A cell's greedy decode in progress."""

    generated: list[int]
    known_positions: torch.Tensor  # [known]
    known_keys: torch.Tensor  # [layer, kv_head, known, d_head]
    known_values: torch.Tensor
    steps: int = 0
    answer: Answer | None = None


@torch.inference_mode()
def answer_cells(model: LoadedModel, base: KVCache, ids: torch.Tensor, row_sets: list[torch.Tensor],
                 suffix_ids: torch.Tensor, reference_ids, max_new_tokens: int = 24,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 progress: Callable[[int, int], None] | None = None,
                 contexts: list[torch.Tensor | None] | None = None) -> list[CellAnswer]:
    """Repair each row set of `row_sets` over `base` and answer from it (see the module docstring).

    ids: the context's token ids [pos] (row sets index into it); suffix_ids: [suffix];
    reference_ids: the answer to teacher-force (for example the dense answer and its end token);
    contexts: per row set, None or a context mask (bool [n]) its repaired rows are restricted to
    (`overlay.Cell.context`; the suffix and the answer always see every key).
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
    reference = [int(t) for t in reference_ids]
    forced = torch.tensor(reference[:-1], dtype=torch.long)  # inputs of the teacher-forced rows
    tail = torch.arange(n, n + n_suffix + len(forced))
    tail_ids = torch.cat([suffix_ids.cpu().long(), forced])
    cells = [Cell(torch.cat([rows.long().cpu(), tail]), torch.cat([ids.cpu()[rows.long().cpu()], tail_ids]),
                  context=context) for rows, context in zip(row_sets, contexts)]
    passes = run_cells(model, base, cells, max_bytes, progress)
    stops = stop_token_ids(model)
    results, walks = [], {}
    for c, (rows, done) in enumerate(zip(row_sets, passes)):
        r = int(rows.numel())
        first = r + n_suffix - 1  # the row that predicts the first answer token
        logits = model.adapter.logits(done.hidden[first:first + max(len(reference), 1)]).float()  # [pred, vocab]
        logp = torch.log_softmax(logits, dim=-1)
        token_logprobs = tuple(float(logp[i, t]) for i, t in enumerate(reference))
        score = float(sum(token_logprobs))
        greedy = logits.argmax(-1).tolist()
        walk, i = _Walk([], done.positions, done.keys, done.values), 0
        while walk.answer is None:
            state = _step(model, walk.generated, greedy[i], stops, True)
            if state != "go" or len(walk.generated) == max_new_tokens:
                walk.answer = _answer(model, walk.generated, state == "stop")
            elif greedy[i] == (reference[i] if i < len(reference) else None) and i + 1 < len(greedy):
                i += 1  # the next teacher-forced row is the greedy decode's own next row
            else:  # the answer leaves the reference: keep the rows before its next one
                keep = r + n_suffix + i
                walk.known_positions, walk.known_keys = done.positions[:keep], done.keys[:, :, :keep]
                walk.known_values = done.values[:, :, :keep]
                walks[c] = walk
                break
        repaired = CellRows(done.positions[:r], done.keys[:, :, :r], done.values[:, :, :r], done.hidden[:r])
        results.append([repaired, walk, score, token_logprobs, greedy[0], logp[0].cpu()])
    _decode(model, base, walks, n + n_suffix, max_new_tokens, stops, max_bytes)
    return [CellAnswer(repaired, walk.answer, score, walk.steps, token_logprobs, first, first_logp)
            for repaired, walk, score, token_logprobs, first, first_logp in results]


@torch.inference_mode()
def _decode(model: LoadedModel, base: KVCache, walks: dict[int, _Walk], first: int, max_new_tokens: int,
            stops: set[int], max_bytes: int) -> None:
    """Decode the walks that left the reference, one batched row per step, in groups whose known
    rows fit in `max_bytes`."""
    per_row = base.n_layers * base.keys.shape[1] * base.keys.shape[3] * base.keys.element_size() * 2
    order = sorted(walks, key=lambda c: walks[c].known_positions.numel())
    groups: list[list[int]] = []
    for c in order:
        rows = walks[c].known_positions.numel() + max_new_tokens
        if groups and (len(groups[-1]) + 1) * rows * per_row <= max_bytes:
            groups[-1].append(c)
        else:
            groups.append([c])
    for group in groups:
        alive = [walks[c] for c in group]
        decoder = Decoder(model, base, [Cell(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                                             w.known_positions, w.known_keys, w.known_values) for w in alive],
                          max_new_tokens)
        while alive:
            positions = torch.tensor([first + len(w.generated) - 1 for w in alive])
            hidden = decoder.step(positions, torch.tensor([w.generated[-1] for w in alive]))
            tokens = model.adapter.logits(hidden).float().argmax(-1).tolist()
            keep = []
            for i, (walk, token) in enumerate(zip(alive, tokens)):
                walk.steps += 1
                state = _step(model, walk.generated, token, stops, True)
                if state != "go" or len(walk.generated) == max_new_tokens:
                    walk.answer = _answer(model, walk.generated, state == "stop")
                else:
                    keep.append(i)
            if len(keep) < len(alive):
                alive = [alive[i] for i in keep]
                if alive:
                    decoder.keep(keep)
