"""The app as an instrument, with Streamlit's AppTest: Live's runs survive widget changes and
wait in line for the model with a true message, a killed run says so on Runs, the explorer's
URL holds its view both ways, examples are found, filtered and stepped through, and the
aggregate pages' filters and summaries. The run folders come from conftest.py."""

from __future__ import annotations

import json
import sys

import pytest
from streamlit.testing.v1 import AppTest

from apptest import _env, world  # noqa: F401 - fixtures
from apptest import HOME, TIMEOUT, charts, drawn_with, finish_live, frame_with, ok, open_page, texts, unescape
from small_runs import WIDE_SELECTORS
from workbench.runstore import STOPPED, load_sweep

pytestmark = pytest.mark.usefixtures("_env")


@pytest.fixture
def held_model():
    """The app's model gate, held by a job of the test's own (as another session's run would)."""
    open_page("views/runs.py")  # the app's modules are imported by then
    jobs, state = sys.modules["jobs"], sys.modules["state"]
    gate, holder = state.model_gate(), jobs.Job("the test's hold on the model")
    gate.acquire(holder)
    try:
        yield gate, holder
    finally:
        gate.release(holder)


def start_live(at: AppTest, max_new: int = 3):
    at.multiselect(key="live_selectors").set_value(["none", "random", "densedev"])
    at.text_input(key="live_budgets").set_value("0.2")
    at.number_input(key="live_max_new").set_value(max_new)
    at.button(key="live_run").click().run()
    ok(at)
    return at.session_state["live_job"]


def test_a_widget_change_during_a_live_run_does_not_discard_it(held_model, tmp_path):
    gate, holder = held_model
    at = open_page("views/live.py", runs=tmp_path)
    job = start_live(at)
    assert job.state == "waiting"
    assert "busy with the test's hold on the model" in unescape(texts(at)) and "nothing is lost" in unescape(texts(at))
    at.number_input(key="live_max_new").increment().run()  # "+" on Answer tokens while the run waits
    ok(at)
    assert at.session_state["live_job"] is job and job.active  # the run is still there
    assert "Press **Run diagnosis**" not in texts(at)
    assert at.button(key="live_run").disabled and at.button(key="live_cancel")
    gate.release(holder)
    finish_live(at)
    assert "live_job" not in at.session_state and len(charts(at)) >= 4
    assert at.session_state["live_diagnosis"].config.max_new_tokens == 3  # the fields as they were at Run


def test_a_cancelled_live_run_says_so(held_model, tmp_path):
    at = open_page("views/live.py", runs=tmp_path)
    job = start_live(at)
    at.button(key="live_cancel").click().run()
    job.thread.join(30)
    assert job.state == "cancelled"
    at.run()
    ok(at)
    assert any("was cancelled" in w.value for w in at.warning)
    assert "live_diagnosis" not in at.session_state and not at.button(key="live_run").disabled


def test_a_second_session_is_told_the_truth_and_runs_when_the_first_ends(held_model, tmp_path):
    gate, holder = held_model
    first, second = open_page("views/live.py", runs=tmp_path), open_page("views/live.py", runs=tmp_path)
    job_a = start_live(first)
    job_b = start_live(second)
    told = unescape(texts(second))
    assert "busy with the test's hold on the model" in told and "a Live diagnosis of example" in told, told
    assert "demo run" not in told and "0 of 0" not in told
    gate.release(holder)
    finish_live(first)
    finish_live(second)
    assert job_a.state == job_b.state == "done" and job_b.began >= job_a.finished  # in line, one after the other
    assert len(charts(second)) >= 4 and second.session_state["live_diagnosis"] is not None
    again = open_page("views/live.py", runs=tmp_path)  # while the model is free: no waiting message
    start_live(again)
    finish_live(again)
    assert not any("busy" in i.value for i in again.info)


