"""The forest plot draws exactly the contrast table's differences and intervals, one row per
contrast, filled where the Holm-adjusted p is below 0.05; a pre-registration is read and checked."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench import plots
from workbench.errors import WorkbenchError
from workbench.experiments.families import family_table, read_preregistration, suggested_family
from workbench.plots.forest import contrast_label, forest_figure
from workbench.runstore import SweepRun


def _outcomes() -> pd.DataFrame:
    """8 examples by hand: two selectors, bcr and its coin of 3 draws, one budget."""
    good, poor = [1, 1, 1, 1, 1, 0, 1, 1], [0, 0, 1, 0, 0, 0, 1, 0]
    rows = []
    for i in range(8):
        for selector, em in (("cadence-grad", good[i]), ("cacheblend", poor[i]), ("bcr", good[i])):
            rows.append({"example_id": str(i), "selector": selector, "budget": 0.2, "draw": None, "em": em})
        rows += [{"example_id": str(i), "selector": "coin:bcr", "budget": 0.2, "draw": d, "em": (i + d) % 2}
                 for d in range(3)]
    return pd.DataFrame(rows)


@pytest.fixture
def table(tmp_path):
    run = SweepRun(folder=tmp_path, manifest=None, examples=pd.DataFrame(), outcomes=_outcomes())
    return family_table(run, {"A": {"A1": "cadence-grad:cacheblend@0.2", "A2": "bcr:coin@0.2"},
                              "B": {"B1": "cacheblend:cadence-grad@0.2"}}, "em")


def test_the_forest_plot_draws_the_tables_intervals(table):
    fig = forest_figure(table, "family")
    rows = [t for t in fig.data if t.showlegend is False]
    assert len(rows) == len(table) == 3
    for trace, (_, row) in zip(rows, table.iterrows()):
        assert trace.x[0] == pytest.approx(row["difference"])
        assert trace.x[0] + trace.error_x.array[0] == pytest.approx(row["high"])
        assert trace.x[0] - trace.error_x.arrayminus[0] == pytest.approx(row["low"])
        assert contrast_label(row) in trace.y[0] and f"Holm p {row['p_holm']:.2g}" in trace.y[0]
        assert trace.marker.symbol == ("diamond" if row["p_holm"] < 0.05 else "diamond-open")
    assert not plots.figure_problems(fig)


def test_the_table_holds_b_c_raw_and_holm_p_per_family(table):
    a1, a2, b1 = (table.iloc[i] for i in range(3))
    assert (a1["b_count"], a1["c_count"]) == (5, 0)  # A right where B wrong: 5 of 8
    assert (b1["b_count"], b1["c_count"]) == (0, 5) and b1["difference"] == pytest.approx(-a1["difference"])
    assert b1["p_holm"] == pytest.approx(b1["p_value"])  # a family of one: Holm leaves it
    assert a1["p_holm"] >= a1["p_value"] and a2["p_holm"] >= a2["p_value"]
    assert pd.isna(a2["b_count"]) and len(a2["draws"].split(",")) == 3  # the coin: each draw's b / c


def test_a_preregistration_is_read_and_checked(tmp_path):
    assert read_preregistration(tmp_path) is None
    (tmp_path / "preregistration.json").write_text(json.dumps(
        {"measure": "em", "families": {"A": {"A1": "cadence-grad:cacheblend@0.2"}}}))
    assert read_preregistration(tmp_path).families == {"A": {"A1": "cadence-grad:cacheblend@0.2"}}
    for bad in ("{", json.dumps({"families": {}}), json.dumps({"families": {"A": {"A1": "cadence-grad@0.2"}}}),
                json.dumps({"measure": "nope", "families": {"A": {"A1": "cadence-grad:cacheblend@0.2"}}})):
        (tmp_path / "preregistration.json").write_text(bad)
        with pytest.raises(WorkbenchError) as err:
            read_preregistration(tmp_path)
        assert "\n" not in str(err.value)


def test_the_suggested_family_pairs_each_selector_with_the_comparison_and_its_coin():
    family = suggested_family(["none", "full", "random", "cacheblend", "cadence-grad", "bcr", "coin:bcr"],
                              [0.1, 0.2, 0.5])
    assert family == ["cadence-grad:cacheblend@0.2", "bcr:cacheblend@0.2", "bcr:coin@0.2"]
    assert suggested_family(["none", "full", "epic"], [0.2]) == ["epic:none@0.2"]  # no comparison: the splice
