"""Budget curves as a reader sees them: reference lines at 0 in view (over the grid, off the
plot's edge)."""

from __future__ import annotations

import pandas as pd

from workbench import plots


def summary(rows) -> pd.DataFrame:
    """A summary table (as `experiments.summary.summarize` names its columns) of (selector, budget,
    value) with flip rate and gap closed both `value`, their intervals ±0.05."""
    table = pd.DataFrame(rows, columns=["selector", "budget", "value"])
    return table.assign(unit="single", em=table["value"], em_low=table["value"] - 0.05,
                        em_high=table["value"] + 0.05, flip_rate=table["value"], flip_low=table["value"] - 0.05,
                        flip_high=table["value"] + 0.05, gap_recovered=table["value"],
                        gap_recovered_low=table["value"] - 0.05, gap_recovered_high=table["value"] + 0.05)


def references_at_zero(metric: str) -> pd.DataFrame:
    """none and full on either side, the one at 0 being full's flip rate or none's gap closed."""
    zero, one = ("full", "none") if metric == "flip_rate" else ("none", "full")
    return summary([(s, b, v) for b in (0.1, 0.2) for s, v in ((zero, 0.0), (one, 1.0), ("random", 0.3 + b))])


def test_a_reference_line_at_zero_is_over_the_grid_and_inside_the_plot():
    """The review saw "reuse all (none) 0" hidden under the zero line of the gap figure and
    "full recompute (full) 0" on the bottom edge of the flip-rate figure."""
    for fig in (plots.gap_curve(references_at_zero("gap_recovered")),
                plots.budget_curve(references_at_zero("flip_rate"), "flip_rate")):
        lines = [s for s in fig.layout.shapes if s.showlegend]
        assert len(lines) == 2 and {s.layer for s in lines} == {"between"}  # over the grid, under the data
        assert fig.layout.yaxis.zeroline is False  # the reference is the line at 0
        low, high = fig.layout.yaxis.range
        assert low < -0.02 and high > 1.02  # both references off the plot's edges
        assert plots.figure_problems(fig) == []


def test_the_axis_keeps_its_zero_line_where_no_reference_is_at_zero():
    table = summary([(s, b, v) for b in (0.1, 0.2) for s, v in (("none", 0.2), ("full", 0.9), ("random", 0.5))])
    fig = plots.budget_curve(table, "em")
    assert fig.layout.yaxis.zeroline is not False and fig.layout.yaxis.range[0] < 0  # 0 still shown
