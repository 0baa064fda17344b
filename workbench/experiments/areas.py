"""The area of a per-example measure over a run's budget grid: the trapezoid over the budgets as
they are (no 0 or 1 added), divided by the grid's span, so an area is a mean level in the
measure's own units (a measure of 1 at every budget has area 1)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError

AUC = "auc"  # the budget of a contrast read over the whole grid (`A:B@auc`)


def budget_grid(outcomes: pd.DataFrame) -> tuple[float, ...]:
    """The run's budgets, ascending; refused in one line when fewer than two (no area)."""
    grid = tuple(sorted({float(b) for b in outcomes["budget"]}))
    if len(grid) < 2:
        raise WorkbenchError(f"an area over budgets needs at least two; this run has {', '.join(map(str, grid))}")
    return grid


def area(values, budgets) -> np.ndarray:
    """trapz(values, budgets) / (max b - min b) along the last axis. values: [..., n_budgets]"""
    b, v = np.asarray(budgets, dtype=float), np.asarray(values, dtype=float)
    return ((v[..., 1:] + v[..., :-1]) / 2 * np.diff(b)).sum(axis=-1) / (b[-1] - b[0])


def area_by_draw(rows: pd.DataFrame, column: str, grid) -> pd.DataFrame:
    """Examples x draws of one selector's area of `column` over `grid` (one column, -1, for a selector
    that is not drawn). An example is kept where it has every budget of the grid. rows: its outcomes"""
    draw = rows["draw"].fillna(-1).astype(int) if "draw" in rows else pd.Series(-1, index=rows.index)
    wide = pd.DataFrame({"example_id": rows["example_id"].to_numpy(), "draw": draw.to_numpy(),
                         "budget": rows["budget"].astype(float).to_numpy(),
                         "value": rows[column].astype(float).to_numpy()}).pivot_table(
        index=["example_id", "draw"], columns="budget", values="value", aggfunc="mean")
    wide = wide.reindex(columns=list(grid)).dropna()
    areas = pd.Series(area(wide.to_numpy(), grid), index=wide.index).unstack("draw")
    return areas.dropna()  # an example missing a draw at some budget is left out, as one missing a budget
