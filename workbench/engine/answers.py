"""The receiver's answer from many repaired caches at once, with a reference answer's score.

For each cell (a set of rows to repair over the splice) one batched layer-serial pass
(`engine.cells.run_cells`) computes, in order of position,

    the repaired rows  |  the question suffix  |  the reference answer, teacher-forced

which is exactly repair, then suffix prefill, then teacher forcing, because each row only
attends to rows at earlier positions. The last suffix row and the teacher-forced rows give the
reference answer's log-probability and, read as a draft, the greedy answer: while the greedy
token equals the reference token, the next teacher-forced row is the greedy decode's own next
row. Only cells whose answer leaves the reference decode further (`engine.steps.Decoder`), one
batched row per step, with every row already computed kept as known K/V. The stopping rule is
`engine.decode.StopRule`; hooks (`engine.hooks`) run on the batched pass and every decode step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.batching import DEFAULT_MAX_BYTES, pack_sizes
from workbench.engine.cells import Cell, CellRows, run_cells
from workbench.engine.decode import Advance, Answer, StopRule, Walk, decode_greedy
from workbench.engine.graphs import StaticStep, graphs_wanted
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.engine.masks import check_context, check_positions
from workbench.engine.steps import Decoder
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, kv_bytes_per_position
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


@dataclass
class _Known:
    """The rows a cell that left the reference has computed: its decode goes on from them."""

    positions: torch.Tensor  # [known]
    keys: torch.Tensor  # [layer, kv_head, known, d_head]
    values: torch.Tensor


@torch.inference_mode()
def answer_cells(model: LoadedModel, base: KVCache, ids: torch.Tensor, row_sets: list[torch.Tensor],
                 suffix_ids: torch.Tensor, reference_ids, max_new_tokens: int = 24,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 progress: Callable[[int, int], None] | None = None,
                 contexts: list[torch.Tensor | None] | None = None, hooks=None) -> list[CellAnswer]:
    """Repair each row set of `row_sets` over `base` and answer from it (see the module docstring).

    ids: the context's token ids [pos] (row sets index into it); suffix_ids: [suffix];
    reference_ids: the answer to teacher-force (for example the dense answer and its end token);
    contexts: per row set, None or a context mask (bool [n]) its repaired rows are restricted to
    (`Cell.context`; the suffix and the answer always see every key); hooks: {name: fn}
    (`engine.hooks`), run on every pass.
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
    reference = [int(t) for t in reference_ids]
    forced = torch.tensor(reference[:-1], dtype=torch.long)  # inputs of the teacher-forced rows
    tail = torch.arange(n, n + n_suffix + len(forced))
    tail_ids = torch.cat([suffix_ids.cpu().long(), forced])
    cells = [Cell(torch.cat([rows.long().cpu(), tail]), torch.cat([ids.cpu()[rows.long().cpu()], tail_ids]),
                  context=context) for rows, context in zip(row_sets, contexts)]
    passes = run_cells(model, base, cells, max_bytes, progress, hooks)
    rule = StopRule.of(model, max_new_tokens)
    results, walks, known = [], [], {}
    for c, (rows, done) in enumerate(zip(row_sets, passes)):
        r = int(rows.numel())
        first = r + n_suffix - 1  # the row that predicts the first answer token
        pred = slice(first, first + max(len(reference), 1))
        # the predicting rows, one cell: the caller's cell c
        rows = Rows.one_cell(done.positions[pred], torch.tensor([c], device=done.positions.device)) if hooks else None
        logits = final_logits(model.adapter, done.hidden[pred], rows, hooks).float()  # [pred, vocab]
        logp = torch.log_softmax(logits, dim=-1)
        token_logprobs = tuple(float(logp[i, t]) for i, t in enumerate(reference))
        greedy = logits.argmax(-1).tolist()
        walk, i = Walk(), 0
        while rule.push(walk, greedy[i]):
            if greedy[i] == (reference[i] if i < len(reference) else None) and i + 1 < len(greedy):
                i += 1  # the next teacher-forced row is the greedy decode's own next row
            else:  # the answer leaves the reference: keep the rows before its next one
                keep = r + n_suffix + i
                known[c] = _Known(done.positions[:keep], done.keys[:, :, :keep], done.values[:, :, :keep])
                break
        walks.append(walk)
        repaired = CellRows(done.positions[:r], done.keys[:, :, :r], done.values[:, :, :r], done.hidden[:r])
        results.append([repaired, float(sum(token_logprobs)), token_logprobs, greedy[0], logp[0].cpu()])
    _decode(model, base, walks, known, n + n_suffix, rule, max_bytes, hooks)
    return [CellAnswer(repaired, rule.answer(walk), score, walk.steps, token_logprobs, first, first_logp)
            for walk, (repaired, score, token_logprobs, first, first_logp) in zip(walks, results)]


