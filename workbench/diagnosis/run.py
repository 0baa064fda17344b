"""`diagnose(model, example, config)`: one example, every signal, every repair.

Signals are computed once (`SignalSet`) and serve every selector and budget; repairs of an
identical row set are computed once. Each repair's outcome is the receiver's greedy answer,
its flip against the dense answer, EM/F1 against gold, the dense answer's log-probability
under the repaired cache, and the deviation left at every layer.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.context import Context, build_context
from workbench.decode import Answer, stop_token_ids
from workbench.diagnosis.config import DiagnoseConfig
from workbench.diagnosis.record import (
    AnswerRecord, Answers, AttributionSummary, ContextSummary, Diagnosis, Timing,
)
from workbench.diagnosis.tables import (
    ATTRIBUTION_COLUMNS, layer_signals_table, residual_rows, token_signals_table, tokens_table,
)
from workbench.models import LoadedModel
from workbench.repair import budget_rows
from workbench.selectors import SelectorSpec, parse_selectors, select_rows
from workbench.signals import SignalSet, deviation_frame, residual_deviation
from workbench.tasks import Example, best_em_f1
from workbench.version import __version__


def _record(answer: Answer, example: Example) -> AnswerRecord:
    em, f1 = best_em_f1(answer.text, example.gold)
    return AnswerRecord(answer.text, tuple(answer.token_ids), answer.stopped, em, f1)


def diagnose(model: LoadedModel, example: Example, config: DiagnoseConfig | None = None, *,
             ctx: Context | None = None, progress: bool = True, **overrides) -> Diagnosis:
    """Diagnose one example under `config` (keywords override its fields, e.g. `budgets=(0.2,)`).

    Every input is checked before any model work. `ctx` reuses a Context already built for
    this example. With `config.attribution`, the AtP check runs (first-order estimates vs
    actual patching of `patch_max_tokens` tokens, K+V, K only, V only).
    """
    config = replace(config or DiagnoseConfig(), **overrides).checked()
    specs = parse_selectors(config.selectors)
    started = time.perf_counter()
    ctx = ctx or build_context(model, example, rerotation=config.rerotation)
    t_context = time.perf_counter() - started
    signals = SignalSet(ctx, config.signal_options)
    dense = _record(ctx.generate(ctx.dense, config.max_new_tokens), example)
    spliced = _record(ctx.generate(ctx.spliced, config.max_new_tokens), example)
    # The dense answer as a decision: its tokens and the end-of-turn token it stopped on.
    dense_ids = list(dense.token_ids) + ([min(stop_token_ids(model))] if dense.stopped else [])

    repairs: dict[tuple[int, ...], dict] = {}  # row set -> outcome, shared across selectors

    def outcome(positions: torch.Tensor) -> dict:
        key = tuple(positions.tolist())
        if key not in repairs:
            start = time.perf_counter()
            cache = ctx.repair(positions)
            answer = _record(ctx.generate(cache, config.max_new_tokens), example)
            flip, flip_strict = answer.flips(dense)
            repairs[key] = {
                "answer": answer.text, "flip": flip, "flip_strict": flip_strict, "em": answer.em, "f1": answer.f1,
                "dense_logprob": ctx.teacher_forced(cache, dense_ids).logprob,
                "seconds": time.perf_counter() - start,
                "residual": residual_deviation(cache, ctx.dense, ctx.reused_positions),
            }
        return repairs[key]

    selections, outcomes, residuals = [], [], []
    cells = [(spec, b) for spec in specs for b in config.budgets]
    for spec, budget in tqdm(cells, desc=f"example {example.id}", disable=not progress, unit="repair"):
        scores = spec.info.score(signals)  # [n_reused]; signals are computed once
        rows, meta = _choose(spec, scores, budget, ctx, config)
        positions = ctx.reused_positions[rows]
        result = outcome(positions)
        label = spec.label
        selections.append({"selector": label, "unit": spec.unit, "budget": budget, **meta,
                           "n_recomputed": len(positions), "positions": positions.tolist()})
        outcomes.append({"example_id": example.id, "selector": label, "unit": spec.unit, "budget": budget,
                         "n_reused": ctx.n_reused, "n_recomputed": len(positions), "dense_answer": dense.text,
                         **{k: v for k, v in result.items() if k != "residual"}})
        residuals += residual_rows(label, spec.unit, budget, result["residual"])
    costs = [{"selector": spec.label, **spec.info.cost(signals).to_dict()} for spec in specs]

    check = signals["attribution"] if config.attribution else None
    tables = {
        "tokens": tokens_table(ctx),
        "token_signals": token_signals_table(signals),
        "layer_signals": layer_signals_table(signals),
        "deviation": deviation_frame(ctx).drop(columns=["example_id"], errors="ignore"),
        "selections": pd.DataFrame(selections),
        "outcomes": pd.DataFrame(outcomes),
        "residual": pd.DataFrame(residuals),
        "costs": pd.DataFrame(costs),
        "attribution": check.frame if check else pd.DataFrame(columns=ATTRIBUTION_COLUMNS),
    }
    segments = tuple({"name": s.name, "kind": s.kind, "start": s.start, "end": s.end} for s in ctx.layout.segments)
    timing = Timing(context_s=t_context, signals_s=sum(c.seconds for c in signals.costs.values()),
                    repairs_s=sum(r["seconds"] for r in repairs.values()), n_repairs=len(repairs),
                    total_s=time.perf_counter() - started)
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


def _choose(spec: SelectorSpec, scores: torch.Tensor, budget: float, ctx: Context,
            config: DiagnoseConfig) -> tuple[torch.Tensor, dict]:
    """Row indices (into the reused rows) a selector spends at a budget, and the unit's record."""
    n = ctx.n_reused
    if spec.info.fixed == "none":
        return torch.empty(0, dtype=torch.long), {"n_requested": 0, "n_units": 0, "skipped": False,
                                                  "budget_matched": True}
    if spec.info.fixed == "all":
        return torch.arange(n), {"n_requested": n, "n_units": n, "skipped": False, "budget_matched": True}
    segments = ctx.layout.segment_ids()[ctx.reused_positions]
    units = config.unit_options
    sel = select_rows(scores, budget_rows(budget, n), spec.unit, chunk_size=units.chunk_size, tau=units.tau,
                      segments=segments)
    return sel.rows.cpu(), {"n_requested": sel.n_requested, "n_units": sel.n_units, "skipped": sel.skipped,
                            "budget_matched": sel.budget_matched}
