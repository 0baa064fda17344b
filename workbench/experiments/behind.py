"""The examples behind a contrast, to read before reporting it: a seeded sample of the examples
where A and B differ on the quantity the contrast tests, each with its gold, dense's answer and
both selectors' answers (a number can count an answer that runs on as lost evidence).

    kvwb summary RUN --measure retrieved --contrast cadence-grad:cacheblend@auc --read 10

At one budget an example's answers are those of that budget; at `@auc` they are those of the
budget where A's and B's values differ most for that example (the first such in the grid). A drawn
control (the coin) is read by its mean over draws, and its answer shown is its first draw's. Where
the run's examples define their evidence, a `note` column quotes what each answer shown recites of the
passages outside it (`answer_sources.recited_note`: the filler read back is not lost evidence alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.answer_lines import run_example
from workbench.experiments.answer_sources import recited_note, run_has_evidence
from workbench.experiments.areas import budget_grid
from workbench.experiments.blank_answers import ENDED_AT_ONCE, no_token
from workbench.experiments.contrasts import _cells, _sides, get_measure, parse_contrast, resolve_coin
from workbench.runstore import SweepRun, natural_key

ANSWER_CHARS = 120  # an answer is cut after this many characters (its length is shown)


@dataclass(frozen=True)
class Behind:
    """One contrast's differing examples and the sample of them to read."""

    a: str
    b: str
    at: str  # "0.2", or "auc over 0.05-0.5"
    measure: str
    n: int  # examples both selectors answered
    a_higher: int  # examples where A's value (the contrast's per-example quantity; for flip, a rate) exceeds B's
    b_higher: int
    seed: int
    drawn: bool  # a side is a drawn control: its mean over draws, its first draw's answer shown
    shown: pd.DataFrame  # per example read: example_id, budget, gold, dense, A, "A measure", B, "B measure"[, note]


def examples_behind(run: SweepRun, text: str, measure: str, k: int = 10, seed: int = 0) -> Behind:
    """The examples behind contrast `text` ("A:B@budget" or "A:B@auc") on `measure`: how many differ
    each way, and a seeded sample of k of them (in the examples' natural order) with their answers."""
    a, b, budget = parse_contrast(text)
    m = get_measure(measure)
    b = resolve_coin(a, b, set(run.outcomes["selector"]))
    va, vb, ids, ra, rb = _sides(run, a, b, budget, m)
    diff = pd.Series(ra - rb, index=ids)
    differ = diff[diff.abs() > 1e-12]
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(differ.index.to_numpy(), size=min(k, len(differ)), replace=False).tolist(),
                    key=natural_key)
    over = isinstance(budget, str)
    grid = budget_grid(run.outcomes) if over else (float(budget),)
    values = {(label, bud): _cells(run.outcomes, label, bud, m).mean(axis=1)  # [example]: a coin's mean over draws
              for label in (a, b) for bud in grid}
    examples = run.examples.set_index("example_id")
    noted = run_has_evidence(run)
    rows = []
    for example in picked:
        gaps = [abs(values[a, bud].get(example, np.nan) - values[b, bud].get(example, np.nan)) for bud in grid]
        at = grid[int(np.nanargmax(gaps))] if over else grid[0]  # at @auc: where the two differ most
        dense = (_raw(examples, example, "dense_answer"), _raw(examples, example, "dense_answer_tokens"))
        answers = {"dense": dense, a: _cell_answer(run, a, example, at), b: _cell_answer(run, b, example, at)}
        row = {"example_id": example, "budget": at, "gold": _field(examples, example, "gold"),
               "dense": _shown(*dense),
               a: _shown(*answers[a]), f"{a} {m.name}": values[a, at].get(example, np.nan),
               b: _shown(*answers[b]), f"{b} {m.name}": values[b, at].get(example, np.nan)}
        if noted:
            row["note"] = _recited(run, example, answers)
        rows.append(row)
    at_text = f"auc over {grid[0]:g}-{grid[-1]:g}" if over else f"{float(budget):g}"
    drawn = va.shape[1] > 1 or vb.shape[1] > 1
    columns = ["example_id", "budget", "gold", "dense", a, f"{a} {m.name}", b, f"{b} {m.name}"]
    return Behind(a, b, at_text, m.name, len(ids), int((differ > 0).sum()), int((differ < 0).sum()), seed, drawn,
                  pd.DataFrame(rows, columns=columns + ["note"] * noted))


def _recited(run: SweepRun, example_id, answers: dict) -> str:
    """What each answer (label -> (text, tokens)) recites of the passages outside the evidence, e.g.
    'cadence-grad recites the passages: "the grass is green"', each cut as an answer is; '' where none
    does. An example whose diagnosis.json cannot be read (a sweep still writing it) says so."""
    try:
        example = run_example(run, example_id)
    except WorkbenchError:
        return "(its diagnosis.json could not be read)"
    notes = [(label, recited_note(example, text)) for label, (text, _) in answers.items()]
    return "; ".join(_short(f"{label} {note}") for label, note in notes if note)


def _field(examples: pd.DataFrame, example, column: str) -> str:
    """One example's text field, shortened (blank where the run's table has no such column)."""
    return _short(examples.at[example, column]) if column in examples else ""


def _raw(examples: pd.DataFrame, example, column: str):
    """One example's value of `column`, None where the run's table has no such column."""
    return examples.at[example, column] if column in examples else None


def _cell_answer(run: SweepRun, label: str, example, budget: float):
    """(text, tokens) of a selector's answer for one example at one budget (a drawn control: its first
    draw's); (None, None) where the run has none."""
    o = run.outcomes
    rows = o[(o["selector"] == label) & (o["example_id"] == example) & ((o["budget"] - budget).abs() < 1e-9)]
    if rows.empty or "answer" not in rows:
        return None, None
    if "draw" in rows and rows["draw"].notna().any():
        rows = rows.sort_values("draw")
    return rows["answer"].iloc[0], rows["answer_tokens"].iloc[0] if "answer_tokens" in rows else None


def _shown(text, n_tokens) -> str:
    """An answer shortened, or, where it has no token, that it ended at once (an empty cell would read
    as a value missing)."""
    return f"({ENDED_AT_ONCE})" if no_token(n_tokens) else _short(text)


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

