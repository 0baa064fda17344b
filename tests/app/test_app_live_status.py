"""Live's status (issue 45, item 9): the status lines say each job's stage and time as they are
now and whose it is (this session's, or which other browser session's); a waiting run is told who
holds the model; the result says which field values it was computed with, and which fields have
changed since."""

from __future__ import annotations

import sys
import time

import pytest

from apptest import finish_live, ok, open_page, texts, unescape
from small_runs import save_model


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    _, folder = save_model(tmp_path_factory.mktemp("live-status"))
    return folder


@pytest.fixture(autouse=True)
def _env(model_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(tmp_path))
    monkeypatch.setenv("KVWB_MODEL", str(model_folder))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def sidebar_text(at) -> str:
    shown = (e.value for kind in ("caption", "error", "markdown") for e in getattr(at.sidebar, kind))
    return unescape(" ".join(str(v) for v in shown))


def test_the_status_lines_follow_the_jobs_and_say_whose_they_are():
    open_page("views/live.py")  # imports the app's modules
    jobs, status = sys.modules["jobs"], sys.modules["status"]
    gate = jobs.ModelGate()
    theirs, mine = jobs.Job("a Live diagnosis of example 5", owner="session 1"), jobs.Job("mine", owner="session 2")
    gate.acquire(theirs)
    theirs.began = time.time() - 12
    theirs.progress(0.5, "repairs with their answers: 10 of 20 cells")
    gate.line.append(mine)  # as acquire leaves a job that waits
    lines = status.pending_lines(gate, "session 2")
    assert lines[0] == ("running (session 1, another browser session): a Live diagnosis of example 5 (repairs with "
                        "their answers: 10 of 20 cells, running for 12 s)")
    assert lines[1].startswith("waiting (this session): mine (asked ")
    theirs.progress(0.97, "all 20 cells done")
    theirs.began -= 30
    assert status.pending_lines(gate, "session 1")[0] == ("running (this session): a Live diagnosis of example 5 "
                                                          "(all 20 cells done, running for 42 s)")
    assert "of session 1" in gate.busy_text(mine)  # the waiting run is told whose run holds the model


def test_a_waiting_run_is_told_whose_run_holds_the_model_and_the_result_names_its_fields():
    at = open_page("views/live.py")
    jobs, state = sys.modules["jobs"], sys.modules["state"]
    gate, holder = state.model_gate(), jobs.Job("the test's hold on the model", owner="session 99")
    at.multiselect(key="live_selectors").set_value(["none", "random", "densedev"])
    at.text_input(key="live_budgets").set_value("0.2")
    at.number_input(key="live_max_new").set_value(3)
    gate.acquire(holder)
    try:
        at.button(key="live_run").click().run()
        at.run()
        said = sidebar_text(at)
        assert "running (session 99, another browser session): the test's hold on the model" in said
        mine = at.session_state["kvwb_session"]
        assert "waiting (this session): a Live diagnosis of example" in said and mine != "session 99"
        assert "The model is busy with the test's hold on the model of session 99" in unescape(texts(at))
    finally:
        gate.release(holder)
    finish_live(at)
    assert "Status" not in sidebar_text(at)  # nothing pending: no stale line
    used = [c.value for c in at.caption if c.value.startswith("Computed with:")]
    assert len(used) == 1 and "selectors none, random, densedev; budgets 0.2; 3 answer tokens" in unescape(used[0])
    assert not [w for w in at.warning if "fields have changed" in w.value]
    at.text_input(key="live_budgets").set_value("0.5").run()
    ok(at)
    changed = [w.value for w in at.warning if "fields have changed" in w.value]
    assert len(changed) == 1 and "(budgets)" in changed[0]
    assert "budgets 0.2;" in unescape(" ".join(c.value for c in at.caption if c.value.startswith("Computed with:")))
