"""`diagnose(model, example, selectors, budgets)`: one example, every signal, every repair.

Signals are computed once (`SignalSet`) and serve every selector and budget; repairs of an
identical row set are computed once. Each repair's outcome is the receiver's greedy answer,
its flip against the dense answer (token-exact and after SQuAD normalization), EM/F1 against
gold, the dense answer's log-probability under the repaired cache, and the deviation left
at every layer.
"""

from __future__ import annotations

import time

import pandas as pd
import torch
from tqdm.auto import tqdm

import workbench
from workbench.context import Context, build_context
from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel
from workbench.repair import budget_rows
from workbench.selectors import parse_selectors, select_rows
from workbench.selectors.registry import SelectorSpec
from workbench.signals.bundle import SignalSet
from workbench.signals.deviation import deviation_frame, residual_deviation
from workbench.tasks import Example, best_em_f1, normalize_answer

DEFAULT_SELECTORS = ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad",
                     "bcr", "bcr:grow", "bcr:single", "qattn", "oracle-patch")
DEFAULT_BUDGETS = (0.1, 0.2, 0.3, 0.5)


def check_budgets(budgets) -> list[float]:
    out = []
    for b in budgets:
        budget_rows(b, 1)  # raises a clear error outside [0, 1]
        out.append(float(b))
    if not out:
        raise WorkbenchError("no budgets given")
    return sorted(set(out))


def _answer_record(ctx: Context, answer) -> dict:
    em, f1 = best_em_f1(answer.text, ctx.example.gold)
    return {"text": answer.text, "token_ids": list(answer.token_ids), "stopped": answer.stopped, "em": em, "f1": f1}


def diagnose(model: LoadedModel, example: Example, selectors=DEFAULT_SELECTORS, budgets=DEFAULT_BUDGETS, *,
             seed: int = 0, check_layer: int = 1, draft_k: int = 2, patch_max_tokens: int = 64,
             chunk_size: int = 64, tau: float = 0.25, max_new_tokens: int = 24, attribution: bool = True,
             progress: bool = True, ctx: Context | None = None) -> Diagnosis:
    """Diagnose one example. All inputs are checked before any model work starts.

    `attribution` runs the AtP check (first-order estimates vs actual patching of a sample of
    `patch_max_tokens` tokens, K+V, K only, V only: 3 x that many teacher-forced forwards).
    """
    specs = parse_selectors(selectors)
    budgets = check_budgets(budgets)
    started = time.perf_counter()
    ctx = ctx or build_context(model, example)
    t_context = time.perf_counter() - started
    signals = SignalSet(ctx, check_layer=check_layer, draft_k=draft_k, patch_max_tokens=patch_max_tokens, seed=seed)
    dense = ctx.generate(ctx.dense, max_new_tokens)
    spliced = ctx.generate(ctx.spliced, max_new_tokens)
    dense_ids = list(dense.token_ids) + ([min(_stop_ids(ctx))] if dense.stopped else [])

    repairs: dict[tuple[int, ...], dict] = {}  # row set -> outcome, shared across selectors

    def outcome(positions: torch.Tensor) -> dict:
        key = tuple(positions.tolist())
        if key not in repairs:
            start = time.perf_counter()
            cache = ctx.repair(positions)
            answer = ctx.generate(cache, max_new_tokens)
            em, f1 = best_em_f1(answer.text, example.gold)
            residual = residual_deviation(cache, ctx.dense, ctx.reused_positions)
            repairs[key] = {
                "answer": answer.text,
                "flip": normalize_answer(answer.text) != normalize_answer(dense.text),
                "flip_strict": answer.token_ids != dense.token_ids,
                "em": em, "f1": f1,
                "dense_logprob": ctx.teacher_forced(cache, dense_ids).logprob,
                "seconds": time.perf_counter() - start,
                "residual": residual,
            }
        return repairs[key]

    selections, outcomes, residuals, costs = [], [], [], []
    cells = [(spec, b) for spec in specs for b in budgets]
    for spec, budget in tqdm(cells, desc=f"example {example.id}", disable=not progress, unit="repair"):
        scores = spec.info.score(signals)  # [n_reused]; signals are computed once
        rows, meta = _choose(spec, scores, budget, ctx, chunk_size, tau)
        positions = ctx.reused_positions[rows]
        result = outcome(positions)
        label = spec.label
        selections.append({"selector": label, "layout": spec.layout, "budget": budget, **meta,
                           "n_recomputed": len(positions), "positions": positions.tolist()})
        outcomes.append({"example_id": example.id, "selector": label, "layout": spec.layout, "budget": budget,
                         "n_reused": ctx.n_reused, "n_recomputed": len(positions), "dense_answer": dense.text,
                         **{k: v for k, v in result.items() if k != "residual"}})
        for kind, per_layer in result["residual"].items():
            residuals += [{"selector": label, "layout": spec.layout, "budget": budget, "layer": layer,
                           "kind": kind, "value": float(v)} for layer, v in enumerate(per_layer)]
    for spec in specs:
        costs.append({"selector": spec.label, **spec.info.cost(signals).__dict__})

    check = signals.attribution if attribution else None
    tables = {
        "tokens": _tokens_table(ctx),
        "token_signals": _token_signals(signals),
        "layer_signals": _layer_signals(signals),
        "deviation": deviation_frame(ctx).drop(columns=["example_id"], errors="ignore"),
        "selections": pd.DataFrame(selections),
        "outcomes": pd.DataFrame(outcomes),
        "residual": pd.DataFrame(residuals),
        "costs": pd.DataFrame(costs),
        "attribution": check.frame if check else pd.DataFrame(
            columns=["position", "segment", "kind", "estimate", "actual"]),
    }
    info = {
        "model": model.describe(),
        "config": {"selectors": [str(s) for s in specs], "budgets": budgets, "seed": seed,
                   "check_layer": check_layer, "draft_k": draft_k, "patch_max_tokens": patch_max_tokens,
                   "chunk_size": chunk_size, "tau": tau, "max_new_tokens": max_new_tokens},
        "answers": {"dense": _answer_record(ctx, dense), "spliced": _answer_record(ctx, spliced)},
        "n_tokens": ctx.layout.n_tokens, "n_reused": ctx.n_reused,
        "segments": [{"name": s.name, "kind": s.kind, "start": s.start, "end": s.end} for s in ctx.layout.segments],
        "layer0_error": ctx.layer0_error(),
        "draft_ids": list(signals.draft.draft_ids) if "draft" in signals.computed else [],
        "attribution_summary": check.summary() if check else "not computed (attribution=False)",
        "attribution_correlations": {k: vars(v) for k, v in check.correlations.items()} if check else {},
        "workbench_version": workbench.__version__,
        "timing": {"context_s": t_context, "signals_s": sum(c.seconds for c in signals.costs.values()),
                   "repairs_s": sum(r["seconds"] for r in repairs.values()), "n_repairs": len(repairs),
                   "total_s": time.perf_counter() - started},
    }
    diagnosis = Diagnosis(example, info, tables)
    diagnosis.ctx = ctx  # in memory only: the caches behind the tables (not saved)
    return diagnosis


