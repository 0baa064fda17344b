"""Live's speed in the app (issue 45, defect 7 / item 9), without timing anything: the redraws that
poll a running job end without Streamlit's full garbage collection (each one held the GIL from the
job's thread: Live's diagnosis ran ~10x slower in the app than in a plain script, docs/BENCHMARKS.md
"Live in the app"), a user's own setting of it is kept, and Live reads the layer effects from its
batched pass instead of running the suffix again."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest
from streamlit import config as st_config
from streamlit.runtime.scriptrunner import script_runner

from apptest import open_page
from conftest import small_example
from workbench import app_api
from workbench.diagnosis import DiagnoseConfig, layer_effects

OPTION = "runner.postScriptGC"


@pytest.fixture
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(tmp_path))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


@pytest.fixture
def option_kept():
    """The option as it was, put back after the test (it is the process's)."""
    value, where = st_config.get_option(OPTION), st_config.get_where_defined(OPTION)
    yield
    st_config.set_option(OPTION, value, where)


def full_collections_after_a_redraw(monkeypatch) -> int:
    """How many `gc.collect(2)` Streamlit's own end of a script run (a fragment's redraw) calls now."""
    calls = []
    monkeypatch.setattr(script_runner, "gc", SimpleNamespace(collect=lambda generation=2: calls.append(generation)))
    runner = SimpleNamespace(_join_wake_lock=threading.Lock(), _join_wake_coordinator=None,
                             on_event=SimpleNamespace(send=lambda *a, **k: None))
    ctx = SimpleNamespace(has_script_started=False)  # no media files to sweep: only the collection is left
    script_runner.ScriptRunner._on_script_finished(runner, ctx, script_runner.ScriptRunnerEvent.SCRIPT_STOPPED_WITH_SUCCESS,
                                                   True, None)
    return calls.count(2)


def test_the_apps_redraws_end_without_a_full_garbage_collection(_env, option_kept, monkeypatch):
    st_config.set_option(OPTION, True, st_config.ConfigOption.DEFAULT_DEFINITION)  # as Streamlit starts
    assert full_collections_after_a_redraw(monkeypatch) == 1  # Streamlit's default: one per script run
    state = sys.modules.get("state")
    if state is not None:  # imported by an earlier test: the module's own call ran then
        assert state.keep_redraws_light() is True
    else:
        open_page("views/live.py")  # imports the app's modules, as its first script run does
    assert st_config.get_option(OPTION) is False
    assert full_collections_after_a_redraw(monkeypatch) == 0


def test_a_users_own_setting_is_kept(_env, option_kept, monkeypatch):
    open_page("views/live.py")
    state = sys.modules["state"]
    st_config.set_option(OPTION, True, "a user's .streamlit/config.toml")
    assert state.keep_redraws_light() is False
    assert st_config.get_option(OPTION) is True and full_collections_after_a_redraw(monkeypatch) == 1


def test_live_reads_the_layer_effects_from_its_batched_pass_once(tiny_llama, monkeypatch):
    """No serial suffix pass (`layer_effects.suffix_residuals`), and each distinct cell's residuals read
    once (the splice, `random`'s cell, dense), whatever the selections that share a cell."""
    serial, read = [], []
    monkeypatch.setattr(layer_effects, "suffix_residuals", lambda *a, **k: serial.append(a) or [])
    residuals = layer_effects.SuffixCapture.residuals
    monkeypatch.setattr(layer_effects.SuffixCapture, "residuals",
                        lambda self, cell: read.append((id(self), cell)) or residuals(self, cell))
    config = DiagnoseConfig(selectors=("none", "full", "random"), budgets=(0.3, 0.6), max_new_tokens=3,
                            attribution=False)
    d = app_api.live_diagnose(tiny_llama, small_example(), config)
    table = d.tables["layer_effects"]
    assert serial == []
    assert len(read) == len(set(read))  # nothing read twice
    sel = d.tables["selections"]
    first = sel[sel["draw"].isna() | (sel["draw"] == 0)]  # a drawn selector's table is of its first draw
    cells = {tuple(p) for p in first["positions"]}  # `full` at both budgets: one cell
    assert len(cells) == 4 and len(read) == len(cells) + 1  # every distinct cell (the splice's is `none`'s), dense
    assert sorted(set(zip(table["selector"], table["budget"]))) == sorted(
        (s, b) for s in config.selectors for b in config.budgets)
