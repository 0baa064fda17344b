"""The Streamlit app, page by page, with Streamlit's AppTest against small runs made here.

One module-scoped set of run folders is built with a tiny random Llama (saved to a folder so
the app loads it by path through $KVWB_MODEL): a sweep (3 examples, 6 selectors, 2 budgets),
a unit-of-choice curve and a fidelity run. Each test checks that the page raises nothing,
that its widgets exist, and that what it shows equals the run's parquet tables.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import tiny_model
from workbench.experiments.sweep import SweepConfig, example_folder, run_sweep

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "app" / "Home.py"
SELECTORS = ("none", "full", "random", "cacheblend", "densedev", "bcr:single")
BUDGETS = (0.2, 0.5)
TIMEOUT = 120


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Folders: model/ (the tiny model), runs/ (tiny sweep, curve, fidelity), bad/ (broken runs), empty/."""
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("app")
    model = tiny_model("llama")
    model_dir = base / "model"
    model.hf.save_pretrained(model_dir)
    model.tokenizer.save_pretrained(model_dir)
    runs = base / "runs"
    run_sweep(model, SweepConfig(dataset=f"jsonl:{ROOT / 'tests/fixtures/sample.jsonl'}", n=3, selectors=SELECTORS,
                                 budgets=BUDGETS, options={"max_new_tokens": 4}), runs / "tiny", progress=False)
    from workbench.experiments.unit_curve import run_curve

    run_curve(model, runs / "curve", tokens=96, prompts=2, units=(1, 8, 32), budget=0.25, seeds=2, progress=False)
    try:
        from workbench.experiments.fidelity import run_fidelity
    except ImportError:
        pass
    else:
        run_fidelity(model, runs / "fid", n=3, cosines=(0.99, 0.9), alphas=(0, 0.5, 1), bank_ranks=(1, 2),
                     bank_alphas=(0.5, 1), bank_size=3, pool_sizes=(1, 2), proj_cos=(0.95,), max_new_tokens=3,
                     progress=False)
    bad = base / "bad"
    (bad / "broken").mkdir(parents=True)
    manifest = json.loads((runs / "tiny" / "manifest.json").read_text())
    (bad / "broken" / "manifest.json").write_text(json.dumps(manifest))
    shutil.copytree(runs / "tiny", bad / "old")
    old = pd.read_parquet(bad / "old" / "outcomes.parquet").drop(columns=["flip_strict"])
    old.to_parquet(bad / "old" / "outcomes.parquet", index=False)
    shutil.copytree(runs / "tiny", runs / "tiny-copy")
    (base / "empty").mkdir()
    return {"base": base, "model": model_dir, "runs": runs, "bad": bad, "empty": base / "empty"}


@pytest.fixture(autouse=True)
def _env(world, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(world["runs"]))
    monkeypatch.setenv("KVWB_MODEL", str(world["model"]))
    monkeypatch.delenv("KVWB_LIVE_MAX_TOKENS", raising=False)


