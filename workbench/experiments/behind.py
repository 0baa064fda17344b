"""The examples behind a contrast, to read before reporting it: a seeded sample of the examples
where A and B differ on the quantity the contrast tests, each with its gold, dense's answer and
both selectors' answers (a number can count an answer that runs on as lost evidence).

    kvwb summary RUN --measure retrieved --contrast cadence-grad:cacheblend@auc --read 10

At one budget an example's answers are those of that budget; at `@auc` they are those of the
budget where A's and B's values differ most for that example (the first such in the grid). A drawn
control (the coin) is read by its mean over draws, and its answer shown is its first draw's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.experiments.areas import budget_grid
from workbench.experiments.contrasts import _cells, _sides, get_measure, parse_contrast, resolve_coin
from workbench.runstore import SweepRun

ANSWER_CHARS = 120  # an answer is cut after this many characters (its length is shown)


@dataclass(frozen=True)
class Behind:
    """One contrast's differing examples and the sample of them to read."""

    a: str
    b: str
    at: str  # "0.2", or "auc over 0.05-0.5"
    measure: str
    n: int  # examples both selectors answered
    a_higher: int  # examples where A's value (the contrast's per-example quantity) exceeds B's
    b_higher: int
    seed: int
    drawn: bool  # a side is a drawn control: its mean over draws, its first draw's answer shown
    shown: pd.DataFrame  # one row per example read: example_id, budget, gold, dense, A, a_value, B, b_value


def examples_behind(run: SweepRun, text: str, measure: str, k: int = 10, seed: int = 0) -> Behind:
    """The examples behind contrast `text` ("A:B@budget" or "A:B@auc") on `measure`: how many differ
    each way, and a seeded sample of k of them (sorted by example id) with their answers."""
    a, b, budget = parse_contrast(text)
    m = get_measure(measure)
    b = resolve_coin(a, b, set(run.outcomes["selector"]))
    va, vb, ids, ra, rb = _sides(run, a, b, budget, m)
    diff = pd.Series(ra - rb, index=ids)
    differ = diff[diff.abs() > 1e-12]
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(differ.index.to_numpy(), size=min(k, len(differ)), replace=False).tolist(),
                    key=_id_order)
    over = isinstance(budget, str)
    grid = budget_grid(run.outcomes)
    rows = [_row(run, a, b, example, budget if not over else _widest(run, a, b, example, m, grid), m)
            for example in picked]
    at = f"auc over {grid[0]:g}-{grid[-1]:g}" if over else f"{float(budget):g}"
    drawn = va.shape[1] > 1 or vb.shape[1] > 1
    return Behind(a, b, at, m.name, len(ids), int((differ > 0).sum()), int((differ < 0).sum()), seed, drawn,
                  pd.DataFrame(rows, columns=["example_id", "budget", "gold", "dense", a, f"{a} {m.name}", b,
                                              f"{b} {m.name}"]))


def _id_order(example) -> tuple:
    """Example ids in their natural order ("2" before "10")."""
    text = str(example)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def _widest(run: SweepRun, a: str, b: str, example, m, grid) -> float:
    """The budget of the grid where A's and B's values (a coin's mean over draws) differ most for one example."""
    gaps = [abs(_value(run, a, example, budget, m) - _value(run, b, example, budget, m)) for budget in grid]
    return float(grid[int(np.argmax(gaps))])


def _value(run: SweepRun, label: str, example, budget: float, m) -> float:
    """One selector's measure for one example at one budget (a drawn control's mean over draws)."""
    cells = _cells(run.outcomes, label, float(budget), m)
    return float(cells.loc[example].mean()) if example in cells.index else float("nan")


def _row(run: SweepRun, a: str, b: str, example, budget: float, m) -> dict:
    ex = run.examples.set_index("example_id").loc[example]
    return {"example_id": example, "budget": float(budget), "gold": _short(ex.get("gold", "")),
            "dense": _short(ex.get("dense_answer", "")),
            a: _answer(run, a, example, budget), f"{a} {m.name}": _value(run, a, example, budget, m),
            b: _answer(run, b, example, budget), f"{b} {m.name}": _value(run, b, example, budget, m)}


def _answer(run: SweepRun, label: str, example, budget: float) -> str:
    """A selector's answer for one example at one budget (a drawn control: its first draw's)."""
    o = run.outcomes
    rows = o[(o["selector"] == label) & (o["example_id"] == example) & ((o["budget"] - budget).abs() < 1e-9)]
    if rows.empty or "answer" not in rows:
        return ""
    if "draw" in rows and rows["draw"].notna().any():
        rows = rows.sort_values("draw")
    return _short(rows["answer"].iloc[0])


def _short(text) -> str:
    """An answer on one line (newlines shown as ⏎), cut after ANSWER_CHARS with its length said."""
    text = "" if text is None or (isinstance(text, float) and np.isnan(text)) else str(text)
    flat = text.replace("\r\n", "\n").replace("\n", " ⏎ ")
    return flat if len(flat) <= ANSWER_CHARS else f"{flat[:ANSWER_CHARS]}… ({len(text)} chars)"


def behind_sentence(behind: Behind) -> str:
    """What a `Behind` counts and shows, in one sentence (its table follows it)."""
    where = "answers at the budget shown" + (", where the two differ most" if behind.at.startswith("auc") else "")
    if behind.drawn:
        where += "; the drawn control: its first draw's answer, its mean over draws"
    differ = behind.a_higher + behind.b_higher
    return (f"Behind {behind.a} vs {behind.b} at {behind.at} on {behind.measure}: of {behind.n} examples, "
            f"{behind.a} is higher in {behind.a_higher} and {behind.b} in {behind.b_higher}; "
            f"{len(behind.shown)} of those {differ} to read (a sample, seed {behind.seed}; {where})")

