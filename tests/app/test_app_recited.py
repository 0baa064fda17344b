"""The explorer's answers table quotes what an answer recites of the passages outside the gold evidence
(`experiments.answer_sources`), on conftest's `recited_run`: one example whose splice and repairs are
scripted to answer " grass is green" (the filler beside its needle); dense's own answer is the tiny
model's and recites nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from apptest import ok, open_page, seen
from conftest import RECITED_LINE as LINE, RECITED_SAID as SAID
from test_app_readable_views import shown_frame
from workbench.tasks import Example


def test_the_answers_table_quotes_what_an_answer_recites(recited_run, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(recited_run.parent))
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value(recited_run.name).run()
    at.multiselect(key="explorer_selectors").set_value(["cacheblend"]).run()
    ok(at)
    rows = seen(shown_frame(at, "cache", "answer", "note")[0]).set_index("cache")
    assert rows.loc["spliced", "answer"] == SAID.strip()
    for cache in ("spliced", "repaired: cacheblend"):
        assert rows.loc[cache, "note"] == 'recites the passages: "grass is green"'
    assert "recites" not in rows.loc["dense", "note"]


def test_each_draw_of_a_coin_quotes_what_it_recites(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "app"))
    from answer_tables import draws_table

    example = Example(id="r", passages=LINE["passages"], question=LINE["question"], gold=LINE["answers"],
                      meta={"evidence": LINE["evidence"]})
    outcomes = pd.DataFrame({"selector": ["coin:bcr"] * 2, "budget": 0.2, "draw": [0, 1], "n_recomputed": 8,
                             "answer": ["4417, the sky is blue, here we go", "4417"], "flip": True, "em": 0.0,
                             "f1": 0.0})
    table = draws_table(SimpleNamespace(outcomes=outcomes, example=example), ["coin:bcr"], 0.2)
    assert list(table["note"]) == ['recites the passages: "the sky is blue here we go"', ""]
