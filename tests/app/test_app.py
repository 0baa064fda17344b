"""The Streamlit app, page by page, with Streamlit's AppTest against small runs made here.

One session-wide set of run folders is built with a tiny random Llama (conftest.py, saved to a
folder so the app loads it by path through $KVWB_MODEL; see small_runs.py): sweeps, a
unit-of-choice curve, a fidelity probe, saved diagnoses and pipelines. Each test checks that the
page raises nothing, that every figure's axes show its data and no text sits on its plotting
area, that its widgets exist, and that what it shows equals the run's tables. Live, its jobs and
the permalinks are tested in test_app_live_links.py.
"""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from apptest import (  # noqa: F401 - world and _env are fixtures
    _env, world,
    HOME, LEAK, PLUGIN, ROOT, TIMEOUT, array, at_budget, charts, drawn_with, finish_live, frame_with, ok, open_page,
    outlined, positions_of, stored, strip_of, texts, unescape,
)
from small_runs import BUDGETS, SELECTORS, save_diagnosis
from workbench import plots
from workbench.experiments.gap_anatomy import cell_anatomy
from workbench.experiments.summary import per_example
from workbench.plots.anatomy import SILENT_STYLE, silent_drawn
from workbench.runstore import load_sweep
from workbench.tasks import Example

pytestmark = pytest.mark.usefixtures("_env")


# ----------------------------------------------------------------------------- pages

def test_navigation_registers_every_page(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT).run()
    ok(at)
    assert at.text_input(key="runs_dir").value == str(world["runs"])
    for page in ("runs", "explorer", "curves", "flips", "unit_curve", "fidelity", "live"):
        at.switch_page(f"views/{page}.py").run()
        ok(at)


