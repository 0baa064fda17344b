"""Decision flips: which examples each selector's repair flips against dense, and which it rescues.

A flip is an answer that differs from the dense answer after SQuAD normalization (`flip`) or
token for token (`flip_strict`). An example is *rescued* by a selector at a budget when the
splice flipped it and the repair does not.
"""

from __future__ import annotations

import pandas as pd

from workbench import stats
from workbench.experiments.summary import per_example


def flip_matrix(outcomes: pd.DataFrame, budget: float, strict: bool = False) -> pd.DataFrame:
    """Examples x selectors at one budget: True where the repaired answer flips against dense
    (for a drawn control, the coin: in the majority of its draws)."""
    cells = per_example(outcomes)
    cells = cells[(cells["budget"] - budget).abs() < 1e-9]
    order = list(dict.fromkeys(cells["selector"]))
    matrix = cells.pivot(index="example_id", columns="selector", values="flip_strict" if strict else "flip")
    return (matrix[order] > 0.5).astype(bool)


def flip_rates(outcomes: pd.DataFrame, strict: bool = False) -> pd.DataFrame:
    """Flip rate per selector and budget (draws averaged) with Wilson 95% intervals of the
    per-example majority."""
    column = "flip_strict" if strict else "flip"
    rows = []
    for (label, budget), cell in per_example(outcomes).groupby(["selector", "budget"], sort=False):
        flips, n = int((cell[column] > 0.5).sum()), len(cell)
        low, high = stats.wilson_interval(flips, n)
        rows.append({"selector": label, "budget": budget, "flips": flips, "n": n,
                     "flip_rate": float(cell[column].mean()), "low": low, "high": high})
    return pd.DataFrame(rows)


def rescues(outcomes: pd.DataFrame, budget: float, baseline: str = "none") -> pd.DataFrame:
    """Per selector at a budget: the examples it rescues (baseline flipped, repair does not)."""
    matrix = flip_matrix(outcomes, budget)
    flipped = matrix[baseline] if baseline in matrix else matrix.any(axis=1)
    rows = []
    for label in matrix.columns:
        rescued = matrix.index[flipped & ~matrix[label]].tolist()
        broken = matrix.index[~flipped & matrix[label]].tolist()
        rows.append({"selector": label, "rescued": len(rescued), "broken": len(broken),
                     "rescued_examples": rescued, "broken_examples": broken})
    return pd.DataFrame(rows)


def rescue_overlap(outcomes: pd.DataFrame, budget: float, baseline: str = "none") -> pd.DataFrame:
    """Selectors x selectors: how many examples both rescue (the diagonal: each one's total)."""
    table = rescues(outcomes, budget, baseline).set_index("selector")["rescued_examples"]
    sets = {label: set(ids) for label, ids in table.items()}
    return pd.DataFrame({a: {b: len(sets[a] & sets[b]) for b in sets} for a in sets})
