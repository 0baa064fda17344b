"""What a whole answer names that its first line does not, and whether two records repaired the same rows.

A run made with `--no-stop-at-newline` keeps every answer whole (dense's, the splice's, each cell's).
Its first line is what the default rule scores, so one record reads both ways, cell for cell:

    first_line_table(run)     per selector x budget: `retrieved` of the first line and of the whole
                              answer, and the share of cells whose whole answer names more of the gold
    pairing(run, other)       the cells two records share (against those they should), those whose repaired rows differ
                              (`n_recomputed` or `evidence_recall`), and how often the first line of one
                              record's answer is the other's answer

A drawn selector's cells count each draw as its own cell. Scores are the example's own rule
(`Example.retrieved`) of the stored text: a function of the text and the gold alone.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.runstore.kinds import DIAGNOSES
from workbench.runstore.loaders import SweepRun
from workbench.tasks import Example
from workbench.tasks.metrics import first_line

CELL = ["example_id", "selector", "budget", "draw"]  # one repaired cache of one example
ROWS = ["n_recomputed", "evidence_recall"]  # what says two cells repaired the same rows


def whole_answers(run: SweepRun) -> bool:
    """Whether `run` kept its answers whole (made with `--no-stop-at-newline`)."""
    return run.manifest.diagnose_config.get("stop_at_newline", True) is False


def run_examples(run: SweepRun) -> dict[str, Example]:
    """Each finished example of `run`, as its diagnosis.json keeps it."""
    return {example_id: _example_at(run, name)
            for example_id, name in zip(run.examples["example_id"].astype(str), run.examples["folder"])}


def run_example(run: SweepRun, example_id) -> Example:
    """One finished example of `run`, as its diagnosis.json keeps it."""
    folders = run.examples["folder"][(run.examples["example_id"].astype(str) == str(example_id)).to_numpy()]
    if folders.empty:
        raise WorkbenchError(f"{run.folder} has no finished example {example_id!r}")
    return _example_at(run, folders.iloc[0])


def _example_at(run: SweepRun, name) -> Example:
    """The example kept in the diagnosis.json of folder `name` of `run`."""
    path = run.folder / DIAGNOSES / str(name) / "diagnosis.json"
    try:
        return Example.from_dict(json.loads(path.read_text(encoding="utf-8"))["example"])
    except (OSError, ValueError, KeyError) as err:
        raise WorkbenchError(f"{path} is unreadable ({err}): the example (its texts, gold and evidence) is "
                             "read from it") from None


def reference_cells(run: SweepRun, columns=("answer",)) -> pd.DataFrame:
    """Dense's and the splice's answers as cells of `run` (selectors "dense" and "splice", budget NaN, draw
    NA), with each of `columns` read from the examples' table (`dense_<column>`, `spliced_<column>`)."""
    return pd.concat([pd.DataFrame({"example_id": run.examples["example_id"].astype(str), "selector": label,
                                    "budget": np.nan, "draw": pd.NA,
                                    **{c: run.examples[f"{who}_{c}"] for c in columns}})
                      for who, label in (("dense", "dense"), ("spliced", "splice"))], ignore_index=True)


def first_line_scores(run: SweepRun) -> pd.DataFrame:
    """The cells of a whole-answer run with `retrieved_first_line` (the first line's score) beside
    `retrieved` (the whole answer's), and `more` (the whole answer names more of the gold); the
    splice and dense as selectors "splice" and "dense" (budget NaN)."""
    if not whole_answers(run):
        raise WorkbenchError(f"{run.folder} scored first lines (made without --no-stop-at-newline): its "
                             "answers end at their first line break, so there is no more of them to read")
    examples = run_examples(run)
    cells = run.outcomes[[*CELL, "answer", "retrieved"]].copy()
    table = pd.concat([cells.assign(example_id=cells["example_id"].astype(str)),
                       reference_cells(run, ("answer", "retrieved"))], ignore_index=True)
    table["retrieved_first_line"] = [examples[i].retrieved(first_line(a))
                                     for i, a in zip(table["example_id"], table["answer"])]
    table["more"] = table["retrieved"] > table["retrieved_first_line"]
    return table


def first_line_table(run: SweepRun) -> pd.DataFrame:
    """Per selector and budget (a drawn selector's draws pooled): cells, mean `retrieved` of the
    first line and of the whole answer, and the share of cells whose whole answer names more."""
    table = first_line_scores(run)
    grouped = table.groupby(["selector", "budget"], dropna=False, sort=False)
    return grouped.agg(cells=("retrieved", "size"), retrieved_first_line=("retrieved_first_line", "mean"),
                       retrieved_whole=("retrieved", "mean"), share_more=("more", "mean")).reset_index()


def pairing(run: SweepRun, other: SweepRun) -> dict:
    """The cells both records hold (`shared`) against those they should share (`expected`: `run`'s
    cells of the examples and selectors `other` holds too: fewer shared means keys that did not
    join), those whose repaired rows differ (`differ`, a table of both records' `ROWS`), and the
    share of shared cells whose first line in `run` is `other`'s answer (`same_first_line`; both
    records' answers read through `first_line`)."""
    keys = [run.outcomes.assign(example_id=run.outcomes["example_id"].astype(str)),
            other.outcomes.assign(example_id=other.outcomes["example_id"].astype(str))]
    for k in keys:
        k["draw"] = k["draw"].fillna(-1).astype(int)  # an undrawn cell's draw is missing: -1 joins it
    both = keys[0][[*CELL, *ROWS, "answer"]].merge(keys[1][[*CELL, *ROWS, "answer"]], on=CELL,
                                                   suffixes=("", "_other"))
    expected = int((keys[0]["example_id"].isin(set(keys[1]["example_id"]))
                    & keys[0]["selector"].isin(set(keys[1]["selector"]))).sum())
    same = pd.Series(True, index=both.index)
    for column in ROWS:
        a, b = both[column], both[f"{column}_other"]
        same &= (a == b) | (a.isna() & b.isna())
    lines = [first_line(a) == first_line(b) for a, b in zip(both["answer"], both["answer_other"])]
    return {"shared": len(both), "expected": expected, "differ": both.loc[~same, [*CELL, *ROWS, *(f"{c}_other" for c in ROWS)]],
            "same_first_line": float(np.mean(lines)) if lines else float("nan")}