def _stop_ids(ctx: Context) -> set[int]:
    from workbench.decode import stop_token_ids

    return stop_token_ids(ctx.model)


def _choose(spec: SelectorSpec, scores: torch.Tensor, budget: float, ctx: Context, chunk_size: int,
            tau: float) -> tuple[torch.Tensor, dict]:
    """Row indices (into the reused rows) a selector spends at a budget, and the layout's record."""
    n = ctx.n_reused
    if spec.info.fixed == "none":
        return torch.empty(0, dtype=torch.long), {"n_requested": 0, "n_units": 0, "skipped": False,
                                                  "budget_matched": True}
    if spec.info.fixed == "all":
        return torch.arange(n), {"n_requested": n, "n_units": n, "skipped": False, "budget_matched": True}
    segments = ctx.layout.segment_ids()[ctx.reused_positions]
    sel = select_rows(scores, budget_rows(budget, n), spec.layout, chunk_size=chunk_size, tau=tau,
                      segments=segments)
    return sel.rows.cpu(), {"n_requested": sel.n_requested, "n_units": sel.n_units, "skipped": sel.skipped,
                            "budget_matched": sel.budget_matched}


def _tokens_table(ctx: Context) -> pd.DataFrame:
    layout = ctx.layout
    reused = torch.zeros(layout.n_tokens, dtype=torch.bool)
    reused[layout.reused_positions] = True
    return pd.DataFrame({"position": range(layout.n_tokens), "token": list(layout.tokens),
                         "segment": layout.segment_names(), "passage": layout.segment_ids().tolist(),
                         "reused": reused.tolist()})


def _token_signals(signals: SignalSet) -> pd.DataFrame:
    """Every per-token score that was computed, one row per (signal, reused position)."""
    positions = signals.ctx.reused_positions.tolist()
    scores = {}
    if "deviation" in signals.computed:
        from workbench.selectors.builtin import densedev
        scores["densedev"] = densedev(signals)
    if "saliency" in signals.computed:
        scores.update(cadence_grad=signals.saliency.cadence_grad, cadence=signals.saliency.cadence,
                      first_order=signals.saliency.first_order)
    if "draft" in signals.computed:
        scores["draft_attention"] = signals.draft.scores(signals.ctx.reused_positions)
    if "question" in signals.computed:
        scores["question_attention"] = signals.question.scores(signals.ctx.reused_positions)
    if "check_layer" in signals.computed:
        scores.update(cacheblend=signals.check_layer.value_deviation, relay=signals.check_layer.relay)
    if "patch" in signals.computed:
        scores["patch_effect"] = torch.tensor(signals.patch["delta_loss"].to_numpy())
    frames = [pd.DataFrame({"signal": name, "position": positions, "value": values.double().numpy()})
              for name, values in scores.items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["signal", "position", "value"])


def _layer_signals(signals: SignalSet) -> pd.DataFrame:
    """Per-layer signals: CADENCE gradients and gates, draft and question attention."""
    positions = signals.ctx.reused_positions
    per_layer = {}
    if "saliency" in signals.computed:
        sal = signals.saliency
        per_layer.update(grad_sq_k=sal.grad_sq_k, grad_sq_v=sal.grad_sq_v, gated_k=sal.gated_k, gated_v=sal.gated_v)
    if "draft" in signals.computed:
        per_layer["draft_attention"] = signals.draft.per_layer[:, positions]
    if "question" in signals.computed:
        per_layer["question_attention"] = signals.question.per_layer[:, positions]
    frames = []
    for name, table in per_layer.items():  # [layer, n]
        n_layers, n = table.shape
        frames.append(pd.DataFrame({"signal": name, "layer": torch.arange(n_layers).repeat_interleave(n).numpy(),
                                    "position": positions.repeat(n_layers).numpy(),
                                    "value": table.double().flatten().numpy()}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["signal", "layer", "position", "value"])
