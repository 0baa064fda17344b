"""Readings over a run's whole budget grid, per selector: the share of the gap closed as the area
under its curve (`gap_auc_table`), and the rows recomputed needed to reach a share of dense
(`rows_to_target_table`), each with a paired bootstrap interval over examples.

The area is per example: a_i = trapz(x_i(b), b) / (max b - min b) over the run's budgets as they
are (`areas.area`; a drawn control's mean over draws at each budget first), and
AUC = (mean a - mean splice) / (mean dense - mean splice), the trapezoid area of the gap curve
over the grid divided by its span. Dense and the splice do not depend on the budget.
"""

from __future__ import annotations

import math

import pandas as pd

from workbench import stats
from workbench.experiments.areas import area, budget_grid
from workbench.experiments.summary import gap_measure, gap_sides, per_example
from workbench.runstore import SweepRun


def _wide(cells: pd.DataFrame, column: str, grid) -> pd.DataFrame:
    """Examples x budgets of one selector's per-example `column` (examples with every budget)."""
    return cells.pivot_table(index="example_id", columns="budget", values=column,
                             aggfunc="mean").reindex(columns=list(grid)).dropna()


def _per_selector(run: SweepRun, measure: str):
    """(measure, grid, [(label, its per-example rows, values [examples x budgets], their sides)])."""
    m = gap_measure(run, measure)
    grid = budget_grid(run.outcomes)
    table = per_example(run.outcomes)
    sides = gap_sides(run, m).set_index("example_id")
    found = []
    for label, cells in table.groupby("selector", sort=False):
        values = _wide(cells, m.column, grid)
        values = values.loc[values.index.intersection(sides.index)]
        found.append((label, cells, values, sides.loc[values.index]))
    return m, grid, found


def gap_auc_table(run: SweepRun, measure: str = "em") -> pd.DataFrame:
    """One row per selector: n, area (the mean of a_i), auc (the share of the gap closed by the
    area) and its paired bootstrap interval (`stats.gap_closed_ci`; NaN without a gap).
    `attrs`: measure and grid."""
    m, grid, found = _per_selector(run, measure)
    rows = []
    for label, _, values, sides in found:
        a = area(values.to_numpy(), grid)
        splice, dense = sides["spliced_value"].to_numpy(), sides["dense_value"].to_numpy()
        if len(a) >= 2:
            auc, low, high = stats.gap_closed_ci(a, splice, dense)
        else:
            auc, low, high = (stats.share_of_gap_recovered(a.mean(), splice.mean(), dense.mean())
                              if len(a) else math.nan), math.nan, math.nan
        rows.append({"selector": label, "n": len(a), "area": float(a.mean()) if len(a) else math.nan,
                     "auc": auc, "auc_low": low, "auc_high": high})
    out = pd.DataFrame(rows)
    out.attrs.update(measure=m.name, grid=grid)
    return out


def rows_to_target_table(run: SweepRun, measure: str = "em", share_of_dense: float = 0.9) -> pd.DataFrame:
    """One row per selector: the fewest rows recomputed per example (a budget's mean) at which the
    measure's mean reaches `share_of_dense` x dense's, as `summary.tokens_to_target` reads it, with a
    percentile interval resampling examples (`stats.cost_to_target_ci`); inf where it is not reached
    (the estimate, or a bound's share of resamples). `attrs`: measure, share."""
    m, grid, found = _per_selector(run, measure)
    rows = []
    for label, cells, values, sides in found:
        cost = _wide(cells, "n_recomputed", grid).reindex(values.index)
        if len(values) >= 2:
            rows_needed, low, high = stats.cost_to_target_ci(values.to_numpy(), cost.to_numpy(),
                                                             sides["dense_value"].to_numpy(), share_of_dense)
        else:
            rows_needed, low, high = math.nan, math.nan, math.nan
        rows.append({"selector": label, "n": len(values), "rows": rows_needed, "rows_low": low, "rows_high": high})
    out = pd.DataFrame(rows)
    out.attrs.update(measure=m.name, share=share_of_dense)
    return out
