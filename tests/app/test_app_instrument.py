"""The app as an instrument, part two (AppTest): a token clicked in the strip is marked in every
figure and its signals listed; a Runs row or a flip-matrix cell opens its example; two selectors,
or two runs, on one example; the answer's tokens under each cell; Live from the explorer; the
status area. The run folders come from conftest.py."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from apptest import _env, world  # noqa: F401 - fixtures
from apptest import HOME, TIMEOUT, chart_with, chosen_marks, charts, frame_with, ok, open_page, select, texts, unescape

pytestmark = pytest.mark.usefixtures("_env")


def explorer(**query) -> AppTest:
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update(query)
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    return at


def test_a_token_clicked_in_the_strip_is_marked_everywhere_and_its_signals_listed(world):
    at = explorer(run="wide", example="q1", budget="0.2", selectors="cadence-grad,cacheblend")
    strip, spec = chart_with(at, "tokens")
    assert not chosen_marks(spec)
    cells = next(t for t in spec["data"] if t.get("name") == "tokens")
    reused = at.selectbox(key="explorer_token").options[1:]  # "pos P: 'token'"
    position = int(reused[3].split(":")[0].split()[1])
    point = [c[0] for c in cells["customdata"]].index(position)
    select(at, strip, {"points": [{"customdata": [position], "point_index": point, "curve_number": 1}],
                       "point_indices": [point], "box": [], "lasso": []})
    assert at.selectbox(key="explorer_token").value == position and at.query_params["token"] == str(position)
    marked = [c for c in charts(at) if chosen_marks(c)]
    titles = " | ".join(str(c["layout"].get("title", {}).get("text", "")) for c in marked)
    assert len(marked) >= 4, titles  # the strip, the picks matrix, the deviation and the layer-signal heatmap
    assert "rows each selector recomputes" in titles and "splice vs dense" in titles
    card = frame_with(at, "signal", "value")
    assert len(card) >= 3 and "cadence" in " ".join(card["signal"]).lower()
    assert f"Token at position {position}" in unescape(texts(at))
    hover = " ".join(cells["text"])
    assert "picked by:" in hover  # every token's hover lists its signals and its pickers


def test_a_runs_row_opens_its_example_in_the_explorer(world):
    at = open_page("views/runs.py")
    at.selectbox(key="runs_pick").set_value("wide").run()
    ok(at)
    table = next(d for d in at.dataframe if d.proto.id and "example_id" in d.value.columns)
    wanted = str(table.value["example_id"].iloc[2])
    select(at, table, {"rows": [2], "columns": [], "cells": []})
    assert at.selectbox(key="explorer_run").value == "wide" and at.selectbox(key="explorer_example").value == wanted


def test_a_flip_matrix_cell_opens_its_example(world):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value("wide").run()
    matrix, spec = chart_with(at, "cells")
    cells = next(t for t in spec["data"] if t.get("name") == "cells")
    example, selector = cells["customdata"][4]
    select(at, matrix, {"points": [{"customdata": [example, selector], "point_index": 4}], "point_indices": [4],
                        "box": [], "lasso": []})
    assert at.selectbox(key="explorer_example").value == example
    assert at.multiselect(key="explorer_selectors").value == [selector]


def test_two_selectors_side_by_side_on_one_example(world):
    at = explorer(run="wide", example="q1", budget="0.2", selectors="cadence-grad,cacheblend", a="cadence-grad",
                  b="cacheblend")
    assert at.selectbox(key="explorer_vs_a").value == "cadence-grad"  # from the link
    at.selectbox(key="explorer_vs_b").set_value("bcr").run()
    assert at.query_params["b"] == "bcr"
    at.selectbox(key="explorer_vs_b").set_value("cacheblend").run()
    ok(at)
    split = next(c for c in charts(at) if "rows cadence-grad and cacheblend recompute" in str(c["layout"]["title"]))
    assert [y.split(" (")[0] for y in split["data"][0]["y"]] == ["only cadence-grad", "both", "only cacheblend"]
    table = frame_with(at, "position", "picked")
    assert set(table["picked"]) <= {"only cadence-grad", "both", "only cacheblend"} and len(table)
    sides = frame_with(at, "measure", "repaired: cadence-grad", "repaired: cacheblend").set_index("measure")
    assert {"answer", "flip vs dense", "F1 to dense", "first token = dense's"} <= set(sides.index)
    residual = next(c for c in charts(at) if str(c["layout"]["title"].get("text", "")).startswith("deviation of the")
                    and {t["name"] for t in c["data"]} >= {"cadence-grad", "cacheblend"})
    assert residual


def test_one_example_in_two_runs_side_by_side(world):
    at = explorer(run="one", example="t0")
    others = at.selectbox(key="explorer_other_run").options
    assert "gemma" in others and "one" not in others  # the runs that hold t0: another model's
    at.selectbox(key="explorer_other_run").set_value("gemma").run()
    ok(at)
    said = unescape(texts(at))
    assert "**one**" in said and "**gemma**" in said
    answers = [d.value for d in at.dataframe if "cache" in d.value.columns and "answer" in d.value.columns]
    assert len(answers) >= 3  # the panel's own, then one per run


def test_the_dense_answer_token_by_token_under_each_cell(world):
    at = explorer(run="wide", example="q1", budget="0.2", selectors="cadence-grad,cacheblend")
    fig = next(c for c in charts(at) if "probability of each token of the dense answer" in str(c["layout"]["title"]))
    assert fig["data"][0]["y"] == ["dense", "spliced", "cadence-grad", "cacheblend"]
    assert len(fig["layout"]["xaxis"]["ticktext"]) >= 1


def test_open_in_live_fills_the_fields_with_the_example(world):
    from workbench.diagnosis import Diagnosis
    from workbench.runstore import load_sweep

    d = Diagnosis.load(load_sweep(world["runs"] / "tiny").diagnosis_folder("q2"))
    at = explorer(run="tiny", example="q2")
    at.button(key="explorer_to_live").click().run()
    ok(at)
    assert at.text_area(key="live_passages").value == "\n\n".join(d.example.passages)
    assert at.text_input(key="live_question").value == d.example.question
    assert at.multiselect(key="live_selectors").value == list(d.config.selectors)
    assert at.text_input(key="live_budgets").value == ", ".join(f"{b:g}" for b in d.config.budgets)
    assert at.checkbox(key="live_whole").value is False  # the record's answer rule: its first lines
    assert "example q2 from the explorer is in the fields" in unescape(texts(at))


def sidebar_text(at: AppTest) -> str:
    shown = (e.value for kind in ("caption", "error", "markdown") for e in getattr(at.sidebar, kind))
    return unescape(" ".join(str(v) for v in shown))


def test_the_status_area_shows_pending_work_and_keeps_errors_until_dismissed(tmp_path):
    import sys

    at = open_page("views/live.py", runs=tmp_path)
    jobs, state = sys.modules["jobs"], sys.modules["state"]
    gate, holder = state.model_gate(), jobs.Job("the test's hold on the model")
    gate.acquire(holder)
    try:
        at.run()
        assert "running: the test's hold on the model" in sidebar_text(at)
    finally:
        gate.release(holder)
    at.run()
    assert "Status" not in sidebar_text(at)  # nothing pending, no error: no status area
    at.text_input(key="model_spec").set_value(str(tmp_path / "no-such-model")).run()
    at.button(key="live_run").click().run()
    assert not at.exception
    assert "Could not load or use the model" in sidebar_text(at)
    at.switch_page("views/runs.py").run()  # another page: the error stays
    assert not at.exception and "Could not load or use the model" in sidebar_text(at)
    at.sidebar.button(key="status_dismiss_1").click().run()
    assert "Could not load or use the model" not in sidebar_text(at)


def test_a_diagnosis_with_layer_effects_shows_where_the_repair_recovers_the_answer(world, tmp_path):
    from conftest import small_example, tiny_model
    from workbench.diagnosis import DiagnoseConfig, diagnose
    from workbench.models import model_identity
    from workbench.runstore.writers import write_diagnosis_run

    model = tiny_model("llama")
    config = DiagnoseConfig(selectors=("none", "full", "cacheblend"), budgets=(0.3,), attribution=False,
                            max_new_tokens=2)
    d = diagnose(model, small_example(), config, progress=False, layer_effects=True)
    write_diagnosis_run(tmp_path / "runs" / "layers", d, model_identity(model))
    at = open_page("views/explorer.py", runs=tmp_path / "runs")
    assert "Where the repair recovers the answer, layer by layer" in [h.value for h in at.subheader]
    figure = next(c for c in charts(at) if "recovers the answer" in str(c["layout"].get("title", {}).get("text", "")))
    names = {t.get("name") for t in figure["data"]}
    assert {"splice", "repaired", "dense"} <= names
    [repair_of] = [b for b in at.selectbox if b.label == "Repair of"]
    assert "cacheblend" in repair_of.options
