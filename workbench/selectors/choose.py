"""`choose`: the one way a selector's scores become the rows it recomputes at a budget.

    spec = parse_selector("bcr")                      # chunk unit
    rows, meta = choose(spec, scores, 0.2, pool)      # scores [n_pool] -> rows [k] into the pool
    positions = pool[rows]

The budget is a fraction of the candidate pool (`selectors.budget.budget_rows`); the reference bounds
(`none`, `full`) ignore scores and budget; a selector with a `spend` hook spends its own rows; a
matched coin (`coin:A`) places A's units by its draw's seed. `diagnose`, the pipeline's BCR and
the GPU bench all choose here.
"""

from __future__ import annotations

import torch

from workbench.errors import WorkbenchError
from workbench.selectors.budget import budget_rows
from workbench.selectors.registry import SelectorSpec
from workbench.selectors.units import UnitOptions, matched_coin, select_rows
from workbench.signals.signal_set import SignalSet


def choose(spec: SelectorSpec, scores: torch.Tensor, budget: float, pool: torch.Tensor,
           units: UnitOptions = UnitOptions(), *, coin_seed: int | None = None,
           signals: SignalSet | None = None) -> tuple[torch.Tensor, dict]:
    """Row indices (into the pool, int64 on the cpu, ascending) that `spec` spends at `budget`, and
    the unit's record {n_requested, n_units, skipped, budget_matched}.

    scores: [n_pool], aligned to `pool` ([n_pool] absolute positions). `signals` is read by a
    selector's `spend` hook and by `units.chunk_scope == "passage"` (the passages of the pool's
    rows); `coin_seed` is a matched coin's draw seed (`coin:A` gets A's scores)."""
    n = len(pool)
    if spec.info.fixed == "none":
        return torch.empty(0, dtype=torch.long), {"n_requested": 0, "n_units": 0, "skipped": False,
                                                  "budget_matched": True}
    if spec.info.fixed == "all":
        return torch.arange(n), {"n_requested": n, "n_units": n, "skipped": False, "budget_matched": True}
    spend = spec.informed.spend
    if signals is None and (spend is not None or units.chunk_scope == "passage"):
        raise WorkbenchError(f"choosing {spec.label!r} reads the signals (its own spend, or passage-scoped "
                             "units): pass signals=")
    if spec.matches is not None and coin_seed is None:
        raise WorkbenchError(f"{spec.label!r} is a matched coin: pass its draw's coin_seed=")
    segments = signals.ctx.layout.segment_ids()[pool] if units.chunk_scope == "passage" else None  # [n_pool]
    n_rows = budget_rows(budget, n)
    sel = select_rows(scores, spend(signals, pool, n_rows) if spend else n_rows, spec.unit,
                      chunk_size=units.chunk_size, tau=units.tau, segments=segments, max_span=units.grow_max_span)
    if spec.matches is not None:
        sel = matched_coin(sel, n, coin_seed, chunk_size=units.chunk_size, segments=segments)
    return sel.rows.cpu(), {"n_requested": n_rows, "n_units": sel.n_units, "skipped": sel.skipped,
                            "budget_matched": sel.budget_matched and sel.n_spent == n_rows}