def test_runs_page_lists_runs_and_shows_their_numbers(world):
    at = open_page("views/runs.py")
    assert at.button(key="demo_start")
    table = drawn_with(at, "run", "kind", "status", "model", "dataset", "examples done", "failures", "start", "end",
                       "problems").set_index("run")
    assert table.loc["tiny", "kind"] == "sweep" and table.loc["tiny", "status"] == "complete"
    assert table.loc["tiny", "examples done"] == "3" and table.loc["tiny", "start"]  # as drawn: a curve's is blank
    assert dict(table["kind"]) == {"tiny": "sweep", "tiny-copy": "sweep", "curve": "curve", "fid": "fidelity",
                                   "one": "diagnosis", "pipe": "pipeline", "pipe-rep": "pipeline",
                                   "one-budget": "sweep", "wide": "sweep", "pipe-all": "pipeline", "gemma": "diagnosis",
                                   "killed": "sweep"}
    assert table.loc["tiny", "of"] == "3" and table.loc["curve", "of"] == ""  # the target: its manifest's n
    assert table.loc["curve", "dataset"].startswith("synthetic prompts") and table.loc["one", "dataset"] == "one example (t0)"
    assert table.loc["pipe", "examples done"] == table.loc["pipe", "of"] == "6"  # requests every method has done
    assert table.loc["one", "examples done"] == "1" and table.loc["tiny", "model"] == "tiny-llama"
    at.selectbox(key="runs_pick").set_value("tiny").run()
    ok(at)
    summary = frame_with(at, "selector", "budget", "em", "ref_b", "ref_c")
    outcomes = per_example(pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet"))  # the coin's draws averaged
    for r in summary.itertuples():
        cell = at_budget(outcomes[outcomes["selector"] == r.selector], r.budget)
        assert r.em == pytest.approx(cell["em"].mean())
    examples = frame_with(at, "example_id", "dense_answer", "spliced_answer")
    saved = pd.read_parquet(world["runs"] / "tiny" / "examples.parquet")
    assert list(examples["example_id"]) == list(saved["example_id"])
    assert list(examples["dense_answer"]) == list(saved["dense_answer"])
    for name in ("curve", "fid", "one", "pipe"):
        at.selectbox(key="runs_pick").set_value(name).run()
        ok(at)


def test_the_run_picked_on_runs_opens_in_the_other_pages(world):
    at = open_page("views/runs.py")
    at.selectbox(key="runs_pick").set_value("tiny-copy").run()
    ok(at)
    for page, key in (("views/explorer.py", "explorer_run"), ("views/curves.py", "curves_run"),
                      ("views/flips.py", "flips_run")):
        at.switch_page(page).run()
        ok(at)
        assert at.selectbox(key=key).value == "tiny-copy", page


def test_explorer_budget_changes_the_marked_tokens(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("tiny").run()
    ok(at)
    for key in ("explorer_example", "explorer_signal", "explorer_outline", "explorer_hm_metric"):
        assert at.selectbox(key=key) is not None
    assert at.multiselect(key="explorer_selectors").value  # kept from the first run shown while still valid
    assert at.select_slider(key="explorer_budget").value == pytest.approx(0.2)
    assert len(at.get("plotly_chart")) >= 4  # strip, picks, two heatmaps, residual
    example_id = at.selectbox(key="explorer_example").value
    selections = stored(world, example_id, "selections")

    def shown_picks():
        table = frame_with(at, "position", "segment", "token", "n_selectors")
        return {s: positions_of(table, s) for s in at.multiselect(key="explorer_selectors").value}

    def check(picks, budget):
        for selector, picked in picks.items():
            row = at_budget(selections[selections["selector"] == selector], budget).iloc[0]
            assert picked == set(int(p) for p in row["positions"])

    low = shown_picks()
    check(low, 0.2)
    outline = at.selectbox(key="explorer_outline").value
    assert outlined(strip_of(at)) == len(low[outline]) > 0

    at.select_slider(key="explorer_budget").set_value(0.5).run()
    ok(at)
    high = shown_picks()
    assert high != low
    check(high, 0.5)
    assert outlined(strip_of(at)) == len(high[outline]) != len(low[outline])

    answers = frame_with(at, "cache", "answer", "flip vs dense").set_index("cache")
    outcomes = stored(world, example_id, "outcomes")
    for selector in high:
        cell = at_budget(outcomes[outcomes["selector"] == selector], 0.5)  # the coin: one row per draw
        shown = answers.loc[f"repaired: {selector}"]
        assert shown["answer"] == cell.iloc[0]["answer"]
        assert shown["EM"] == pytest.approx(cell["em"].mean())
        flips = "FLIP" if cell.iloc[0]["flip"] else "same"
        k = int(cell["flip"].sum())
        assert shown["flip vs dense"] == (flips if len(cell) == 1 else f"FLIP in {k} of {len(cell)} draws" if k
                                          else f"same in all {len(cell)} draws")  # never "FLIP in 0 of 5"
    examples = pd.read_parquet(world["runs"] / "tiny" / "examples.parquet").set_index("example_id")
    assert answers.loc["spliced", "flip vs dense"] == ("FLIP" if examples.loc[example_id, "splice_flip"] else "same")


def test_explorer_signals_examples_and_exports(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("tiny").run()
    assert at.selectbox(key="explorer_signal").value == "deviation"
    assert at.select_slider(key="explorer_layer").value == 2  # deviation: a layer slider, the last layer first
    at.select_slider(key="explorer_layer").set_value(1).run()
    at.radio(key="explorer_kind").set_value("k").run()
    ok(at)
    assert "draft attention (BCR)" in at.selectbox(key="explorer_signal").options  # labels from the registry
    at.selectbox(key="explorer_signal").set_value("draft_attention").run()
    ok(at)
    values = [v for row in array(strip_of(at)["data"][0]["z"]) for v in row if v is not None and v == v]
    signals = stored(world, "q1", "token_signals")
    expected = signals[signals["signal"] == "draft_attention"]["value"]
    assert sorted(values) == pytest.approx(sorted(expected))
    at.selectbox(key="explorer_example").set_value("q2").run()
    ok(at)
    assert any("Dorket Press" in str(t.value) for t in at.text)
    for chart in at.get("plotly_chart"):  # plotly's own colours, not Streamlit's placeholder template
        assert "#000004" not in chart.proto.spec and "#000001" not in chart.proto.spec
    residual = next(c for c in charts(at) if str(c["layout"]["title"].get("text", "")).startswith("deviation of the"))
    assert {t["name"]: t["line"]["color"] for t in residual["data"]}["densedev"] == plots.selector_color("densedev")
    labels = {b.label for b in at.get("download_button")}
    assert {"Figure as HTML", "Picks as CSV", "Report (HTML)", "Report (JSON)"} <= labels
    assert "PNG export needs kaleido" in texts(at) or "Figure as PNG" in labels


def test_explorer_opens_a_saved_diagnosis(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("one").run()
    ok(at)
    assert at.selectbox(key="explorer_example").value == "t0"
    assert len(at.get("plotly_chart")) >= 4
    assert any("In which city was the coach" in str(t.value) for t in at.text)


def test_explorer_deep_link(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update({"run": "tiny-copy", "example": "q2", "budget": "0.5"})
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    assert at.selectbox(key="explorer_run").value == "tiny-copy"
    assert at.selectbox(key="explorer_example").value == "q2"
    assert at.select_slider(key="explorer_budget").value == pytest.approx(0.5)
    # the first selectors that are not references (`none`, `full`), by default
    assert at.multiselect(key="explorer_selectors").value == ["random", "cacheblend", "densedev", "bcr:single"]


def test_data_text_is_shown_as_text_never_as_markdown(world):
    at = open_page("views/explorer.py", runs=world["leak"])
    assert at.selectbox(key="explorer_example").value == "leaky"
    shown = [str(t.value) for t in at.text]
    assert any(LEAK in t and t.startswith("Question:") for t in shown)
    assert any(LEAK in t and t.startswith("Passage 2:") for t in shown)
    assert any(LEAK in t and t.startswith("Gold:") for t in shown)
    rendered = [str(e.value) for kind in ("markdown", "caption", "info", "warning", "error", "success", "title",
                                          "header", "subheader") for e in getattr(at, kind)]
    assert not any("](" in r or "http" in r for r in rendered), rendered
    at.switch_page("views/runs.py").run()
    ok(at)
    assert not any("](" in str(e.value) for e in at.markdown)


def test_budget_curves_numbers_come_from_the_run(world):
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value("tiny").run()
    ok(at)
    assert len(at.get("plotly_chart")) == 7  # the gap closed, the forest plot, exact match, flips, graded, rows,
    # and what the lost exact matches are (the run records retrieved)
    assert at.selectbox(key="curves_graded").value == "f1_to_dense"
    at.selectbox(key="curves_graded").set_value("first_kl").run()
    ok(at)
    assert at.selectbox(key="curves_reference").value == "cacheblend"
    summary = frame_with(at, "selector", "budget", "em", "flip_rate", "ref_b", "ref_c", "ref_p_holm")
    outcomes = per_example(pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet"))  # the coin's draws averaged
    assert len(summary) == len(SELECTORS) * len(BUDGETS)
    for r in summary.itertuples():
        cell = at_budget(outcomes[outcomes["selector"] == r.selector], r.budget)
        assert r.em == pytest.approx(cell["em"].mean())
        assert r.flip_rate == pytest.approx(cell["flip"].mean())
        assert r.n == len(cell)
    em = next(c for c in charts(at) if "Exact match against budget" in str(c["layout"]["title"]))
    line = next(t for t in em["data"] if t.get("name") == "densedev")
    assert array(line["y"]) == pytest.approx(list(outcomes[outcomes["selector"] == "densedev"]
                                                  .groupby("budget")["em"].mean().sort_index()))
    assert line["line"]["color"] == plots.selector_color("densedev")
    anatomy = next(c for c in charts(at) if "lost exact matches are" in str(c["layout"]["title"]))
    sweep = load_sweep(world["runs"] / "tiny")
    drawn = silent_drawn(cell_anatomy(sweep.outcomes, sweep.examples), 0.2, list(anatomy["data"][0]["y"]))
    assert any(t.get("name") == SILENT_STYLE[0] for t in anatomy["data"]) == bool(drawn)
    caption = next(c.value for c in at.caption if c.value.startswith("Each bar:"))
    assert ("are drawn apart" in caption, "None of the lost gold" in caption) == {
        True: (True, False), False: (False, True), None: (False, False)}[drawn]
    at.selectbox(key="curves_reference").set_value("random").run()
    ok(at)
    at.slider(key="curves_share").set_value(0.5).run()
    ok(at)


def test_a_run_without_a_reference_shows_a_note(world):
    for page in ("views/curves.py", "views/runs.py"):
        at = open_page(page, runs=world["noref"])
        assert not at.error
        assert any("no default reference" in i.value or "No reference selector" in i.value for i in at.info), page
    at = open_page("views/curves.py", runs=world["noref"])
    assert at.selectbox(key="curves_reference").value == ""
    assert set(drawn_with(at, "selector", "ref_p_holm")["ref_p_holm"]) == {""}  # blank, never "None"
    at.selectbox(key="curves_reference").set_value("densedev").run()
    ok(at)


def test_decision_flips_matrix_is_the_runs(world):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value("tiny").run()
    ok(at)
    outcomes = per_example(pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet"))  # the coin: the share of its draws
    for budget in BUDGETS:
        at.select_slider(key="flips_budget").set_value(budget).run()
        ok(at)
        shown = frame_with(at, "example_id", "cacheblend", "densedev").set_index("example_id")
        for r in at_budget(outcomes, budget).itertuples():
            assert shown.loc[r.example_id, r.selector] == pytest.approx(r.flip, abs=1e-3)  # a coin: its share
        assert set(frame_with(at, "selector", "rescued", "broken")["selector"]) == set(SELECTORS)
    at.toggle(key="flips_strict").set_value(True).run()
    ok(at)
    shown = frame_with(at, "example_id", "cacheblend").set_index("example_id")
    for r in at_budget(outcomes, BUDGETS[-1]).itertuples():
        assert shown.loc[r.example_id, r.selector] == int(r.flip_strict > 0.5)
    at.selectbox(key="flips_baseline").set_value("random").run()
    ok(at)


def test_unit_of_choice_page(world):
    at = open_page("views/unit_curve.py")
    assert at.selectbox(key="unit_run").value == "curve"
    assert len(at.get("plotly_chart")) == 1
    summary = frame_with(at, "unit", "informed_error", "random_error")
    saved = pd.read_parquet(world["runs"] / "curve" / "summary.parquet")
    assert list(summary["unit"]) == list(saved["unit"])
    assert list(summary["informed_error"]) == pytest.approx(list(saved["informed_error"]))


def test_fidelity_page(world):
    at = open_page("views/fidelity.py")
    assert at.selectbox(key="fidelity_run").value == "fid"
    assert len(at.get("plotly_chart")) >= 1
    conditions = frame_with(at, "condition", "transfer", "key_cos")
    saved = pd.read_parquet(world["runs"] / "fid" / "conditions.parquet")
    assert list(conditions["transfer"]) == pytest.approx(list(saved["transfer"]))
    assert "3 questions" in texts(at)
    at.radio(key="fidelity_x").set_value("value_cos").run()
    ok(at)


def test_multi_agent_page(world):
    at = open_page("views/pipeline.py")
    assert at.selectbox(key="pipeline_run").value == "pipe"
    methods = frame_with(at, "method", "reuse", "acc", "line_pred")
    saved = pd.read_parquet(world["runs"] / "pipe" / "requests.parquet")
    assert list(methods["method"]) == list(dict.fromkeys(saved["method"]))
    assert list(methods["acc"]) == pytest.approx(list(saved.groupby("method", sort=False)["contains"].mean()))
    assert at.selectbox(key="pipe_method").value == "kvcomm"
    calls = frame_with(at, "agent", "role", "reused", "max_entropy")
    assert list(calls["role"]) == ["reader", "reasoner", "answerer"]
    at.selectbox(key="pipe_method").set_value("kvcomm-always").run()
    at.selectbox(key="pipe_request").set_value(5).run()
    ok(at)
    graph = charts(at)[1]
    reused = pd.read_parquet(world["runs"] / "pipe" / "calls.parquet").query("method == 'kvcomm-always' and index == 5")
    drawn = {t["name"]: len(array(t["x"])) for t in graph["data"]}
    assert drawn.get("reused (no dense prefill)", 0) == int(reused["reused"].sum())
    assert drawn.get("dense prefill", 0) == int((~reused["reused"]).sum())


def test_multi_agent_page_shows_the_repair_on_top(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params["run"] = "pipe-rep"
    at.run()
    at.switch_page("views/pipeline.py")
    at.run()
    ok(at)
    table = frame_with(at, "selector", "budget", "flip_rate", "ref_b")
    assert {"bcr", "bcr:grow", "random"} <= set(table["selector"])
    assert any("served from a predicted cache" in c.value for c in at.caption)


def test_live_diagnoses_explores_and_saves(world, tmp_path):
    at = open_page("views/live.py", runs=tmp_path)
    assert at.text_area(key="live_passages").value.strip()
    assert at.text_input(key="live_question").value.strip()
    demo = sys.modules["demo"]
    assert at.multiselect(key="live_selectors").value == list(demo.demo_config().diagnose.selectors)
    assert {"epic", "prophetkv", "relaxkv", "prophetkv:grow"} <= set(at.multiselect(key="live_selectors").options)
    at.text_input(key="live_budgets").set_value("0.2, 0.5")
    at.multiselect(key="live_selectors").set_value(["none", "random", "densedev", "bcr"])
    at.number_input(key="live_max_new").set_value(3)
    at.button(key="live_run").click().run()
    finish_live(at)
    assert not at.warning, [w.value for w in at.warning]
    assert len(at.get("plotly_chart")) >= 4
    assert any("Diagnosed in" in c.value and "drawn in" in c.value for c in at.caption)  # the drawing counted too
    assert set(at.selectbox(key="liveview_effects_selector").options) == {"random", "densedev", "bcr"}  # layer by layer
    budget = at.select_slider(key="liveview_budget")
    assert budget.value == pytest.approx(0.2)
    low = frame_with(at, "position", "n_selectors")
    budget.set_value(0.5).run()
    ok(at)
    high = frame_with(at, "position", "n_selectors")
    assert positions_of(low, "densedev") != positions_of(high, "densedev")

    at.text_input(key="live_save_name").set_value("saved")
    at.button(key="live_save").click().run()
    ok(at)
    saved = tmp_path / "saved"
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["kind"] == "diagnosis" and manifest["status"] == "complete"
    selections = pd.read_parquet(saved / "selections.parquet")
    assert set(selections["selector"]) == {"none", "random", "densedev", "bcr"}
    row = at_budget(selections[selections["selector"] == "densedev"], 0.5).iloc[0]
    assert positions_of(high, "densedev") == set(int(p) for p in row["positions"])
    at.button(key="live_save").click().run()  # the name is taken now: a message, nothing replaced
    ok(at)
    assert any("Could not save" in w.value for w in at.warning)
    ex = open_page("views/explorer.py", runs=tmp_path)  # the saved run opens in the explorer
    assert ex.selectbox(key="explorer_run").value == "saved"
    assert len(ex.get("plotly_chart")) >= 4


def test_live_empty_passage_says_so(world):
    at = open_page("views/live.py")
    at.text_area(key="live_passages").set_value("   \n\n  ")
    at.button(key="live_run").click().run()
    ok(at)
    assert any("passage is empty" in w.value for w in at.warning), [w.value for w in at.warning]


def test_live_too_long_says_the_limit(world):
    at = open_page("views/live.py")
    at.text_area(key="live_passages").set_value("word " * 600)  # 3000 bytes: the tiny model takes 2048 positions
    at.button(key="live_run").click().run()
    ok(at)
    messages = [w.value for w in at.warning]
    assert any("too long" in m and "2048" in m for m in messages), messages


def test_the_sidebar_model_field_picks_the_model_live_loads(world, tmp_path):
    at = open_page("views/live.py")
    assert at.sidebar.text_input(key="model_spec").value == str(world["model"])  # from $KVWB_MODEL
    at.sidebar.text_input(key="model_spec").set_value(str(tmp_path / "no-model")).run()
    at.button(key="live_run").click().run()
    errors = [e.value.replace("\\", "") for e in at.error]  # markdown escapes removed
    assert any("no-model" in e and "no such model folder" in e for e in errors), errors


def test_live_limit_of_the_page(world, monkeypatch):
    monkeypatch.setenv("KVWB_LIVE_MAX_TOKENS", "100")
    at = open_page("views/live.py")
    at.button(key="live_run").click().run()
    ok(at)
    assert any("too long for Live" in w.value and "100" in w.value for w in at.warning)


def test_live_loads_an_example_of_every_kind_the_data_set_field_offers(world):
    at = open_page("views/live.py")
    assert at.selectbox(key="live_kind").options == ["synthetic", "hotpotqa", "2wiki", "jsonl", "musique", "ruler"]
    at.selectbox(key="live_kind").set_value("ruler")
    at.text_input(key="live_arg").set_value("niah_multivalue")
    at.text_input(key="live_example_id").set_value("2")
    at.button(key="live_load").click().run()
    ok(at)
    assert not at.warning, [w.value for w in at.warning]
    assert at.text_area(key="live_passages").value.count("One of the special magic numbers for") == 4
    assert at.checkbox(key="live_all").value and "special magic numbers" in at.text_input(key="live_system").value
    assert at.text_input(key="live_lead").value.startswith("The special magic numbers for")
    at.text_input(key="live_arg").set_value("niah_double")
    at.button(key="live_load").click().run()
    ok(at)
    warnings = [w.value.replace("\\", "") for w in at.warning]  # markdown escapes removed
    assert any("unknown RULER task 'niah_double'" in w for w in warnings), warnings
    at.selectbox(key="live_kind").set_value("hotpotqa")
    at.text_input(key="live_arg").set_value(str(ROOT / "tests" / "fixtures" / "hotpotqa_sample.json"))
    at.text_input(key="live_example_id").set_value("hp-bridge-0001")
    at.button(key="live_load").click().run()
    ok(at)
    assert not at.warning and not at.checkbox(key="live_all").value
    assert at.text_input(key="live_gold").value == "Tressamor"


def test_live_bad_budgets_and_no_selectors_say_so(world):
    at = open_page("views/live.py")
    at.text_input(key="live_budgets").set_value("0.1, lots")
    at.button(key="live_run").click().run()
    ok(at)
    assert any("Budgets must be numbers" in w.value for w in at.warning)
    at.text_input(key="live_budgets").set_value("0.1")
    at.multiselect(key="live_selectors").set_value([])
    at.button(key="live_run").click().run()
    ok(at)
    assert any("Choose at least one selector" in w.value for w in at.warning)


# ----------------------------------------------------------------------------- plugins

@pytest.fixture
def toy_plugin(monkeypatch):
    """$KVWB_PLUGINS names toy_plugin.py; its registrations go into copies of the registries that
    are put back afterwards, so no other test sees them."""
    from workbench.selectors import registry as selectors
    from workbench.signals import registry as signals

    monkeypatch.setattr(selectors, "_REGISTRY", selectors._REGISTRY.copy())
    monkeypatch.setattr(signals, "_REGISTRY", signals._REGISTRY.copy())
    monkeypatch.setenv("KVWB_PLUGINS", f"json, {PLUGIN}")
    yield
    for name in [n for n in sys.modules if n.startswith("kvwb_plugin_toy_plugin")]:
        del sys.modules[name]


def test_plugins_named_in_the_environment_reach_the_app(world, toy_plugin, tmp_path):
    from workbench.selectors import selector_names

    assert "toy-first" not in selector_names()
    at = open_page("views/live.py", runs=tmp_path)  # the app imports the plugin at start-up
    assert "toy-first" in selector_names()
    assert "toy-first" in at.multiselect(key="live_selectors").options
    example = Example("toy", ("Varek Olundi is coached by Mira Tessk.", "Mira Tessk lives in Tressamor."),
                      "Where does the coach live?", ("Tressamor",))
    save_diagnosis(world["tiny_model"], example, tmp_path / "toy", selectors=("none", "toy-first", "densedev"))
    at.switch_page("views/explorer.py").run()
    ok(at)
    assert "toy length" in at.selectbox(key="explorer_signal").options
    assert "toy-first" in at.multiselect(key="explorer_selectors").value
    at.selectbox(key="explorer_signal").set_value("toy_len").run()
    ok(at)
    assert "toy length" in strip_of(at)["layout"]["title"]["text"]


def test_a_broken_plugin_is_a_message(world, monkeypatch):
    monkeypatch.setenv("KVWB_PLUGINS", "no_such_kvwb_plugin, /nowhere/plugin.py")
    at = open_page("views/runs.py")
    errors = unescape(" ".join(e.value for e in at.sidebar.error))
    assert "'no_such_kvwb_plugin' did not load (ModuleNotFoundError" in errors
    assert "'/nowhere/plugin.py' did not load (FileNotFoundError" in errors


# ----------------------------------------------------------------------------- bad input, no data

def test_incomplete_run_names_what_is_missing(world):
    at = open_page("views/runs.py", runs=world["bad"])
    table = frame_with(at, "run", "problems").set_index("run")
    assert "examples.parquet" in table.loc["broken", "problems"]
    assert "flip_strict" in table.loc["old", "problems"]
    at.selectbox(key="runs_pick").set_value("broken").run()
    ok(at)
    assert any("missing examples.parquet, outcomes.parquet, diagnoses" in unescape(w.value) for w in at.warning)
    for page, key in (("views/curves.py", "curves_run"), ("views/flips.py", "flips_run")):
        at.switch_page(page).run()
        ok(at)
        for name in ("broken", "old"):
            at.selectbox(key=key).set_value(name).run()
            ok(at)
            assert at.warning, f"{page} said nothing about {name}"
    at.switch_page("views/explorer.py").run()
    at.selectbox(key="explorer_run").set_value("broken").run()
    ok(at)
    assert any("no finished example" in w.value for w in at.warning)
    at.selectbox(key="explorer_run").set_value("old").run()  # its diagnoses are whole: shown
    ok(at)
    assert len(at.get("plotly_chart")) >= 4


def test_no_runs_pages_say_how_to_get_data(world):
    """The command writes where the app reads (the review saw `--out runs/NAME` beside another runs
    directory)."""
    for page, kind, what in (("views/explorer.py", "sweep", "run"), ("views/curves.py", "sweep", "run"),
                             ("views/flips.py", "sweep", "run"), ("views/unit_curve.py", "curve", "curve"),
                             ("views/fidelity.py", "fidelity", "fidelity")):
        at = open_page(page, runs=world["empty"])
        info = " ".join(i.value for i in at.info)
        assert f"kvwb {what} " in info and f"--out {world['empty']}/NAME`" in info and "runs/NAME" not in info, info
    at = open_page("views/runs.py", runs=world["empty"] / "nowhere")
    info = " ".join(i.value for i in at.info)
    assert f"kvwb run --n 12 --out {world['empty']}/nowhere/NAME`" in info and "runs/NAME" not in info, info
    assert at.button(key="demo_start")


def test_demo_run_computes_in_the_background(world, tmp_path):
    at = open_page("views/runs.py", runs=tmp_path)
    at.button(key="demo_start").click().run()
    ok(at)
    demo = sys.modules["demo"]
    job = demo.demo_job()
    assert job.out == tmp_path / "demo"
    assert at.get("progress") or at.success, "no progress shown"
    job.thread.join(timeout=300)
    assert not job.running and job.error is None, job.error
    at.run()
    ok(at)
    assert any("Demo run finished" in s.value for s in at.success)
    table = frame_with(at, "run", "examples done").set_index("run")
    assert table.loc["demo", "examples done"] == demo.demo_config().n
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    assert manifest["args"]["diagnose"]["selectors"] == list(demo.demo_config().diagnose.selectors)


def test_the_axis_check_catches_the_old_unit_curve_figure(world):
    """`ok()` checks every figure with `plots.axis_problems`; the first version's unit-curve
    figure (notes at x = 64 and 256 on a log axis) fails it, today's figure passes."""
    from small_runs import old_unit_curve_figure

    problems = plots.axis_problems(json.loads(old_unit_curve_figure().to_json()))
    assert any("10^256" in p for p in problems), problems
    at = open_page("views/unit_curve.py")
    assert not plots.axis_problems(charts(at)[0])


def test_a_long_context_shows_one_segment_of_the_strip_at_a_time(world):
    at = open_page("views/explorer.py", runs=world["long"])
    assert at.selectbox(key="explorer_example").value == "long"
    chooser = at.selectbox(key="explorer_segment")
    assert chooser.options[0] == "all segments" and "passage 2" in chooser.options
    strip = strip_of(at)
    assert strip["layout"]["yaxis"]["ticktext"] == [chooser.value]  # one segment by default
    chooser.set_value("all segments").run()
    ok(at)
    assert len(strip_of(at)["layout"]["yaxis"]["ticktext"]) > 2  # prefix, passages, suffix
