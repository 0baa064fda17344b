"""Finding examples of a sweep: text search over questions, filters by outcome, sorting by any
column of the examples table. Plain tables in, example ids out (the explorer's list).

    ids = find_examples(run.examples, run.outcomes, text="coach", keep="splice_flips",
                        sort="n_tokens", descending=True)
    ids = find_examples(run.examples, run.outcomes, keep="a_not_b", a="bcr", b="cacheblend", budget=0.2)
"""

from __future__ import annotations

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.flips import flip_matrix

FILTERS = {
    "all": "every example",
    "splice_flips": "the splice flips the answer",
    "em_lost": "exact match lost (dense right, splice wrong)",
    "a_not_b": "A rescues and B does not",
}


def find_examples(examples: pd.DataFrame, outcomes: pd.DataFrame | None = None, *, text: str = "",
                  keep: str = "all", a: str | None = None, b: str | None = None, budget: float | None = None,
                  sort: str | None = None, descending: bool = False) -> list[str]:
    """Ids of the examples whose question holds `text` (case-insensitive) and that pass the
    filter `keep` (a key of FILTERS; "a_not_b" needs `a`, `b`, `budget` and the outcomes: the
    splice flips the example, A's repair at that budget does not, B's does; a coin where any of
    its draws does so, as `flips.rescues` lists them, never by a vote), sorted by the column `sort`
    (default: the run's order)."""
    if keep not in FILTERS:
        raise WorkbenchError(f"unknown example filter {keep!r}; known: {', '.join(FILTERS)}")
    rows = examples
    if text.strip():
        rows = rows[rows["question"].astype(str).str.contains(text.strip(), case=False, regex=False)]
    if keep == "splice_flips":
        rows = rows[rows["splice_flip"].astype(bool)]
    elif keep == "em_lost":
        rows = rows[(rows["dense_em"] > 0.5) & (rows["spliced_em"] < 0.5)]
    elif keep == "a_not_b":
        if outcomes is None or a is None or b is None or budget is None:
            raise WorkbenchError("the filter 'A rescues and B does not' needs the outcomes, A, B and a budget")
        matrix = flip_matrix(outcomes, budget)  # [example, selector]: the share of draws that flip
        missing = [s for s in (a, b) if s not in matrix.columns]
        if missing:
            raise WorkbenchError(f"no outcomes of {', '.join(missing)} at budget {budget:g} in this run")
        flipped = set(rows.loc[rows["splice_flip"].astype(bool), "example_id"].astype(str))
        wanted = {str(i) for i in matrix.index[(matrix[a] < 1) & (matrix[b] > 0)]} & flipped  # some draw each
        rows = rows[rows["example_id"].astype(str).isin(wanted)]
    if sort:
        if sort not in rows:
            raise WorkbenchError(f"cannot sort by {sort!r}: the examples table has {', '.join(examples.columns)}")
        rows = rows.sort_values(sort, ascending=not descending, kind="stable")
    return [str(i) for i in rows["example_id"]]
