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
        assert len(lines) == 2 and {s.layer for s in lines} == {"above"}  # over the grid (plotly.js draws no
        # "between" shape across an axis's domain: seen in Chromium)
        assert fig.layout.yaxis.zeroline is False  # the reference is the line at 0
        low, high = fig.layout.yaxis.range
        assert low < -0.02 and high > 1.02  # both references off the plot's edges
        assert plots.figure_problems(fig) == []


def test_the_axis_keeps_its_zero_line_where_no_reference_is_at_zero():
    table = summary([(s, b, v) for b in (0.1, 0.2) for s, v in (("none", 0.2), ("full", 0.9), ("random", 0.5))])
    fig = plots.budget_curve(table, "em")
    assert fig.layout.yaxis.zeroline is not False and fig.layout.yaxis.range[0] < 0  # 0 still shown


def spending() -> pd.DataFrame:
    """random spends its budget of a 400-row pool; bcr's 64-row chunks fit none at 0.05 and fewer
    rows than random at 0.2 (the study's 0 and 54.6 against 81), and spend it at 0.5; its coin alike."""
    rows = {("random", 0.05): 20.9, ("random", 0.2): 81.1, ("random", 0.5): 201.7, ("bcr", 0.05): 0.0,
            ("bcr", 0.2): 54.6, ("bcr", 0.5): 190.0, ("none", 0.05): 0.0, ("full", 0.05): 400.0}
    rows.update({("coin:bcr", b): rows[("bcr", b)] for b in (0.05, 0.2, 0.5)})
    table = summary([(s, b, 0.5) for s, b in rows])
    spent = table.apply(lambda r: rows[(r["selector"], r["budget"])], axis=1)
    return table.assign(rows_per_example=spent, share_recomputed=spent / 400.0)


def test_a_point_that_spends_other_rows_than_its_budget_is_hollow_with_its_rows_in_hover():
    fig = plots.gap_curve(spending())
    drawn = {t.name: t for t in fig.data if t.x[0] is not None}  # the lines, not their legend entries
    bcr, coin, random = drawn["bcr"].marker.symbol, drawn["coin:bcr"].marker.symbol, drawn["random"].marker.symbol
    base = plots.selector_style("bcr")["marker"]["symbol"]
    assert list(bcr) == [f"{base}-open", f"{base}-open", base]  # 0.05 and 0.2 hollow; 190 of 202 is within 10%
    assert list(coin) == [f"{base}-open-dot", f"{base}-open-dot", f"{base}-open"]  # a coin is hollow already: a dot
    assert random == plots.selector_style("random")["marker"]["symbol"]  # every point filled
    assert drawn["bcr"].text[0] == "b = 0.05<br>spent 0 rows (a budget-matched selector: 20.9)"
    assert drawn["bcr"].text[1] == "b = 0.2<br>spent 54.6 rows (a budget-matched selector: 81.1)"
    assert drawn["bcr"].text[2] == "b = 0.5" and drawn["random"].text[0] == "b = 0.05"
    legend = [t for t in fig.data if t.showlegend is not False]  # one entry a selector, filled
    assert [t.name for t in legend] == ["random", "bcr", "coin:bcr"]
    assert next(t for t in legend if t.name == "bcr").marker.symbol == base
    assert {t.legendgroup for t in fig.data if t.name == "bcr"} == {"bcr"}  # a click hides both
    assert fig.layout.legend.tracegroupgap == 0  # groups add no height the legend was not given
    assert plots.figure_problems(fig) == []


def test_without_a_budget_matched_selector_the_budget_times_the_pool_is_what_it_buys():
    only = spending().query("selector in ['bcr', 'full']")
    fig = plots.budget_curve(only, "em")
    bcr = next(t for t in fig.data if t.name == "bcr" and t.x[0] is not None)
    assert bcr.text[0] == "b = 0.05<br>spent 0 rows (the budget buys: 20)"
