"""The gap-anatomy figure draws the table's counts, one stacked bar per selector."""

import pandas as pd

from workbench.plots import figure_problems
from workbench.plots.anatomy import KIND_STYLE, SILENT_STYLE, gap_anatomy_figure

TABLE = pd.DataFrame({"selector": ["none", "full", "cacheblend", "none", "cacheblend"],
                      "budget": [0.2, 0.2, 0.2, 0.5, 0.5], "draws": 1,
                      "lost": [79, 0, 6, 79, 1], "lost_gold": [0, 0, 1, 0, 0], "in_word": 0, "ran_on": [79, 0, 4, 79, 1],
                      "other": [0, 0, 1, 0, 0], "gained": [5, 0, 2, 5, 3]})


def test_each_kind_is_one_trace_of_the_budget_counts_without_full():
    fig = gap_anatomy_figure(TABLE, 0.2)
    assert [t.name for t in fig.data] == [name for name, _ in KIND_STYLE.values()]
    for trace, kind in zip(fig.data, KIND_STYLE):
        assert list(trace.y) == ["none", "cacheblend"]
        assert list(trace.x) == TABLE.query("budget == 0.2 and selector != 'full'")[kind].tolist()
    assert sum(t.x[1] for t in fig.data) == 6  # a bar is the selector's lost exact matches
    assert figure_problems(fig) == []


def test_a_chosen_subset_and_another_budget():
    fig = gap_anatomy_figure(TABLE, 0.5, selectors=["cacheblend"])
    assert [list(t.y) for t in fig.data] == [["cacheblend"]] * 4 and fig.data[2].x[0] == 1
    assert "b = 0.5" in fig.layout.title.text


def test_lost_gold_answers_that_ended_at_once_are_a_segment_of_their_own():
    table = TABLE.assign(lost_gold=[3, 0, 1, 0, 0], ran_on=[76, 0, 4, 79, 1], silent=[2, 0, 0, 0, 0])
    fig = gap_anatomy_figure(table, 0.2)
    assert [t.name for t in fig.data] == [SILENT_STYLE[0]] + [name for name, _ in KIND_STYLE.values()]
    assert list(fig.data[0].x) == [2, 0] and list(fig.data[1].x) == [1, 1]  # lost the gold, less the silent
    assert sum(t.x[0] for t in fig.data) == 79  # the bar is still the selector's lost exact matches
    assert figure_problems(fig) == []


def test_counted_silent_answers_none_of_which_ended_at_once_draw_no_legend_entry():
    """`silent` counted but 0 in every bar of the budget: no segment, so the legend names no kind absent."""
    fig = gap_anatomy_figure(TABLE.assign(lost_gold=[3, 0, 1, 0, 0], silent=[0, 0, 0, 2, 0]), 0.2)
    assert [t.name for t in fig.data] == [name for name, _ in KIND_STYLE.values()]
    assert list(fig.data[0].x) == [3, 1]


def test_silent_drawn_says_whether_the_segment_is_drawn_and_unknown_where_not_counted():
    from workbench.plots.anatomy import silent_drawn

    assert silent_drawn(TABLE, 0.2) is None  # no token counts
    counted = TABLE.assign(silent=[0, 0, 0, 2, 0])
    assert silent_drawn(counted, 0.2) is False and silent_drawn(counted, 0.5) is True
    assert silent_drawn(counted, 0.5, selectors=["cacheblend"]) is False  # only the bars drawn
    assert silent_drawn(TABLE.assign(silent=[0, 0, float("nan"), 2, 0]), 0.2) is None  # a bar not counted
    assert silent_drawn(TABLE.assign(silent=0), 0.3) is None  # no bar at the budget: nothing to say