def test_a_killed_run_says_its_process_is_gone(world):
    at = open_page("views/runs.py")
    table = drawn_with(at, "run", "status", "examples done", "of").set_index("run")
    assert table.loc["killed", "status"] == STOPPED
    assert (table.loc["killed", "examples done"], table.loc["killed", "of"]) == ("2", "5")
    assert table.loc["tiny", "status"] == "complete"
    at.selectbox(key="runs_pick").set_value("killed").run()
    ok(at)
    said = unescape(" ".join(w.value for w in at.warning))
    assert "stopped (its process is gone)" in said and "2 of 5 examples done" in said and "last written" in said


def test_runs_summaries_are_full_width_for_every_kind(world):
    at = open_page("views/runs.py")
    at.selectbox(key="runs_pick").set_value("tiny").run()
    assert any("ref_p_holm" in d.value.columns for d in at.dataframe)
    assert not at.columns  # the summary spans the page: no narrow column beside a manifest
    at.selectbox(key="runs_pick").set_value("fid").run()
    ok(at)
    fid = frame_with(at, "condition", "variant", "points", "lowest", "highest")
    assert len(fid) and "floor transfer" in texts(at)
    at.selectbox(key="runs_pick").set_value("pipe").run()
    ok(at)
    methods = frame_with(at, "method", "reuse", "acc")
    assert list(methods["method"]) == ["chat-template", "token-matched", "kvcomm", "kvcomm-always"]


def test_the_explorer_url_holds_its_view_both_ways(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update({"run": "wide", "example": "q2", "budget": "0.2", "selectors": "cadence-grad,cacheblend",
                            "signal": "draft_attention"})
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    assert at.selectbox(key="explorer_run").value == "wide" and at.selectbox(key="explorer_example").value == "q2"
    assert at.select_slider(key="explorer_budget").value == pytest.approx(0.2)
    assert at.multiselect(key="explorer_selectors").value == ["cadence-grad", "cacheblend"]
    assert at.selectbox(key="explorer_signal").value == "draft_attention"
    at.select_slider(key="explorer_budget").set_value(0.5).run()
    ok(at)
    assert at.query_params["budget"] == "0.5" and at.query_params["example"] == "q2"
    at.selectbox(key="explorer_signal").set_value("deviation").run()
    at.select_slider(key="explorer_layer").set_value(1).run()
    ok(at)
    assert at.query_params["signal"] == "deviation" and at.query_params["layer"] == "1"
    link = at.code[-1].value
    assert link.startswith("/explorer?run=wide&example=q2&budget=0.5&selectors=cadence-grad,cacheblend")
    reopened = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)  # the link, opened in a new session
    reopened.query_params.update(dict(at.query_params))
    reopened.run()
    reopened.switch_page("views/explorer.py").run()
    ok(reopened)
    assert reopened.select_slider(key="explorer_layer").value == 1
    assert reopened.select_slider(key="explorer_budget").value == pytest.approx(0.5)


def listed(at: AppTest) -> list[str]:
    """The explorer's example list, as ids (its options read "ID: question")."""
    return [o.split(":")[0] for o in at.selectbox(key="explorer_example").options]


def test_examples_are_searched_filtered_sorted_and_stepped_through(world):
    sweep = load_sweep(world["runs"] / "wide")
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("wide").run()
    ok(at)
    ids = list(sweep.examples["example_id"])
    assert listed(at) == ids
    at.button(key="explorer_example_next").click().run()
    ok(at)
    assert at.selectbox(key="explorer_example").value == ids[1]
    at.button(key="explorer_example_previous").click().run()
    assert at.selectbox(key="explorer_example").value == ids[0] and at.button(key="explorer_example_previous").disabled
    word = sweep.examples["question"].iloc[-1].split()[-1].strip("?")
    at.text_input(key="explorer_search").set_value(word.upper()).run()
    ok(at)
    wanted = [i for i, q in zip(ids, sweep.examples["question"]) if word.lower() in q.lower()]
    assert listed(at) == wanted
    at.text_input(key="explorer_search").set_value("").run()
    at.selectbox(key="explorer_sort").set_value("n_tokens").run()
    at.toggle(key="explorer_descending").set_value(True).run()
    ok(at)
    longest = sweep.examples.sort_values("n_tokens", ascending=False, kind="stable")["example_id"].tolist()
    assert listed(at) == longest
    at.selectbox(key="explorer_filter").set_value("a_not_b").run()
    ok(at)
    assert at.selectbox(key="explorer_a") and at.selectbox(key="explorer_b")


