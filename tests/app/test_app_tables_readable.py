"""Issue 45's last tables (item 4, defect 4): every table the app shows that can hold a missing
value shows a blank there, never "None", under readable headers with formatted numbers: the
explorer's draws, outcomes and costs, Multi-agent's repair, tax and warm-up, Decision flips'
rescues and their overlap, the Runs page's runs table ("examples done" of a curve or fidelity
run), a sweep's summary and examples, and Unit of choice's measurements. The answers table fits
1440 px (every column sized in pixels), and the strip's colour-bar title keeps "layer N" whole."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from apptest import _env, charts, ok, open_page, world  # noqa: F401 - fixtures
from test_app_readable_views import no_missing_words, seen, shown_frame

pytestmark = pytest.mark.usefixtures("_env")


def labels(element) -> dict:
    """A shown table's column -> its header."""
    return {c: v.get("label") for c, v in json.loads(element.proto.columns).items()}


def readable(element, *raw: str) -> None:
    """Every column of `raw` is shown under a header of words, not its raw name."""
    named = labels(element)
    for column in raw:
        assert named.get(column) and named[column] != column and "_" not in named[column], (column, named.get(column))


def opened(page: str, key: str, run: str):
    """`page` with the run `run` chosen in its run box `key`."""
    at = open_page(page)
    at.selectbox(key=key).set_value(run).run()
    ok(at)
    return at


def blank_frame(at, *columns: str):
    """(the shown table whose columns include `columns`, its text as drawn), that text holding no missing word."""
    element, _ = shown_frame(at, *columns)
    drawn = seen(element)
    no_missing_words(drawn)
    return element, drawn


