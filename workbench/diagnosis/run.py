"""`diagnose(model, example, config)`: one example, every signal, every repair.

Signals are computed once (`SignalSet`) and serve every selector and budget. Every distinct
row set is a cell of one batched pass (`engine.answers.answer_cells`): repair, suffix prefill and
the dense answer teacher-forced share it, and only answers that leave the dense one decode
further. Each repair's outcome is the receiver's greedy answer, its flip against the dense
answer, EM/F1 against gold, the dense answer's log-probability under the repaired cache, and
the deviation left at every layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.context import Context, build_context
from workbench.decode import Answer, stop_token_ids
from workbench.diagnosis.config import DiagnoseConfig
from workbench.diagnosis.graded import graded
from workbench.diagnosis.layer_effects import SuffixCapture, effects_table
from workbench.diagnosis.record import (
    AnswerRecord, Answers, AttributionSummary, ContextSummary, Diagnosis, Timing,
)
from workbench.diagnosis.tables import (
    ATTRIBUTION_COLUMNS, answer_tokens_table, layer_signals_table, residual_rows, token_signals_table, tokens_table,
)
from workbench.engine.answers import answer_cells
from workbench.engine.hooks import compose
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel
from workbench.repair import attention_pairs
from workbench.selectors import SelectorSpec, choose, parse_selectors, random_scores
from workbench.signals import Cost, SignalSet, deviation_frame
from workbench.signals.deviation import ResidualMeter
from workbench.tasks import Example
from workbench.version import __version__


def _record(answer: Answer, example: Example) -> AnswerRecord:
    em, f1, contains = example.score(answer.text)  # "em" of an all-values gold: every value named
    return AnswerRecord(answer.text, tuple(answer.token_ids), answer.stopped, em, f1, contains)


ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
STAGES = ("context", "signals", "repairs")


def _reporter(progress: bool | ProgressFn, example_id: str) -> ProgressFn:
    """A callable from `progress`: itself, a tqdm bar (True) or nothing (False)."""
    if callable(progress):
        return progress
    if not progress:
        return lambda stage, done, total: None
    bar = tqdm(total=1, desc=f"example {example_id}", unit="step")

    def report(stage: str, done: int, total: int) -> None:
        bar.set_description(f"example {example_id}: {stage}")
        bar.total, bar.n = total, done
        bar.refresh()
    return report


def diagnose(model: LoadedModel, example: Example, config: DiagnoseConfig | None = None, *,
             ctx: Context | None = None, progress: bool | ProgressFn = True, hooks=None, layer_effects: bool = False,
             **overrides) -> Diagnosis:
    """Diagnose one example under `config` (keywords override its fields, e.g. `budgets=(0.2,)`).

    Every input is checked before any model work. `ctx` reuses a Context already built for
    this example. `progress` is True (a progress bar), False, or a callable `(stage, done,
    total)` called as the stages (`STAGES`) advance: the repairs stage counts cells done.
    With `config.attribution`, the AtP check runs (first-order estimates vs actual patching
    of `patch_max_tokens` tokens, K+V, K only, V only). `hooks` ({hook point name: fn(tensor,
    hook)}, `engine.hooks`) run on every cell's pass (the splice's and each repair's, with their
    answers), never on the dense reference's: they change the outcomes, not what they are judged by.
    `layer_effects` adds the "layer_effects" table (`diagnosis.layer_effects`) of every selection
    (a drawn one's first draw), read by hooks from the cells' pass (after `hooks`: it sees what
    they left) and the dense one, not run again.
    """
    config = (config or DiagnoseConfig()).with_(**overrides).checked()
    if ctx is not None and ctx.dense is None:
        raise WorkbenchError("diagnose needs a dense reference (its flips, residuals and graded outcomes are "
                             "judged against the dense answer); the context given has none (dense=None)")
    specs = parse_selectors(config.selectors)
    report = _reporter(progress, example.id)
    started = time.perf_counter()
    report("context", 0, 1)
    ctx = ctx or build_context(model, example, rerotation=config.rerotation)
    t_context = time.perf_counter() - started
    signals = SignalSet(ctx, config.signal_options)
    dense = _record(ctx.generate(ctx.dense, config.max_new_tokens), example)
    # The dense answer as a decision: its tokens and the end-of-turn token it stopped on.
    dense_ids = list(dense.token_ids) + ([min(stop_token_ids(model))] if dense.stopped else [])

    pool = ctx.layout.pool_positions(config.pool)  # [n_pool]
    exact = ~torch.isin(pool, ctx.layout.changed_positions)  # [n_pool]: rows exact by construction
    in_reused = torch.searchsorted(ctx.reused_positions, pool)  # [n_pool]: where each sits among the scores
    selections, chosen = [], {}  # chosen: (label, budget, draw) -> (positions, context mask or None)
    for i, spec in enumerate(specs):
        report("signals", i, len(specs))
        for draw in range(config.coin_draws) if spec.info.drawn else (None,):
            # [n_reused]: signals are computed once and serve every selector, draw and budget
            if spec.matches is not None:  # a matched coin places the units of the selector it copies
                scores = spec.matches.info.score(signals)
            else:
                scores = spec.info.score(signals, draw) if spec.info.drawn else spec.info.score(signals)
            for budget in config.budgets:
                seed = signals.coin_seed(draw) if spec.matches is not None else None
                rows, meta = choose(spec, scores[in_reused], budget, pool, config.unit_options, coin_seed=seed,
                                    signals=signals)
                positions = pool[rows]
                context = _context(spec, signals, positions, scores, budget, seed)
                chosen[spec.label, budget, draw] = positions, context
                selections.append({"selector": spec.label, "unit": spec.unit, "budget": budget, "draw": draw,
                                   **meta, "n_recomputed": len(positions), "n_spent_exact": int(exact[rows].sum()),
                                   **_attention(model, positions, ctx.layout.suffix_start, context),
                                   "positions": positions.tolist()})
    # One cell per distinct (rows, context); the empty set answers for the splice.
    row_sets = {((), None): (torch.empty(0, dtype=torch.long), None)}
    for positions, context in chosen.values():
        row_sets.setdefault(_cell_key(positions, context), (positions, context))
    # layer_effects: the suffix's residuals of the splice, each selection (a drawn one's first draw) and dense,
    # kept from the passes below (after the user's hooks) rather than run again
    effects = {(label, budget): list(row_sets).index(_cell_key(*picked))
               for (label, budget, draw), picked in chosen.items() if not draw} if layer_effects else {}
    capture = SuffixCapture(ctx, [0, *effects.values()]) if layer_effects else None
    dense_capture = SuffixCapture(ctx) if layer_effects else None
    t_repairs = time.perf_counter()
    cells = answer_cells(model, ctx.spliced, ctx.layout.ids, [rows for rows, _ in row_sets.values()], ctx.suffix_ids,
                         dense_ids, config.max_new_tokens, progress=lambda done, total: report("repairs", done, total),
                         contexts=[context for _, context in row_sets.values()],
                         hooks=compose(hooks, capture.hooks()) if capture else hooks)
    # The dense cache through the same pass: the first-token distribution the graded outcomes read.
    (dense_cell,) = answer_cells(model, ctx.dense, ctx.layout.ids, [row_sets[(), None][0]], ctx.suffix_ids, dense_ids,
                                 config.max_new_tokens, hooks=dense_capture.hooks() if dense_capture else None)
    t_repairs = time.perf_counter() - t_repairs
    by_rows = dict(zip(row_sets, cells))
    spliced = _record(by_rows[(), None].answer, example)
    meter = ResidualMeter(ctx.spliced, ctx.dense, ctx.reused_positions)
    attention = {(r["selector"], r["budget"], r["draw"]): r for r in selections}

    outcomes, residuals = [], []
    for (label, budget, draw), (positions, context) in chosen.items():
        unit = parse_selectors([label])[0].unit
        cell = by_rows[_cell_key(positions, context)]
        pairs = attention[label, budget, draw]
        answer = _record(cell.answer, example)
        flip, flip_strict = answer.flips(dense)
        outcomes.append({"example_id": example.id, "selector": label, "unit": unit, "budget": budget, "draw": draw,
                         "pool": config.pool, "n_pool": len(pool), "n_reused": ctx.n_reused,
                         "n_recomputed": len(positions), "n_spent_exact": int((~torch.isin(
                             positions, ctx.layout.changed_positions)).sum()), "dense_answer": dense.text,
                         "answer": answer.text, "flip": flip, "flip_strict": flip_strict, "em": answer.em,
                         "f1": answer.f1, "contains": answer.contains, "dense_logprob": cell.reference_logprob,
                         **graded(cell, dense.text, dense_ids, dense_cell.first_logp),
                         "attention_pairs": pairs["attention_pairs"], "attention_saved": pairs["attention_saved"],
                         "seconds": t_repairs / len(cells)})
        residual = meter.of(cell.repaired.positions, cell.repaired.keys, cell.repaired.values)
        residuals += residual_rows(label, unit, budget, residual, draw)
    costs = [{"selector": spec.label, **spec.info.cost(signals).to_dict()} for spec in specs]

    check = signals["attribution"] if config.attribution else None
    tables = {
        "tokens": tokens_table(ctx),
        "token_signals": token_signals_table(signals),
        "layer_signals": layer_signals_table(signals),
        "deviation": deviation_frame(ctx).drop(columns=["example_id"], errors="ignore"),
        "selections": _with_draws(pd.DataFrame(selections)),
        "outcomes": _with_draws(pd.DataFrame(outcomes)),
        "residual": _with_draws(pd.DataFrame(residuals)),
        "costs": pd.DataFrame(costs),
        "signal_costs": pd.DataFrame([{"signal": name, **cost.to_dict()} for name, cost in signals.costs.items()],
                                     columns=["signal", *Cost().to_dict()]),
        "attribution": check.frame if check else pd.DataFrame(columns=ATTRIBUTION_COLUMNS),
        "answer_tokens": _with_draws(answer_tokens_table(
            model.tokenizer, dense_ids, [("dense", None, None, dense_cell), ("spliced", None, None, by_rows[(), None]),
                                         *((label, budget, draw, by_rows[_cell_key(*cell)])
                                           for (label, budget, draw), cell in chosen.items())])),
    }
    if layer_effects:  # the splice is cell 0, the empty row set; a cell's residuals read once, its lens run once
        by_cell = {cell: capture.residuals(cell) for cell in {0, *effects.values()}}
        tables["layer_effects"] = effects_table(ctx, by_cell[0], dense_capture.residuals(0),
                                                {key: by_cell[cell] for key, cell in effects.items()})
    segments = tuple({"name": s.name, "kind": s.kind, "start": s.start, "end": s.end} for s in ctx.layout.segments)
    timing = Timing(context_s=t_context, signals_s=sum(c.seconds for c in signals.costs.values()),
                    repairs_s=t_repairs, n_repairs=len(cells), total_s=time.perf_counter() - started)
    report("repairs", len(cells), len(cells))
    return Diagnosis(
        example=example, config=config, model=model.describe(), answers=Answers(dense, spliced),
        context=ContextSummary(ctx.layout.n_tokens, ctx.n_reused, segments, ctx.layer0_error(), ctx.rerotation,
                               tuple(ctx.rope_floor.tolist()) if ctx.rope_floor is not None else (),
                               ctx.splice_tolerance()),
        tables=tables, timing=timing,
        attribution=AttributionSummary(check.summary(), {k: vars(v) for k, v in check.correlations.items()})
        if check else None,
        draft_ids=tuple(signals["draft"].draft_ids) if "draft" in signals else (),
        workbench_version=__version__, ctx=ctx)


def _with_draws(table: pd.DataFrame) -> pd.DataFrame:
    """The `draw` column as nullable integers (missing for selectors that are not drawn)."""
    return table.assign(draw=table["draw"].astype("Int64")) if "draw" in table else table


def _cell_key(positions: torch.Tensor, context: torch.Tensor | None) -> tuple:
    """What makes two repairs the same cell: their rows and the keys their rows may attend to."""
    return tuple(positions.tolist()), None if context is None else tuple(context.nonzero().flatten().tolist())


def _context(spec: SelectorSpec, signals: SignalSet, positions: torch.Tensor, scores: torch.Tensor, budget: float,
             coin_seed: int | None) -> torch.Tensor | None:
    """The context mask the repair of `positions` is restricted to (None: every key). A matched coin
    of a restricting selector (`coin:relaxkv`) ranks its context rows by a coin of its own."""
    if spec.informed.restrict is None or not len(positions):
        return None
    ranking = scores if spec.matches is None else random_scores(signals.ctx.n_reused, coin_seed ^ 1)
    return spec.informed.restrict(signals, positions, ranking, budget)


def _attention(model: LoadedModel, positions: torch.Tensor, n_keys: int, context: torch.Tensor | None) -> dict:
    """Query-key pairs (over layers) the repair scores, and those a restricted context saved."""
    full = attention_pairs(model, positions, n_keys)
    used = full if context is None else attention_pairs(model, positions, n_keys, context)
    return {"attention_pairs": used, "attention_saved": full - used}