def test_budget_curves_filter_selectors_and_place_one_budget_on_its_tick(world):
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value("wide").run()
    ok(at)
    assert len(at.multiselect(key="curves_selectors").value) == len(WIDE_SELECTORS) - 2  # all but the references
    at.multiselect(key="curves_selectors").set_value(["bcr", "coin:bcr"]).run()
    ok(at)
    em = next(c for c in charts(at) if "Exact match against budget" in str(c["layout"]["title"]))  # the gap leads
    first = {}  # a selector's first trace (one whose points are partly hollow draws more than one)
    for t in em["data"]:
        first.setdefault(t["name"], t)
    assert list(first) == ["bcr", "coin:bcr"]
    assert first["coin:bcr"]["line"]["color"] == first["bcr"]["line"]["color"] and first["coin:bcr"]["line"]["dash"] == "dot"
    at.selectbox(key="curves_run").set_value("one-budget").run()
    ok(at)
    one = next(c for c in charts(at) if "Exact match against budget" in str(c["layout"]["title"]))
    assert one["layout"]["xaxis"]["ticktext"] == ["0.2"] and one["layout"]["xaxis"]["range"] == [-0.5, 0.5]


def test_the_flip_matrix_hovers_with_questions_and_opens_examples(world):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value("wide").run()
    ok(at)
    matrix = charts(at)[0]
    cells = next(t for t in matrix["data"] if t.get("name") == "cells")
    question = load_sweep(world["runs"] / "wide").examples["question"].iloc[0]
    assert any(question[:20] in t for t in cells["text"]) and any("of its 5 draws" in t for t in cells["text"])
    link = next(p for p in at.get("page_link") if "explorer" in str(p.proto.page))
    assert "run=wide" in link.proto.query_string and "example=" in link.proto.query_string


def test_answer_cells_of_a_coin_name_each_draw(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update({"run": "wide", "example": "q1", "budget": "0.2", "selectors": "bcr,coin:bcr"})
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    answers = frame_with(at, "cache", "flip vs dense").set_index("cache")
    cell = answers.loc["repaired: coin:bcr", "flip vs dense"]
    assert cell.startswith("FLIP in ") or cell == "same in all 5 draws"
    draws = frame_with(at, "selector", "draw", "answer")
    assert sorted(draws["draw"]) == [0, 1, 2, 3, 4] and set(draws["selector"]) == {"coin:bcr"}
    assert "flips in 0" not in cell.lower()


def test_a_gemma_diagnosis_keeps_its_layer_axis(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("gemma").run()
    ok(at)
    types = next(c for c in charts(at) if "by layer type" in str(c["layout"].get("title", {}).get("text", "")))
    layers = sorted({x for t in types["data"] for x in t["x"]})
    assert types["layout"]["xaxis"]["range"] == [layers[0] - 0.5, layers[-1] + 0.5]


def test_live_keeps_every_selector_chip_in_view(world):
    at = open_page("views/live.py")
    chips = at.multiselect(key="live_selectors")
    assert len(chips.value) == 7 and chips.value == list(sys.modules["state"].quick_selectors())
    assert all(len(column.multiselect) == 0 for column in at.columns)  # a row of its own, not half of one


def test_manifests_show_seconds_rounded(world):
    at = open_page("views/runs.py")
    at.selectbox(key="runs_pick").set_value("curve").run()
    ok(at)
    shown = at.json[0].value
    seconds = (json.loads(shown) if isinstance(shown, str) else shown)["seconds"]
    assert seconds == round(seconds, 2)  # 98.6, never 98.59604503000003
