"""Budget curves shows the contrast family: the pre-registered one where a run keeps
`preregistration.json` (a restored record), else one chosen on the page; each contrast's b / c, raw
and Holm p as `contrast_family` computes them, and a forest plot with the table's intervals; the
selector chips filter the figures and the summary table. Beside it (issue 45 item 5): Decision
flips names the selectors at the top and sorts its rows; Fidelity tells coinciding series apart and
leaves missing values blank; the multi-agent gate figure says why each call was served as it was."""

from __future__ import annotations

import shutil
import sys

import pandas as pd
import pytest

from apptest import ROOT, array, charts, drawn_with, frame_with, ok, open_page
from workbench.experiments.contrasts import contrast_family
from workbench.runstore import load_sweep

sys.path.insert(0, str(ROOT / "docs" / "records"))
import keep  # noqa: E402 - docs/records is no package

RECORD = "study-ruler-mk512-smollm2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, app_world, restore_record):
    """A restored record (its preregistration.json kept beside it) and a copy of the small wide sweep."""
    root = tmp_path_factory.mktemp("contrasts") / "runs"
    restore_record(RECORD, root)
    for name in ("wide", "pipe-all", "fid"):
        shutil.copytree(app_world["runs"] / name, root / name)
    return root


@pytest.fixture(autouse=True)
def _env(runs, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def curves(run: str):
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value(run).run()
    ok(at)
    return at


def forest(at) -> dict:
    return next(c for c in charts(at) if "Paired differences" in str(c["layout"].get("title", {}).get("text", "")))


def check_against_the_library(at, runs, run: str, families: dict, measure: str) -> pd.DataFrame:
    columns = ("family", "name", "b_count", "c_count", "p_value", "p_holm", "low", "high")
    shown, drawn = frame_with(at, *columns), drawn_with(at, *columns)  # numbers; the text a reader sees
    sweep = load_sweep(runs / run)
    expected = [c for family in families.values() for c in contrast_family(sweep, list(family.values()), measure)]
    assert len(shown) == len(expected) > 0
    for row, b_count, c in zip(shown.itertuples(), drawn["b_count"], expected):
        assert (row.a, row.b) == (c.a, c.b)
        assert row.p_value == pytest.approx(c.p_value) and row.p_holm == pytest.approx(c.p_holm)
        assert b_count == ("" if c.b_count is None else str(c.b_count))  # blank, never "None"
        assert (row.low, row.high) == pytest.approx((c.low, c.high))
    bars = [t for t in forest(at)["data"] if t.get("showlegend") is False]
    assert len(bars) == len(shown)
    for trace, row in zip(bars, shown.itertuples()):
        x = array(trace["x"])[0]
        assert x == pytest.approx(row.difference)
        assert x + array(trace["error_x"]["array"])[0] == pytest.approx(row.high)
        assert x - array(trace["error_x"]["arrayminus"])[0] == pytest.approx(row.low)
    return drawn


def test_a_restored_record_opens_on_its_preregistered_family_with_holm_p(runs):
    at = curves(RECORD)
    assert at.radio(key="curves_family_source").value == "pre"
    assert at.selectbox(key="curves_contrast_measure").value == "em"
    pre = keep.HERE / RECORD / "preregistration.json"
    import json

    families = json.loads(pre.read_text())["families"]
    shown = check_against_the_library(at, runs, RECORD, families, "em")
    assert list(shown["name"]) == ["A1", "A2", "A3", "B1", "B2", "B3"]
    a1 = shown.set_index("name").loc["A1"]
    assert (a1["b_count"], a1["c_count"]) == ("26", "15")  # RESULTS 10.6's table
    assert len(shown.set_index("name").loc["A2", "draws"].split(",")) == 5  # BCR against each coin draw
    at.selectbox(key="curves_contrast_measure").set_value("flip").run()
    ok(at)
    check_against_the_library(at, runs, RECORD, families, "flip")


def test_a_runs_preregistered_measure_opens_the_page_and_its_contrasts(runs):
    """A run pre-registered on `retrieved` opens with its gap curve and its contrasts on `retrieved`;
    another run still opens on exact match."""
    import json

    shutil.copytree(runs / "wide", runs / "wide-retrieved", dirs_exist_ok=True)
    (runs / "wide-retrieved" / "preregistration.json").write_text(json.dumps(
        {"measure": "retrieved", "families": {"A": {"A1": "cadence-grad:cacheblend@auc"}}}))
    at = curves("wide-retrieved")
    assert at.radio(key="curves_measure").value == "retrieved"
    assert at.radio(key="curves_family_source").value == "pre"
    assert at.selectbox(key="curves_contrast_measure").value == "retrieved"
    at.selectbox(key="curves_run").set_value("wide").run()
    ok(at)
    assert at.radio(key="curves_measure").value == "em"


def test_a_small_run_without_one_tests_the_family_chosen_on_the_page(runs):
    at = curves("wide")
    assert at.radio(key="curves_family_source").value == "chosen"
    text = at.text_area(key="curves_family_text")
    assert "bcr:coin@0.2" in text.value
    text.set_value("first: cadence-grad:cacheblend@0.2\nbcr:coin@0.5\nepic:cacheblend@auc").run()
    ok(at)
    shown = check_against_the_library(at, runs, "wide", {"chosen": {
        "first": "cadence-grad:cacheblend@0.2", "C2": "bcr:coin@0.5", "C3": "epic:cacheblend@auc"}}, "em")
    assert list(shown["name"]) == ["first", "C2", "C3"]
    at.text_area(key="curves_family_text").set_value("cadence-grad:nothing@0.2").run()
    ok(at)
    assert at.warning and not any("Paired differences" in str(c["layout"].get("title")) for c in charts(at))


def test_the_chips_filter_every_figure_and_the_summary_table(runs):
    at = curves("wide")
    at.multiselect(key="curves_selectors").set_value(["cadence-grad", "coin:bcr"]).run()
    ok(at)
    summary = frame_with(at, "selector", "budget", "em", "gap_recovered")
    assert set(summary["selector"]) == {"cadence-grad", "coin:bcr", "none", "full"}
    hidden = set(load_sweep(runs / "wide").outcomes["selector"]) - {"cadence-grad", "coin:bcr", "none", "full"}
    for chart in charts(at):
        if "Paired differences" in str(chart["layout"].get("title")):
            continue  # the family is tested whole
        names = {t.get("name") for t in chart["data"] if t.get("name")}
        assert not names & hidden, (chart["layout"].get("title"), names & hidden)
    gap = charts(at)[0]  # the headline: its axis says what a share above 1 is, or that there is no gap
    said = str(gap["layout"].get("yaxis", {}).get("title", {}).get("text", "")) + str(gap["layout"]["title"])
    assert "above 1: above dense" in said or "no EM gap" in said, said


def test_a_run_of_many_selectors_opens_on_those_its_preregistration_names(runs):
    """Sixteen curves cannot be told apart: a run of more than six selectors with a pre-registration
    opens on the selectors its contrasts name (the references are lines anyway); one without, on all."""
    import json

    shutil.copytree(runs / "wide", runs / "wide-pre", dirs_exist_ok=True)
    (runs / "wide-pre" / "preregistration.json").write_text(json.dumps(
        {"measure": "em", "families": {"A": {"A1": "cadence-grad:cacheblend@0.2", "A2": "bcr:coin@0.2"}}}))
    at = curves("wide-pre")
    assert at.multiselect(key="curves_selectors").value == ["cacheblend", "cadence-grad", "bcr", "coin:bcr"]
    em = next(c for c in charts(at) if "Exact match against budget" in str(c["layout"]["title"]))
    names = {t["name"] for t in em["data"]} | {s["name"] for s in em["layout"]["shapes"] if s.get("showlegend")}
    assert {n.split(" ")[0] for n in names} == {"cacheblend", "cadence-grad", "bcr", "coin:bcr", "reuse", "full"}
    at = curves(RECORD)
    assert at.multiselect(key="curves_selectors").value == ["cacheblend", "cadence", "cadence-grad", "bcr", "epic",
                                                            "prophetkv", "relaxkv", "coin:bcr"]
    at.selectbox(key="curves_run").set_value("wide").run()
    ok(at)
    assert len(at.multiselect(key="curves_selectors").value) == 14  # no pre-registration: every selector


def test_the_records_bcr_points_that_spend_other_rows_than_their_budget_are_hollow(runs):
    """BCR's 64-row chunks recompute no row at b = 0.05 and 0.1 and 54.6 against random's 81 at 0.2
    (the review of this record): those points hollow, their rows in hover, a caption saying so."""
    at = curves(RECORD)
    gap = charts(at)[0]
    bcr = next(t for t in gap["data"] if t.get("name") == "bcr" and array(t["x"])[0] is not None)
    symbols, text = array(bcr["marker"]["symbol"]), array(bcr["text"])
    assert [s.endswith("-open") for s in symbols] == [True, True, True, True, True]  # 0.3, 0.5: 84, 147 of 121, 202
    assert text[0] == "b = 0.05<br>spent 0 rows (a budget-matched selector: 20.9)"
    assert text[2] == "b = 0.2<br>spent 54.6 rows (a budget-matched selector: 81.1)"
    cacheblend = next(t for t in gap["data"] if t.get("name") == "cacheblend")  # shown by default (A1)
    assert not isinstance(cacheblend["marker"]["symbol"], list)  # spends its budget: filled
    assert any("hollow marker" in c.value for c in at.caption)


def test_decision_flips_sorts_rows_by_disagreement_or_by_a_selectors_outcome(runs):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value(RECORD).run()
    ok(at)
    matrix = charts(at)[0]
    assert matrix["layout"]["xaxis"]["side"] == "top"  # the selectors named where the matrix starts
    shown = frame_with(at, "example_id", "cadence-grad", "cacheblend").set_index("example_id")
    at.selectbox(key="flips_sort").set_value("disagreement").run()
    ok(at)
    rows = [str(i) for i in array(charts(at)[0]["data"][0]["y"])]
    assert len(rows) == min(40, len(shown)) < len(shown)  # the sorted order's first page of 40 (app/views/flips.py)
    split = shown.mean(axis=1) * (1 - shown.mean(axis=1))
    assert [split[i] for i in rows] == sorted(split, reverse=True)[:len(rows)]
    at.selectbox(key="flips_sort").set_value("cadence-grad").run()
    ok(at)
    rows = [str(i) for i in array(charts(at)[0]["data"][0]["y"])]
    flips = shown["cadence-grad"]
    assert [flips[i] for i in rows] == sorted(flips, reverse=True)[:len(rows)] and flips.nunique() > 1


def test_decision_flips_cuts_a_long_id_list_and_lists_it_whole_below(runs):
    """The review saw the rescues table cut its id lists mid-list with no ellipsis and its broken
    column run past the page: a cell holds the first 12 ids and how many more, the expander all."""
    from apptest import unescape
    from workbench.app_api import natural_key, rescues

    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value(RECORD).run()
    ok(at)
    assert at.select_slider(key="flips_budget").value == 0.05 and at.selectbox(key="flips_baseline").value == "none"
    drawn = drawn_with(at, "selector", "rescued_examples", "broken_examples").set_index("selector")
    expected = rescues(load_sweep(runs / RECORD).outcomes, 0.05, "none").set_index("selector")
    full = sorted(map(str, expected.loc["full", "rescued_examples"]), key=natural_key)
    assert len(full) == 85 and drawn.loc["full", "rescued_examples"] == ", ".join(full[:12]) + " … (+73 more)"
    short = sorted(map(str, expected.loc["random", "broken_examples"]), key=natural_key)
    assert 0 < len(short) <= 12 and drawn.loc["random", "broken_examples"] == ", ".join(short)  # whole, no mark
    assert any(", ".join(full) in unescape(m.value) for m in at.markdown)  # every id, under the table


def test_the_gate_figure_says_why_each_call_was_reused_or_not(runs):
    import pandas as pd_

    from workbench.experiments.pipeline_summary import DENSE_OVER, REUSED_UNDER, gate_reasons

    at = open_page("views/pipeline.py")
    at.selectbox(key="pipeline_run").set_value("pipe-all").run()
    calls = pd_.read_parquet(runs / "pipe-all" / "calls.parquet")
    for method in ("kvcomm-always", "opengate"):
        at.selectbox(key="pipe_method").set_value(method).run()
        ok(at)
        gate = next(c for c in charts(at) if "entropy gate" in str(c["layout"]["title"]))
        gated = calls[(calls["method"] == method)].dropna(subset=["max_entropy"])
        reasons = gate_reasons(gated)
        drawn = {t["name"]: len(array(t["x"])) for t in gate["data"] if not t["name"].startswith("threshold")}
        assert drawn == reasons.value_counts().to_dict()
        under = gated["max_entropy"] <= gated["threshold"]
        assert not (reasons[under & ~gated["reused"]] == DENSE_OVER).any()  # a dense call under it says why
        assert (reasons[under & gated["reused"] & (gated["min_anchors"] >= 2)] == REUSED_UNDER).all()
    assert len(set(gate_reasons(calls.dropna(subset=["max_entropy"])))) >= 3


def test_fidelity_tells_coinciding_series_apart_and_leaves_missing_values_blank(runs):
    at = open_page("views/fidelity.py")
    at.selectbox(key="fidelity_run").set_value("fid").run()
    ok(at)
    conditions = drawn_with(at, "condition", "layers", "transfer")
    assert "-1" not in set(map(str, conditions["layers"])) and "" in set(map(str, conditions["layers"]))
    alpha = next(c for c in charts(at) if "genuine mix" in str(c["layout"]["title"]))
    series = [t for t in alpha["data"] if "lines" in str(t.get("mode"))]
    assert len({t["marker"]["symbol"] for t in series}) == len(series)  # each its own marker
    same = any(array(a["y"]) == array(b["y"]) and array(a["x"]) == array(b["x"])
               for i, a in enumerate(series) for b in series[i + 1:])
    assert same == ("drawn on each other" in str(alpha["layout"]["title"]["text"]))


def test_the_examples_behind_a_contrast_are_the_librarys(runs):
    """Under the family, the chosen contrast's differing examples on the chosen measure: the library's
    seeded sample, its counts in the caption; K sets how many."""
    from workbench.experiments.behind import behind_sentence, examples_behind

    at = curves("wide")
    at.text_area(key="curves_family_text").set_value("cadence-grad:cacheblend@0.2\nnone:full@0.5").run()
    ok(at)
    choices = at.selectbox(key="curves_behind").options
    assert choices == ["chosen C1: cadence-grad:cacheblend@0.2", "chosen C2: none:full@0.5"]
    at.selectbox(key="curves_behind").set_value(choices[1]).run()
    ok(at)
    at.selectbox(key="curves_contrast_measure").set_value("flip").run()
    ok(at)
    behind = examples_behind(load_sweep(runs / "wide"), "none:full@0.5", "flip", 10)
    assert len(behind.shown) > 0, "the small sweep's splice must flip somewhere"
    shown = frame_with(at, "example_id", "dense", "none", "full")
    assert list(shown["example_id"]) == list(behind.shown["example_id"])
    assert list(shown["none"]) == list(behind.shown["none"])
    assert any(behind_sentence(behind) in c.value for c in at.caption)
    at.number_input(key="curves_behind_k").set_value(1).run()
    ok(at)
    assert len(frame_with(at, "example_id", "dense", "none", "full")) == 1