@torch.inference_mode()
def _decode(model: LoadedModel, base: KVCache, walks: list[Walk], known: dict[int, _Known], first: int,
            rule: StopRule, max_bytes: int, hooks: Hooks | None) -> None:
    """Decode the walks that left the reference, one batched row per step, in groups whose known
    rows fit in `max_bytes`."""
    per_row = kv_bytes_per_position(model)
    order = list(known)
    sizes = [known[c].positions.numel() for c in order]
    groups = pack_sizes(sizes, lambda members: len(members) * (sizes[members[-1]] + rule.max_new_tokens) * per_row
                        <= max_bytes)
    for group in groups:
        cells = [order[g] for g in group]
        decoder = Decoder(model, base, [Cell(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                                             known[c].positions, known[c].keys, known[c].values) for c in cells],
                          rule.max_new_tokens, hooks, cells)
        decode_greedy(rule, [walks[c] for c in cells], _stepper(model, decoder, [walks[c] for c in cells], first, hooks))


@torch.inference_mode()
def continue_answer(model: LoadedModel, prefilled: KVCache, logits: torch.Tensor, rule: StopRule,
                    hooks=None) -> Walk:
    """Greedy decoding on from a prefill that already ran, one row a step through the engine (its
    steps captured as a CUDA graph on CUDA without hooks: `engine.graphs`): the prefill's last
    position's `logits` ([vocab]) over `prefilled` (context and suffix, [layer, kv_head, pos,
    d_head]). `hooks` (`engine.hooks`) run on every step (one cell)."""
    hooks = Hooks.of(hooks, model.adapter)
    walk = Walk()
    if rule.max_new_tokens < 1:
        return walk
    none = torch.zeros(0, dtype=torch.long)
    empty = prefilled.keys.new_zeros(prefilled.n_layers, prefilled.keys.shape[1], 0, prefilled.keys.shape[3])
    decoder = Decoder(model, prefilled, [Cell(none, none, none, empty, empty)], rule.max_new_tokens, hooks)
    decode_greedy(rule, [walk], _stepper(model, decoder, [walk], prefilled.n_positions, hooks), logits[None])
    return walk


def _stepper(model: LoadedModel, decoder: Decoder, walks: list[Walk], first: int, hooks: Hooks | None) -> Advance:
    """The `advance` of `decode_greedy` for `walks` on `decoder`, whose cells are theirs in order;
    `first` is the position of an answer's first token. On CUDA without hooks a static step
    (`engine.graphs`) keeps every cell; otherwise ended cells leave the decoder."""
    if graphs_wanted(model, hooks):
        return _static_stepper(model, decoder, walks, first)
    alive = list(range(len(walks)))

    def advance(keep: list[int], tokens: list[int]) -> torch.Tensor:
        nonlocal alive
        if len(keep) < len(alive):
            decoder.keep(keep)
            alive = [alive[i] for i in keep]
        positions = torch.tensor([first + len(walks[c].generated) - 1 for c in alive])  # [alive]
        return decoder.logits(decoder.step(positions, torch.tensor(tokens))).float()  # [alive, vocab]
    return advance


def _static_stepper(model: LoadedModel, decoder: Decoder, walks: list[Walk], first: int) -> Advance:
    """`_stepper` through a `StaticStep`: every cell steps every time (an ended one on its last
    token, at its last position) and the logits of the cells still decoding are returned."""
    step = StaticStep(decoder, capture=model.device.type == "cuda")
    tokens_of = torch.zeros(len(walks), dtype=torch.long)  # [cell] each cell's last token fed
    alive = list(range(len(walks)))

    def advance(keep: list[int], tokens: list[int]) -> torch.Tensor:
        nonlocal alive
        alive = [alive[i] for i in keep]
        tokens_of[alive] = torch.tensor(tokens)
        positions = torch.tensor([first + len(walk.generated) - 1 for walk in walks])  # [cell]
        logits = step(positions, tokens_of)  # [cell, vocab]
        return logits if len(alive) == len(walks) else logits[torch.tensor(alive, device=logits.device)]
    return advance
