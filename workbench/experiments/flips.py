"""Decision flips: which examples each selector's repair flips against dense, and which it rescues.

A flip is an answer that differs from the dense answer after SQuAD normalization (`flip`) or
token for token (`flip_strict`). An example is *rescued* by a selector at a budget when the
splice flipped it and the repair does not. A drawn control (the coin) is read as the share of its
draws, never by a vote over them.
"""

from __future__ import annotations

import pandas as pd

from workbench.diagnosis.graded import GRADED_COLUMNS
from workbench.experiments.summary import per_example, rate_interval


def flip_matrix(outcomes: pd.DataFrame, budget: float, strict: bool = False) -> pd.DataFrame:
    """Examples x selectors at one budget: the share of draws whose repaired answer flips against
    dense (1.0 / 0.0 for a selector that is not drawn; a coin's cell is its mean over draws, never
    a vote)."""
    cells = per_example(outcomes)
    cells = cells[(cells["budget"] - budget).abs() < 1e-9]
    order = list(dict.fromkeys(cells["selector"]))
    matrix = cells.pivot(index="example_id", columns="selector", values="flip_strict" if strict else "flip")
    return matrix[order].astype(float)


def flip_rates(outcomes: pd.DataFrame, strict: bool = False) -> pd.DataFrame:
    """Flip rate per selector and budget (a drawn control: the mean over draws, its flips the
    expected count of one draw) with 95% intervals (Wilson, or bootstrap over examples for a
    drawn control's means)."""
    column = "flip_strict" if strict else "flip"
    rows = []
    for (label, budget), cell in per_example(outcomes).groupby(["selector", "budget"], sort=False):
        low, high = rate_interval(cell[column].to_numpy(float))
        rows.append({"selector": label, "budget": budget, "flips": float(cell[column].sum()), "n": len(cell),
                     "flip_rate": float(cell[column].mean()), "low": low, "high": high})
    return pd.DataFrame(rows)


def rescues(outcomes: pd.DataFrame, budget: float, baseline: str = "none", strict: bool = False) -> pd.DataFrame:
    """Per selector at a budget: the examples it rescues (baseline flipped, repair does not) and
    breaks (the reverse). A drawn control, as the repair or the baseline, counts by the share of its
    draws that flip: the expected number for one draw of each (a draw of the baseline against one of
    the repair), never a vote over draws; the examples listed are those any draw rescues or breaks.
    `strict`: token-exact flips (`flip_strict`) in place of normalized ones."""
    matrix = flip_matrix(outcomes, budget, strict=strict)
    flipped = matrix[baseline] if baseline in matrix else (matrix > 0).any(axis=1).astype(float)  # [example] share
    rows = []
    for label in matrix.columns:
        share = matrix[label]
        rescued, broken = flipped * (1 - share), (1 - flipped) * share
        rows.append({"selector": label, "rescued": float(rescued.sum()), "broken": float(broken.sum()),
                     "rescued_examples": rescued.index[rescued > 0].tolist(),
                     "broken_examples": broken.index[broken > 0].tolist()})
    return pd.DataFrame(rows)


def rescue_overlap(outcomes: pd.DataFrame, budget: float, baseline: str = "none", strict: bool = False) -> pd.DataFrame:
    """Selectors x selectors: how many examples both rescue (the diagonal: the examples each rescues; a
    coin, those any draw rescues)."""
    table = rescues(outcomes, budget, baseline, strict).set_index("selector")["rescued_examples"]
    sets = {label: set(ids) for label, ids in table.items()}
    return pd.DataFrame({a: {b: len(sets[a] & sets[b]) for b in sets} for a in sets})


def graded_rates(outcomes: pd.DataFrame, strict: bool = False) -> pd.DataFrame:
    """Per selector and budget, the flip rate (`strict`: token-exact) beside the graded outcomes
    against dense (means over examples of each example's mean over draws): how far the output moved,
    not only whether."""
    flip = "flip_strict" if strict else "flip"
    cells = per_example(outcomes)
    table = cells.groupby(["selector", "budget"], sort=False)[[flip, *GRADED_COLUMNS]].mean().reset_index()
    return table.rename(columns={flip: "flip_rate"})
