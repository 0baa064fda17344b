"""Gold evidence in the per-example figures: underlined in the token strip, a row of its own in the
picks matrix (each selector's evidence recall beside its name), dotted columns in the heatmaps;
figures without evidence unchanged, every figure free of `figure_problems`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench import plots
from workbench.plots.tokens import EVIDENCE, evidence_spans

N = 24
EVIDENCE_ROWS = {9, 10, 11, 17}


def tokens(evidence: bool = True) -> pd.DataFrame:
    """Four prefix rows, then two passages of ten reused rows each; rows 9-11 and 17 are evidence."""
    table = pd.DataFrame({"position": range(N), "token": [f"t{i}" for i in range(N)],
                          "segment": ["prefix"] * 4 + ["passage 1"] * 10 + ["passage 2"] * 10,
                          "passage": [-1] * 4 + [0] * 10 + [1] * 10, "reused": [False] * 4 + [True] * 20})
    if evidence:
        table["evidence"] = table["position"].isin(EVIDENCE_ROWS)
    return table


def test_the_strip_underlines_each_evidence_token_and_keeps_the_chosen_one():
    fig = plots.token_strip(tokens(), None, picks=[10, 12], highlight=9, per_line=6)
    marks = [t for t in fig.data if t.name == "gold evidence"]
    assert len(marks) == 1 and marks[0].marker.line.color == EVIDENCE and len(marks[0].x) == len(EVIDENCE_ROWS)
    clickable = next(t for t in fig.data if t.name == "tokens")
    hovers = dict(zip((c[0] for c in clickable.customdata), clickable.text))
    assert all("gold evidence" in hovers[p] for p in EVIDENCE_ROWS)
    assert not any("gold evidence" in hovers[p] for p in set(range(N)) - EVIDENCE_ROWS)
    assert [s.name for s in fig.layout.shapes if s.name == "chosen token"] == ["chosen token"]  # highlight kept
    assert fig.layout.showlegend and plots.figure_problems(fig) == []


def test_the_strip_without_evidence_draws_no_mark():
    for table in (tokens(evidence=False), tokens().assign(evidence=False)):
        fig = plots.token_strip(table, None)
        assert not [t for t in fig.data if t.name == "gold evidence"]


def test_the_picks_matrix_has_an_evidence_row_and_each_selectors_recall():
    picks = {"cadence-grad": [9, 10, 13], "random": [5, 6]}
    fig = plots.picks_matrix(tokens(), picks, highlight=10, recall={"cadence-grad": 0.5, "random": float("nan")})
    row = next(t for t in fig.data if t.name == "gold evidence")
    reused = list(range(4, N))
    assert list(np.asarray(row.z)[0]) == [float(p in EVIDENCE_ROWS) for p in reused]
    labels = list(fig.layout.yaxis.ticktext)  # rows on a numeric axis named by ticks (see the browser test)
    assert labels == ["gold evidence", "cadence-grad · evidence recall 0.50", "random", "agreement"]  # NaN: none
    assert list(row.y) == [0] and list(fig.data[-1].y) == [1, 2, 3]
    assert [s.name for s in fig.layout.shapes if s.name == "chosen token"] == ["chosen token"]
    assert plots.figure_problems(fig) == []
    plain = plots.picks_matrix(tokens(evidence=False), picks)
    assert len(plain.data) == 1 and list(plain.layout.yaxis.ticktext) == ["cadence-grad", "random", "agreement"]


def test_heatmaps_outline_each_run_of_evidence_columns():
    rows = pd.DataFrame([{"layer": layer, "position": p, "value": float(layer + p)}
                         for layer in range(3) for p in range(4, N)])
    fig = plots.layer_heatmap(rows, tokens(), highlight=12)
    spans = [(s.x0, s.x1) for s in fig.layout.shapes if s.name == "gold evidence"]
    assert spans == [(9 - 4 - 0.5, 11 - 4 + 0.5), (17 - 4 - 0.5, 17 - 4 + 0.5)]  # columns index reused rows
    assert [s.showlegend for s in fig.layout.shapes if s.name == "gold evidence"] == [True, False]
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yanchor == "bottom"  # off the colour bar
    assert [s.name for s in fig.layout.shapes if s.name == "chosen token"] == ["chosen token"]
    assert plots.figure_problems(fig) == []
    assert evidence_spans([3, 1, 2, 7]) == [(1, 3), (7, 7)]
