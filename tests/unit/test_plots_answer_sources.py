"""`plots.answer_sources`: the stacked word shares and the reciting share at one budget, dense and the
splice first, `full` and `none` left out by default, free of `figure_problems`."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.experiments.answer_sources import SOURCES
from workbench.plots import figure_problems
from workbench.plots.answer_sources import SOURCE_STYLE, answer_sources_figure


def _table() -> pd.DataFrame:
    rows = [("dense", math.nan, 0.8, 0.0, 0.0, 0.0, 0.2, 0.0), ("splice", math.nan, 0.6, 0.0, 0.1, 0.0, 0.3, 0.05)]
    for budget in (0.1, 0.2):
        rows += [("none", budget, 0.6, 0.0, 0.1, 0.0, 0.3, 0.05), ("full", budget, 0.8, 0.0, 0.0, 0.0, 0.2, 0.0),
                 ("cadence-grad", budget, 0.3, 0.1, 0.4, 0.0, 0.2, 0.4 + budget),
                 ("cacheblend", budget, 0.7, 0.0, 0.0, 0.1, 0.2, 0.0)]
    return pd.DataFrame(rows, columns=["selector", "budget", *SOURCE_STYLE, "recites_context"]).assign(cells=10, answered=8)


def test_the_figure_draws_dense_and_the_splice_then_the_repairs_at_the_budget():
    fig = answer_sources_figure(_table(), 0.2)
    stacked = [t for t in fig.data if t.xaxis == "x"]
    assert [t.name for t in stacked] == [label for label, _ in SOURCE_STYLE.values()]
    assert list(stacked[0].y) == ["dense", "splice", "cadence-grad", "cacheblend"]
    totals = [sum(t.x[i] for t in stacked) for i in range(4)]
    assert all(math.isclose(total, 1.0) for total in totals)
    (recites,) = [t for t in fig.data if t.xaxis == "x2"]
    assert list(recites.x) == pytest.approx([0.0, 0.05, 0.6, 0.0])  # cadence-grad's at b = 0.2
    assert "b = 0.2" in fig.layout.title.text and figure_problems(fig) == []


def test_selectors_named_are_the_ones_drawn_under_the_references():
    fig = answer_sources_figure(_table(), 0.1, selectors=["none", "cacheblend"])
    assert list(fig.data[0].y) == ["dense", "splice", "none", "cacheblend"]


def test_every_source_has_a_segment():
    assert tuple(SOURCE_STYLE) == SOURCES