def test_the_explorers_outcomes_costs_and_draws_are_blank_where_missing_under_readable_headers(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("wide").run()
    at.multiselect(key="explorer_selectors").set_value(["cacheblend", "coin:bcr"]).run()
    ok(at)
    element, outcomes = blank_frame(at, "selector", "budget", "draw", "evidence_recall")
    saved = pd.read_parquet(world["runs"] / "wide" / "outcomes.parquet")
    assert saved["draw"].isna().any() and saved["evidence_recall"].isna().all()  # what the old table printed as None
    drawless = outcomes[outcomes["selector"] == "cacheblend"]
    assert set(drawless["draw"]) == {""} and set(outcomes["evidence_recall"]) == {""}
    readable(element, "n_recomputed", "f1_to_dense", "first_token_agree", "evidence_recall", "dense_logprob_mean")
    assert labels(element)["f1_to_dense"] == "F1 to dense" and labels(element)["n_recomputed"] == "rows recomputed"
    costs_element, costs = blank_frame(at, "selector", "forward_passes")
    readable(costs_element, "forward_passes", "backward_passes", "decode_steps")
    draws_element, draws = blank_frame(at, "selector", "draw", "answer", "f1_to_dense")
    readable(draws_element, "f1_to_dense", "first_token_agree", "em")
    assert sorted(draws_element.value["draw"]) == [0, 1, 2, 3, 4]  # numbers, shown as "0" ... "4"
    assert sorted(draws["draw"]) == ["0", "1", "2", "3", "4"]


def test_the_answers_table_fits_1440_px_with_every_score_whole(world):
    """At 1440 × 900 the page's main column is 980 px wide (1440 less the 300 px sidebar and the
    padding): the answers table's columns, sized in pixels, add up to no more; scores in three
    significant digits; each short header has the whole name over it."""
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("wide").run()
    at.multiselect(key="explorer_selectors").set_value(["cadence-grad", "bcr", "coin:bcr", "cacheblend"]).run()
    ok(at)
    element, answers = shown_frame(at, "cache", "answer", "note")
    config = json.loads(element.proto.columns)
    widths = {c: v.get("width") for c, v in config.items() if c != "_index"}  # the hidden index
    assert all(isinstance(w, int) for w in widths.values()), widths  # none left to "medium" or to its content
    assert sum(widths.values()) <= 980, widths
    assert {"retrieved", "ran on", "first token = dense's", "evidence recall"} <= set(widths)  # none hidden
    for column in ("first token = dense's", "evidence recall", "F1 to dense", "EM"):
        assert config[column].get("help"), column
    example, budget = at.selectbox(key="explorer_example").value, at.select_slider(key="explorer_budget").value
    saved = pd.read_parquet(world["runs"] / "wide" / "outcomes.parquet")
    draws = saved[(saved["selector"] == "coin:bcr") & (saved["example_id"] == example)
                  & ((saved["budget"] - budget).abs() < 1e-9)]
    assert len(draws) == 5 and answers.set_index("cache").loc["repaired: coin:bcr", "EM"] == pytest.approx(draws["em"].mean())


def test_the_strips_colour_bar_keeps_the_layer_and_its_number_on_one_line(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("wide").run()
    ok(at)
    strip = next(c for c in charts(at) if any(t.get("name") == "tokens" for t in c["data"]))
    title = strip["data"][0]["colorbar"]["title"]["text"]
    lines = title.split("<br>")
    assert any(line.startswith("layer") and line.split("\u00a0")[-1].isdigit() for line in lines), title


def test_multi_agent_repair_tax_and_warmup_are_blank_where_missing_under_readable_headers(world):
    at = opened("views/pipeline.py", "pipeline_run", "pipe-rep")
    element, repair = blank_frame(at, "selector", "budget", "ref_b", "em_low")
    coin = repair[repair["selector"] == "random"]
    assert len(coin) and set(coin["ref_b"]) == {""}  # the five-draw coin has no b / c: blank, not "None"
    readable(element, "em_low", "flip_rate", "ref_b", "ref_p_holm", "rows_per_example")
    at.selectbox(key="pipeline_run").set_value("pipe-all").run()
    ok(at)
    tax_element, tax = blank_frame(at, "chat_template", "tokenization")
    readable(tax_element, "chat_template", "token_matched", "calls_differ")
    assert json.loads(tax_element.proto.columns)["tokenization"]["help"] == "chat-template − token-matched"
    warm_element, warmup = blank_frame(at, "block", "acc_kvcomm")
    assert labels(warm_element)["acc_kvcomm"] == "kvcomm accuracy" and labels(warm_element)["block"] == "requests"


def test_decision_flips_rescues_and_overlap_read_as_counts_under_readable_headers(world):
    at = opened("views/flips.py", "flips_run", "wide")
    element, rescues = blank_frame(at, "selector", "rescued", "rescued_examples")
    readable(element, "rescued_examples", "broken_examples")
    assert labels(element)["rescued_examples"] == "examples rescued"
    overlap_element, overlap = shown_frame(at, "selector", "cacheblend", "coin:bcr")
    assert list(overlap.columns)[0] == "selector" and labels(overlap_element)["selector"] == "selector"
    assert len(overlap) == len(set(overlap["selector"])) > 2  # each selector a row, named in the table itself


def test_decision_flips_pins_a_medium_selector_column_and_shows_kl_in_three_figures(world):
    """The review read "cacheblend" cut off in the pinned column, and KL as 0.239243 and 4.68634e-08."""
    at = opened("views/flips.py", "flips_run", "wide")
    for columns in (("selector", "budget", "flips", "flip_rate"), ("selector", "budget", "first_kl")):
        element, _ = shown_frame(at, *columns)
        assert json.loads(element.proto.columns)["selector"]["width"] == "medium", columns
    element, drawn = blank_frame(at, "selector", "budget", "first_kl")
    values = element.value["first_kl"].astype(float)
    assert values.notna().any() and (values != 0).any()
    for value, text in zip(values, drawn["first_kl"]):
        want = "" if value != value else "0" if value == 0 else f"{value:.3g}" if abs(value) >= 0.001 else f"{value:.2e}"
        assert text == want, (value, text)


def test_the_reference_leaves_its_tests_against_itself_blank(world):
    """The review read b / c vs ref 0 / 0 on the reference's own rows: a test against itself."""
    for page, key, columns in (("views/runs.py", "runs_pick", ("selector", "budget", "ref_b", "ref_p_holm")),
                               ("views/curves.py", "curves_run", ("selector", "budget", "ref_b", "gap_recovered"))):
        at = opened(page, key, "tiny")
        _, drawn = blank_frame(at, *columns)
        own, other = drawn[drawn["selector"] == "cacheblend"], drawn[drawn["selector"] == "densedev"]  # cacheblend: the reference
        assert len(own) == len(other) == 2, page
        assert set(own["ref_b"]) == set(own["ref_c"]) == {""}, page
        assert "" not in set(other["ref_b"]) | set(other["ref_c"]), page


def test_the_runs_table_leaves_a_curves_examples_done_blank(world):
    at = open_page("views/runs.py")
    element, table = blank_frame(at, "run", "examples done", "of")
    rows = table.set_index("run")
    assert rows.loc["curve", "examples done"] == rows.loc["fid", "examples done"] == ""  # defect 4: was "None"
    assert rows.loc["tiny", "examples done"] == "3"
    at.selectbox(key="runs_pick").set_value("wide").run()
    ok(at)
    summary_element, summary = blank_frame(at, "selector", "budget", "ref_b", "ref_p_holm")
    assert set(summary.loc[summary["selector"] == "coin:bcr", "ref_b"]) == {""}
    readable(summary_element, "em_low", "gap_recovered", "ref_p_holm", "rows_per_example")
    examples_element, examples = blank_frame(at, "example_id", "dense_answer", "n_evidence")
    readable(examples_element, "example_id", "dense_answer", "n_reused")


def test_unit_of_choice_measurements_leave_an_informed_rows_seed_blank_and_a_seed_whole(world):
    at = opened("views/unit_curve.py", "unit_run", "curve")
    element, measured = blank_frame(at, "method", "seed", "error")
    assert set(measured.loc[measured["method"] == "informed", "seed"]) == {""}
    saved = pd.read_parquet(world["runs"] / "curve" / "curve.parquet")
    assert list(measured["seed"]) == [str(s) if pd.notna(s) else "" for s in saved["seed"]]  # every digit of a seed
    readable(element, "seed_index", "n_rows_restored", "budget_share")
    summary_element, _ = shown_frame(at, "unit", "informed_error", "random_error")
    readable(summary_element, "informed_error", "random_error", "n_prompts")


def test_fidelity_and_multi_agent_method_tables_name_their_columns_in_words(world):
    at = opened("views/fidelity.py", "fidelity_run", "fid")
    element, _ = blank_frame(at, "condition", "key_cos", "transfer")
    readable(element, "key_cos", "value_cos", "target_cos")
    assert labels(element)["key_cos"] == "key cosine"
    at = opened("views/pipeline.py", "pipeline_run", "pipe")
    element, _ = blank_frame(at, "method", "reuse", "acc", "line_pred")
    readable(element, "acc", "p_anchor", "line_pred", "line_resid")


def scores_table(app_dir: str) -> None:
    """A page showing one table: scores and counts with a missing value, p-values, a tick, a seed."""
    import sys

    import pandas as pd

    sys.path.insert(0, app_dir)
    from readable import count, p_value, show_table

    show_table(pd.DataFrame({"name": list("abcde"), "score": [10.0, 9.0, None, 0.5, 0.05],
                             "n": [10, 9, None, 2, 100], "p": [8.1e-28, 0.5, None, 0.012, 1e-5],
                             "ok": [True, False, True, True, False],
                             "seed": pd.Series([2 ** 62 + 1, None, 5, 6, 7], dtype=object)}),
               formats={"p": p_value, "seed": count})


def test_a_column_of_numbers_with_a_missing_value_stays_numbers_and_draws_blank_there():
    """A header click sorts a number column as numbers (9 before 10, 0.05 before 0.5) only if it
    reaches the browser as numbers: the old table turned a column holding a missing value into
    text ("10" < "9")."""
    from streamlit.testing.v1 import AppTest

    from apptest import ROOT, seen

    at = AppTest.from_function(scores_table, args=(str(ROOT / "app"),), default_timeout=60).run()
    assert not at.exception, at.exception
    element = at.dataframe[0]
    value, drawn = element.value, seen(element)
    assert {c: value[c].dtype.kind for c in ("score", "n", "p")} == {"score": "f", "n": "f", "p": "f"}
    assert list(value.sort_values("score", na_position="first")["name"]) == ["c", "e", "d", "b", "a"]
    assert list(drawn["score"]) == ["10.000", "9.000", "", "0.500", "0.050"]  # blank, formatted as before
    assert list(drawn["n"]) == ["10", "9", "", "2", "100"] and list(drawn["p"]) == ["8.1e-28", "0.5", "", "0.012", "1e-05"]
    config = json.loads(element.proto.columns)
    assert {c: config[c].get("type_config", {}).get("type") for c in ("score", "n", "p", "ok")} == {
        "score": "number", "n": "number", "p": "number", "ok": None}  # NumberColumn; the tick stays a checkbox
    assert "format" not in json.dumps(config["score"])  # the Styler's text is drawn: a column format would override it
    assert value["ok"].dtype.kind == "b"
    assert list(drawn["seed"]) == [str(2 ** 62 + 1), "", "5", "6", "7"]  # past 2**53: text, every digit


def test_the_runs_tables_counts_stay_numbers_with_a_curves_blank(world):
    at = open_page("views/runs.py")
    element, drawn = blank_frame(at, "run", "examples done", "of")
    value = element.value.set_index("run")
    assert value["examples done"].dtype.kind in "fi" and value["of"].dtype.kind in "fi"  # sortable as numbers
    assert pd.isna(value.loc["curve", "examples done"]) and value.loc["tiny", "examples done"] == 3
    assert drawn.set_index("run").loc["curve", "examples done"] == ""