def open_page(page: str, runs: Path | None = None) -> AppTest:
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    if runs is not None:
        at.session_state["runs_dir"] = str(runs)
    at.run()
    at.switch_page(page)
    at.run()
    ok(at)
    return at


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def frame_with(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first dataframe shown whose columns include `columns`."""
    for element in at.dataframe:
        value = element.value
        if all(c in value.columns for c in columns):
            return value
    raise AssertionError(f"no dataframe with columns {columns}; have {[list(d.value.columns) for d in at.dataframe]}")


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def array(value) -> list:
    """A plotly array from a figure's JSON: a list, or plotly's typed-array encoding {dtype, bdata, shape}."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np

        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        if "shape" in value:
            out = out.reshape([int(n) for n in str(value["shape"]).split(",")])
        return out.tolist()
    return list(value)


def texts(at: AppTest) -> str:
    parts = [e.value for kind in ("warning", "info", "error", "success", "markdown", "caption")
             for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def selections(world, example_id: str) -> pd.DataFrame:
    return pd.read_parquet(example_folder(world["runs"] / "tiny", example_id) / "selections.parquet")


def positions_of(table: pd.DataFrame, selector: str) -> set[int]:
    return set(table.loc[table[selector], "position"].astype(int))


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
    table = frame_with(at, "run", "kind", "status", "examples done")
    row = table.set_index("run").loc["tiny"]
    assert row["kind"] == "sweep" and row["status"] == "complete" and row["examples done"] == 3
    assert set(table["run"]) >= {"tiny", "tiny-copy", "curve"}
    at.selectbox(key="runs_pick").set_value("tiny").run()
    ok(at)
    summary = frame_with(at, "selector", "budget", "em", "ref_b", "ref_c")
    outcomes = pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet")
    for r in summary.itertuples():
        cell = outcomes[(outcomes["selector"] == r.selector) & ((outcomes["budget"] - r.budget).abs() < 1e-9)]
        assert r.em == pytest.approx(cell["em"].mean())
    examples = frame_with(at, "example_id", "dense_answer", "spliced_answer")
    stored = pd.read_parquet(world["runs"] / "tiny" / "examples.parquet")
    assert list(examples["example_id"]) == list(stored["example_id"])
    assert list(examples["dense_answer"]) == list(stored["dense_answer"])


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
    assert at.multiselect(key="explorer_selectors").value
    assert at.select_slider(key="explorer_budget").value == pytest.approx(0.2)
    assert len(at.get("plotly_chart")) >= 4  # strip, picks, two heatmaps, residual
    example_id = at.selectbox(key="explorer_example").value
    stored = selections(world, example_id)

    def shown_picks():
        table = frame_with(at, "position", "segment", "token", "n_selectors")
        return {s: positions_of(table, s) for s in at.multiselect(key="explorer_selectors").value}

    low = shown_picks()
    for selector, picked in low.items():
        row = stored[(stored["selector"] == selector) & ((stored["budget"] - 0.2).abs() < 1e-9)].iloc[0]
        assert picked == set(int(p) for p in row["positions"])
    outline = at.selectbox(key="explorer_outline").value
    strip = charts(at)[0]
    marked = [t for t in strip["data"] if t.get("name") == "recomputed"]
    assert marked and len(array(marked[0]["x"])) == len(low[outline])

    at.select_slider(key="explorer_budget").set_value(0.5).run()
    ok(at)
    high = shown_picks()
    assert high != low
    for selector, picked in high.items():
        row = stored[(stored["selector"] == selector) & ((stored["budget"] - 0.5).abs() < 1e-9)].iloc[0]
        assert picked == set(int(p) for p in row["positions"])
    strip = charts(at)[0]
    marked = [t for t in strip["data"] if t.get("name") == "recomputed"]
    assert len(array(marked[0]["x"])) == len(high[outline]) != len(low[outline])

    answers = frame_with(at, "cache", "answer", "flip vs dense")
    outcomes = pd.read_parquet(example_folder(world["runs"] / "tiny", example_id) / "outcomes.parquet")
    for selector in high:
        shown = answers.set_index("cache").loc[f"repaired: {selector}"]
        stored_row = outcomes[(outcomes["selector"] == selector) & ((outcomes["budget"] - 0.5).abs() < 1e-9)].iloc[0]
        assert shown["answer"] == stored_row["answer"]
        assert shown["flip vs dense"] == ("FLIP" if stored_row["flip"] else "same")


def test_explorer_signals_examples_and_exports(world):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("tiny").run()
    assert at.selectbox(key="explorer_signal").value == "deviation"
    assert at.select_slider(key="explorer_layer").value == 2  # deviation: a layer slider, the last layer first
    at.select_slider(key="explorer_layer").set_value(1).run()
    at.radio(key="explorer_kind").set_value("k").run()
    ok(at)
    at.selectbox(key="explorer_signal").set_value("draft_attention").run()
    ok(at)
    strip = charts(at)[0]
    values = [v for row in array(strip["data"][0]["z"]) for v in row if v is not None and v == v]
    diagnosis_signals = pd.read_parquet(example_folder(world["runs"] / "tiny", "q1") / "token_signals.parquet")
    expected = diagnosis_signals[diagnosis_signals["signal"] == "draft_attention"]["value"]
    assert sorted(values) == pytest.approx(sorted(expected))
    at.selectbox(key="explorer_example").set_value("q2").run()
    ok(at)
    assert any("Dorket Press" in str(t.value) for t in at.text)
    # figures carry plotly's own colours (not Streamlit's placeholder template), so exports look right
    for chart in at.get("plotly_chart"):
        spec = chart.proto.spec
        assert "#000004" not in spec and "#000001" not in spec
    assert "#636efa" in at.get("plotly_chart")[-1].proto.spec  # the residual lines: plotly's colorway
    labels = {b.label for b in at.get("download_button")}
    assert {"Figure as HTML", "Picks as CSV", "Report (JSON)"} <= labels
    assert "PNG export needs kaleido" in texts(at) or "Figure as PNG" in labels


def test_explorer_deep_link(world):
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update({"run": "tiny-copy", "example": "q2", "budget": "0.5"})
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    assert at.selectbox(key="explorer_run").value == "tiny-copy"
    assert at.selectbox(key="explorer_example").value == "q2"
    assert at.select_slider(key="explorer_budget").value == pytest.approx(0.5)


def test_budget_curves_numbers_come_from_the_run(world):
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value("tiny").run()
    ok(at)
    assert len(at.get("plotly_chart")) == 3
    assert at.selectbox(key="curves_reference").value == "cacheblend"
    summary = frame_with(at, "selector", "budget", "em", "flip_rate", "ref_b", "ref_c", "ref_p_holm")
    outcomes = pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet")
    assert len(summary) == len(SELECTORS) * len(BUDGETS)
    for r in summary.itertuples():
        cell = outcomes[(outcomes["selector"] == r.selector) & ((outcomes["budget"] - r.budget).abs() < 1e-9)]
        assert r.em == pytest.approx(cell["em"].mean())
        assert r.flip_rate == pytest.approx(cell["flip"].mean())
        assert r.n == len(cell)
    accuracy = charts(at)[0]
    line = next(t for t in accuracy["data"] if t.get("name") == "densedev")
    stored = outcomes[outcomes["selector"] == "densedev"].groupby("budget")["em"].mean()
    assert array(line["y"]) == pytest.approx(list(stored.sort_index()))
    at.selectbox(key="curves_reference").set_value("random").run()
    ok(at)
    at.slider(key="curves_share").set_value(0.5).run()
    ok(at)


def test_decision_flips_matrix_is_the_runs(world):
    at = open_page("views/flips.py")
    at.selectbox(key="flips_run").set_value("tiny").run()
    ok(at)
    outcomes = pd.read_parquet(world["runs"] / "tiny" / "outcomes.parquet")
    for budget in BUDGETS:
        at.select_slider(key="flips_budget").set_value(budget).run()
        ok(at)
        shown = frame_with(at, "example_id", "cacheblend", "densedev").set_index("example_id")
        cells = outcomes[(outcomes["budget"] - budget).abs() < 1e-9]
        for r in cells.itertuples():
            assert shown.loc[r.example_id, r.selector] == int(r.flip)
        rescues = frame_with(at, "selector", "rescued", "broken")
        assert set(rescues["selector"]) == set(SELECTORS)
    at.toggle(key="flips_strict").set_value(True).run()
    ok(at)
    shown = frame_with(at, "example_id", "cacheblend").set_index("example_id")
    cells = outcomes[(outcomes["budget"] - BUDGETS[-1]).abs() < 1e-9]
    for r in cells.itertuples():
        assert shown.loc[r.example_id, r.selector] == int(r.flip_strict)
    at.selectbox(key="flips_baseline").set_value("random").run()
    ok(at)


def test_unit_of_choice_page(world):
    at = open_page("views/unit_curve.py")
    ok(at)
    assert at.selectbox(key="unit_run").value == "curve"
    assert len(at.get("plotly_chart")) == 1
    summary = frame_with(at, "unit", "informed_error", "random_error")
    stored = pd.read_parquet(world["runs"] / "curve" / "summary.parquet")
    assert list(summary["unit"]) == list(stored["unit"])
    assert list(summary["informed_error"]) == pytest.approx(list(stored["informed_error"]))


def test_fidelity_page(world):
    at = open_page("views/fidelity.py")
    if not (world["runs"] / "fid").is_dir():
        assert "no fidelity probe" in texts(at)
        return
    assert at.selectbox(key="fidelity_run").value == "fid"
    assert len(at.get("plotly_chart")) >= 1
    conditions = frame_with(at, "condition", "transfer", "key_cos")
    stored = pd.read_parquet(world["runs"] / "fid" / "conditions.parquet")
    assert list(conditions["transfer"]) == pytest.approx(list(stored["transfer"]))
    at.radio(key="fidelity_x").set_value("value_cos").run()
    ok(at)


def test_live_diagnoses_explores_and_saves(world, tmp_path):
    at = open_page("views/live.py", runs=tmp_path)
    assert at.text_area(key="live_passages").value.strip()
    assert at.text_input(key="live_question").value.strip()
    assert at.multiselect(key="live_selectors").value
    at.text_input(key="live_budgets").set_value("0.2, 0.5")
    at.multiselect(key="live_selectors").set_value(["none", "random", "densedev", "bcr"])
    at.number_input(key="live_max_new").set_value(3)
    at.button(key="live_run").click().run()
    ok(at)
    assert not at.warning, [w.value for w in at.warning]
    assert len(at.get("plotly_chart")) >= 4
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
    assert (saved / "manifest.json").is_file() and (saved / "outcomes.parquet").is_file()
    from workbench.experiments.summary import load_run

    run = load_run(saved)
    assert set(run.outcomes["selector"]) == {"none", "random", "densedev", "bcr"}
    assert positions_of(high, "densedev") == set(json.loads(json.dumps(
        pd.read_parquet(next(saved.glob("diagnoses/*")) / "selections.parquet")
        .query("selector == 'densedev' and budget == 0.5")["positions"].iloc[0].tolist())))
    # the saved run opens in the explorer
    ex = open_page("views/explorer.py", runs=tmp_path)
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


def test_live_limit_of_the_page(world, monkeypatch):
    monkeypatch.setenv("KVWB_LIVE_MAX_TOKENS", "100")
    at = open_page("views/live.py")
    at.button(key="live_run").click().run()
    ok(at)
    assert any("too long for Live" in w.value and "100" in w.value for w in at.warning)


def test_live_bad_budgets_say_so(world):
    at = open_page("views/live.py")
    at.text_input(key="live_budgets").set_value("0.1, lots")
    at.button(key="live_run").click().run()
    ok(at)
    assert any("Budgets must be numbers" in w.value for w in at.warning)


# ----------------------------------------------------------------------------- bad input, no data

def test_incomplete_run_names_what_is_missing(world):
    at = open_page("views/runs.py", runs=world["bad"])
    table = frame_with(at, "run", "problems").set_index("run")
    assert "examples.parquet" in table.loc["broken", "problems"]
    assert "flip_strict" in table.loc["old", "problems"]
    at.selectbox(key="runs_pick").set_value("broken").run()
    ok(at)
    assert any("missing examples.parquet, outcomes.parquet, diagnoses" in w.value for w in at.warning)
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
    for page in ("views/explorer.py", "views/curves.py", "views/flips.py", "views/unit_curve.py", "views/fidelity.py"):
        at = open_page(page, runs=world["empty"])
        info = " ".join([i.value for i in at.info] + [w.value for w in at.warning])
        assert "kvwb" in info, (page, info)
    at = open_page("views/runs.py", runs=world["empty"] / "nowhere")
    assert "kvwb run --out runs/NAME" in " ".join(i.value for i in at.info)
    assert at.button(key="demo_start")


def test_demo_run_computes_in_the_background(world, tmp_path):
    at = open_page("views/runs.py", runs=tmp_path)
    at.button(key="demo_start").click().run()
    ok(at)
    common = sys.modules["common"]
    job = common.demo_job()
    assert job.out == tmp_path / "demo"
    assert at.get("progress") or at.success, "no progress shown"
    job.thread.join(timeout=300)
    assert not job.running and job.error is None, job.error
    at.run()
    ok(at)
    assert any("Demo run finished" in s.value for s in at.success)
    table = frame_with(at, "run", "examples done").set_index("run")
    assert table.loc["demo", "examples done"] == common.DEMO_CONFIG.n
