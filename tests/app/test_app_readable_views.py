"""What issue 45's last screens found (headless Chromium, 1440 and 1920 wide): the explorer's answers
and the multi-agent per-call table blank where a value is missing (never "None") with answers and
notes whole; a long context's strip opens on the segment holding the most picked rows and says
which it shows; a 200-example flip matrix shown a page of examples at a time, every one labelled."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from apptest import _env, charts, frame_with, ok, open_page, seen, texts, unescape, world  # noqa: F401 - fixtures
from workbench.app_api import Diagnosis, flip_matrix

RECORD = "study-ruler-mk512-smollm2"
MISSING = {"None", "nan", "NaN", "<NA>", "NaT"}


def shown_frame(at, *columns: str):
    """(the dataframe element whose columns include `columns`, its value)."""
    for element in at.dataframe:
        if all(c in element.value.columns for c in columns):
            return element, element.value
    raise AssertionError(f"no dataframe with columns {columns}")


def no_missing_words(table: pd.DataFrame) -> None:
    for column in table.columns:
        cells = table[column].tolist()
        assert not any(v is None or (not isinstance(v, str) and pd.isna(v)) for v in cells), column
        assert not MISSING & set(map(str, cells)), column


@pytest.mark.usefixtures("_env")
def test_the_answers_table_is_blank_where_a_cache_has_no_value_and_keeps_answers_whole(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("wide").run()
    at.multiselect(key="explorer_selectors").set_value(["cacheblend", "coin:bcr"]).run()
    ok(at)
    element, _ = shown_frame(at, "cache", "answer", "note")
    answers = seen(element)
    no_missing_words(answers)
    rows = answers.set_index("cache")
    assert rows.loc["dense", "rows recomputed"] == ""  # dense recomputes nothing: no count, not "None"
    assert rows.loc["spliced", "F1 to dense"] == "" and rows.loc["spliced", "rows recomputed"] == "0"
    assert rows.loc["repaired: coin:bcr", "note"].startswith("answer of draw")  # a note longer than one line
    config = json.loads(element.proto.columns)
    assert config["note"]["width"] >= 120 and config["answer"]["width"] >= 90  # narrow, wrapped: 1440 px fits them
    assert element.proto.row_height > 64  # Streamlit wraps a cell's text in rows taller than 64 px
    assert config["rows recomputed"]["label"] == "rows" and config["cache"]["pinned"] is True


def test_a_kept_records_answers_are_blank_where_missing(tmp_path, restore_record, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(tmp_path))
    restore_record(RECORD, tmp_path)
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value(RECORD).run()
    at.selectbox(key="explorer_example").set_value("3").run()
    ok(at)
    element, _ = shown_frame(at, "cache", "answer", "flip vs dense")
    answers = seen(element)
    no_missing_words(answers)
    assert answers.set_index("cache").loc["dense", "rows recomputed"] == ""


@pytest.mark.usefixtures("_env")
def test_a_long_strip_opens_on_the_segment_holding_most_picks_and_says_so(world):
    at = open_page("views/explorer.py", runs=world["long"])
    d = Diagnosis.load(world["long"] / "long")
    segment = dict(zip(d.tokens["position"].astype(int), d.tokens["segment"].astype(str)))

    def most(outline: str, budget: float) -> tuple[str, int, int]:
        picked = pd.Series([segment[p] for p in d.picks(outline, budget)])
        counts = picked.value_counts().reindex(list(dict.fromkeys(segment.values())), fill_value=0)
        return counts.idxmax(), int(counts.max()), len(picked)  # idxmax: the first of equals

    outline, budget = at.selectbox(key="explorer_outline").value, at.select_slider(key="explorer_budget").value
    name, held, total = most(outline, budget)
    assert held > 0 and at.selectbox(key="explorer_segment").value == name
    assert (f"The strip shows {name}: it holds {held} of the {total} rows {outline} recomputes at b = {budget:g}"
            in unescape(texts(at)))
    at.selectbox(key="explorer_segment").set_value("prefix").run()  # the user's own choice stays
    ok(at)
    assert at.selectbox(key="explorer_segment").value == "prefix" and "The strip shows prefix (chosen above)" in texts(at)
    other = next(b for b in at.select_slider(key="explorer_budget").options if float(b) != budget)
    at.select_slider(key="explorer_budget").set_value(float(other)).run()  # another budget opens on its own picks
    ok(at)
    assert at.selectbox(key="explorer_segment").value == most(outline, float(other))[0]
    late = max(p for p, s in segment.items() if s.startswith("passage") and s != most(outline, float(other))[0]
               and p in set(d.tokens.loc[d.tokens["reused"], "position"]))
    at.selectbox(key="explorer_token").set_value(late).run()  # a chosen token is shown where it is
    ok(at)
    assert at.selectbox(key="explorer_segment").value == segment[late]
    assert f"the chosen token (pos {late}) is there" in texts(at)


@pytest.fixture
def record_runs(tmp_path, restore_record, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(tmp_path))
    return restore_record(RECORD, tmp_path)


def matrix_chart(at) -> dict:
    return next(c for c in charts(at) if str(c["layout"]["title"]["text"]).startswith("Flips against dense"))


def test_a_200_example_flip_matrix_is_shown_a_labelled_page_at_a_time(record_runs):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value(RECORD).run()
    ok(at)
    budget = at.select_slider(key="flips_budget").value
    table = frame_with(at, "example_id", "cacheblend")  # the whole matrix, in the order shown
    assert len(table) == 200
    pages = at.radio(key="flips_page")
    assert pages.options == ["1–40", "41–80", "81–120", "121–160", "161–200"] and pages.value == 0
    first = matrix_chart(at)
    assert first["data"][0]["y"] == list(table["example_id"].astype(str)[:40])
    assert first["layout"]["yaxis"]["dtick"] == 1  # every example of the page labelled
    assert "xaxis2" in first["layout"]  # the selectors named above and below the page
    assert "examples 1–40 of 200" in first["layout"]["title"]["text"]
    pages.set_value(80).run()
    ok(at)
    assert matrix_chart(at)["data"][0]["y"] == list(table["example_id"].astype(str)[80:120])
    at.selectbox(key="flips_sort").set_value("disagreement").run()  # a new order opens on its first page
    ok(at)
    assert at.radio(key="flips_page").value == 0
    ordered = frame_with(at, "example_id", "cacheblend")
    assert matrix_chart(at)["data"][0]["y"] == list(ordered["example_id"].astype(str)[:40])
    outcomes = pd.read_parquet(record_runs / "outcomes.parquet")
    assert set(ordered["example_id"].astype(str)) == set(flip_matrix(outcomes, budget).index.astype(str))


@pytest.mark.usefixtures("_env")
def test_the_multi_agent_calls_table_is_blank_where_the_gate_never_judged(world):
    at = open_page("views/pipeline.py")
    at.selectbox(key="pipe_method").set_value("chat-template").run()
    ok(at)
    element, _ = shown_frame(at, "agent", "role", "reused", "max_entropy")
    calls = seen(element)
    no_missing_words(calls)
    saved = pd.read_parquet(world["runs"] / "pipe" / "calls.parquet")
    request = saved[(saved["method"] == "chat-template") & (saved["index"] == at.selectbox(key="pipe_request").value)]
    assert request["max_entropy"].isna().all() and set(calls["max_entropy"]) == {""}  # never judged: blank
    assert list(calls["output"]) == list(request["output"])
    assert json.loads(element.proto.columns)["output"]["width"] == "medium" and element.proto.row_height > 64  # wraps
