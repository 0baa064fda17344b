"""An answer of no token (an end of turn first) is an empty string: the explorer's answers table says
it ended at once, so that the empty cell does not read as a value missing (the splice of ten HotpotQA
paragraphs answers so in most examples, RESULTS 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apptest import ok, open_page, seen
from conftest import ended_at_once
from test_app_readable_views import shown_frame
from workbench.app_api import ENDED_AT_ONCE
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    """One synthetic example whose splice and repairs end their turn at once (dense's answer untouched)."""
    root = tmp_path_factory.mktemp("ended") / "runs"
    config = SweepConfig(dataset="synthetic", n=1, diagnose=DiagnoseConfig(
        selectors=("none", "full", "cacheblend"), budgets=(0.2,), max_new_tokens=3, attribution=False))
    run_sweep(tiny_llama, config, root / "ended", progress=False, hooks=ended_at_once(tiny_llama))
    return root


def test_the_answers_table_says_an_empty_answer_ended_at_once(runs, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("ended").run()
    at.multiselect(key="explorer_selectors").set_value(["cacheblend"]).run()
    ok(at)
    rows = seen(shown_frame(at, "cache", "answer", "note")[0]).set_index("cache")
    assert rows.loc["spliced", "answer"] == "" and rows.loc["spliced", "note"] == ENDED_AT_ONCE
    assert rows.loc["repaired: cacheblend", "note"] == ENDED_AT_ONCE
    assert rows.loc["dense", "answer"] != "" and rows.loc["dense", "note"] == ""  # dense answered: no note


def test_each_draw_of_a_coin_says_when_its_answer_ended_at_once(monkeypatch):
    """The per-draw table (`answer_tables.draws_table`) notes a draw whose answer has no token."""
    from types import SimpleNamespace

    import pandas as pd

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "app"))
    from answer_tables import draws_table

    outcomes = pd.DataFrame({"selector": ["coin:bcr"] * 3 + ["bcr"], "budget": 0.2, "draw": [0, 1, 2, None],
                             "n_recomputed": 8, "answer": ["", "x", "", ""], "answer_tokens": [0, 1, None, 0],
                             "flip": True, "em": 0.0, "f1": 0.0})
    table = draws_table(SimpleNamespace(outcomes=outcomes), ["coin:bcr", "bcr"], 0.2)
    assert list(table["selector"]) == ["coin:bcr"] * 3  # bcr is not drawn
    assert list(table["note"]) == [ENDED_AT_ONCE, "", ""]  # a missing count says nothing
