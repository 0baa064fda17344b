"""Per-example reports: standalone HTML (escaped, offline), the JSON schema, writing files and
folders through the run store, reports of runs (odd example ids included), markdown tables."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import plotly.graph_objects as go
import pytest
from conftest import ended_at_once, small_example, tiny_model
from plotly.offline import get_plotlyjs

import workbench.atomic
from workbench import report, runstore
from workbench.diagnosis import DiagnoseConfig, Diagnosis, diagnose
from workbench.errors import WorkbenchError
from workbench.experiments.summary import summarize, tokens_to_target
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.models import model_identity
from workbench.plots import diagnosis as plots_diagnosis
from workbench.plots.embed import figure_div, figure_json
from workbench.report import runs as report_runs
from workbench.report.page import e
from workbench.tasks import Example

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"
ALLOWED_TAGS = re.compile(r"</?(br|extra|b|i)>")
ODD_IDS = [".", "..", "/", "a/b", "index", "Manifest", "長い質問の識別子" * 40]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def diagnosis(model) -> Diagnosis:
    base = small_example()
    example = Example(f'x{IMG}1', (f"{base.passages[0]} {SCRIPT}", IMG + base.passages[1], base.passages[2]),
                      base.question, ("Tressamor", SCRIPT))
    return diagnose(model, example, selectors=("none", "full", "random", "cacheblend", "cadence-grad", "qattn"),
                    budgets=(0.1, 0.3), attribution=False, max_new_tokens=8, progress=False)


@pytest.fixture(scope="module")
def page(diagnosis) -> str:
    return report.diagnosis_to_html(diagnosis)


def _sweep(model, out: Path, dataset: str, n: int, hooks=None) -> Path:
    config = SweepConfig(dataset=dataset, n=n, diagnose=DiagnoseConfig(selectors=("none", "full", "random"),
                                                                       budgets=(0.5,), max_new_tokens=4,
                                                                       attribution=False))
    run_sweep(model, config, out, progress=False, hooks=hooks)
    return out


@pytest.fixture(scope="module")
def run(model, tmp_path_factory) -> Path:
    return _sweep(model, tmp_path_factory.mktemp("runs") / "tiny", f"jsonl:{FIXTURE}", 2)


@pytest.fixture(scope="module")
def odd_run(model, tmp_path_factory) -> Path:
    """A run whose example ids are '.', '..', '/', 'a/b', 'index', 'Manifest' and a long CJK string."""
    folder = tmp_path_factory.mktemp("odd")
    base = small_example(2)
    data = folder / "odd.jsonl"
    data.write_text("".join(json.dumps({"id": i, "passages": list(base.passages), "question": base.question,
                                        "answers": list(base.gold)}, ensure_ascii=False) + "\n" for i in ODD_IDS),
                    encoding="utf-8")
    return _sweep(model, folder / "run", f"jsonl:{data}", len(ODD_IDS))


def _without_plotlyjs(text: str) -> str:
    bundle = get_plotlyjs()
    assert text.count(bundle) == 1, "plotly.js must be embedded exactly once"
    return text.replace(bundle, "")


def _figures(text: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"var fig = (\{.*?\}); Plotly\.newPlot", text)]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _tree(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------ HTML


def test_html_escapes_payloads_in_the_body(page):
    rest = _without_plotlyjs(page)
    for raw in (SCRIPT, IMG, "<img", "onerror=alert(1)>"):
        assert raw not in rest
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rest
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in rest
    # the only script tags are the embedded plotly.js and the figures' inline scripts
    assert set(re.findall(r"<script[^>]*>", rest)) == {'<script type="text/javascript">'}
    assert rest.count("<script") == rest.count("</script>")


def test_html_is_offline(page):
    rest = re.sub(r"var fig = \{.*?\}; Plotly\.newPlot", "", _without_plotlyjs(page))
    assert "cdn" not in rest.lower()  # (outside figure data: base64 arrays may hold any letters)
    assert not any("://" in text for fig in _figures(page) for text in _strings(fig))
    assert "https://" not in rest and "http://" not in rest
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=", page)


def test_html_figures_hold_no_raw_markup(page, diagnosis):
    figures = _figures(page)
    # token strips, picks per budget, layer heatmaps, deviation k and v, residual per budget and kind
    n_signals = diagnosis.token_signals["signal"].nunique()
    n_layer = diagnosis.layer_signals["signal"].nunique()
    assert len(figures) == n_signals + 2 + n_layer + 2 + 4
    for fig in figures:
        for text in _strings(fig):
            assert "<" not in ALLOWED_TAGS.sub("", text), text
    # the token '<' of the passages is shown escaped, as plotly decodes it
    assert any("&lt;" in text for fig in figures for text in _strings(fig))


def test_html_figures_are_the_plots_builders(page, diagnosis):
    first = str(diagnosis.token_signals["signal"].iloc[0])
    strip = plots_diagnosis.strip_figure(diagnosis, signal=first, reused_only=True)
    assert _figures(page)[0] == json.loads(figure_json(strip))


def test_html_content(page, diagnosis):
    rest = _without_plotlyjs(page)
    for section in ("Example", "Answers", "Token signals", "Selectors' picks", "Layer × token heatmaps",
                    "Deviation left after repair", "Run"):
        assert section in rest
    assert diagnosis.example.question in rest
    assert "tiny-llama" in rest and "seed" in rest
    assert 'class="flip"' in rest or 'class="same"' in rest
    shown = re.findall(r'<td class="answer">(.*?)</td>', rest, flags=re.DOTALL)  # dense, spliced, each repair
    assert shown[2:] == [e(a) for a in diagnosis.outcomes["answer"]]
    assert shown[0] == e(diagnosis.answers.dense.text) and shown[1] == e(diagnosis.answers.spliced.text)


def test_an_answer_of_no_token_says_it_ended_at_once(model, tmp_path):
    """The splice and the repairs end their turn at once (the end-of-turn logit raised on the cells'
    pass): their empty answers read as ended at once, on the page and in a run's index; dense's not."""
    from workbench.experiments.blank_answers import ENDED_AT_ONCE

    d = diagnose(model, small_example(), selectors=("none", "full", "cacheblend"), budgets=(0.3,), attribution=False,
                 max_new_tokens=4, progress=False, hooks=ended_at_once(model))
    assert d.answers.spliced.text == "" and d.answers.dense.token_ids  # dense answered; the splice ended at once
    shown = re.findall(r'<td class="answer">(.*?)</td>', _without_plotlyjs(report.diagnosis_to_html(d)), flags=re.DOTALL)
    assert shown[0] == e(d.answers.dense.text)
    assert shown[1:] == [f"<i>{ENDED_AT_ONCE}</i>"] * (1 + len(d.outcomes))  # the splice, then each repair
    run = _sweep(model, tmp_path / "ended", f"jsonl:{FIXTURE}", 2, hooks=ended_at_once(model))
    index = (report.report_run(run, all=True, out=tmp_path / "site") / "index.html").read_text()
    assert index.count(f"<i>{ENDED_AT_ONCE}</i>") == 2  # each example's splice; dense's answers shown
    assert all(e(text) in index for text in runstore.load_sweep(run).examples["dense_answer"])


def test_the_per_layer_recovery_section_appears_only_when_the_diagnosis_holds_it(page):
    title = "Where the repair recovers the answer, layer by layer"
    assert title not in _without_plotlyjs(page)
    config = DiagnoseConfig(selectors=("none", "full", "cacheblend"), budgets=(0.3,), attribution=False,
                            max_new_tokens=2)
    d = diagnose(tiny_model("llama"), small_example(), config, progress=False, layer_effects=True)
    html = _without_plotlyjs(report.diagnosis_to_html(d))
    assert title in html and "cacheblend" in html


def test_figure_json_cannot_close_its_script():
    fig = go.Figure(go.Scatter(x=[1], y=[1], name="</script><script>alert(1)</script>\u2028"))
    fig.update_layout(title="</SCRIPT><!--")
    div = figure_div(fig, "fig-1")
    assert div.lower().count("</script") == 1 and "<!--" not in div and "\u2028" not in div
    assert json.loads(re.search(r"var fig = (\{.*?\}); Plotly", div).group(1))["data"][0]["name"].startswith("</")


# ------------------------------------------------------------------ JSON


def test_json_round_trips_with_the_same_answers(diagnosis, tmp_path):
    out = report.write_report(diagnosis, tmp_path / "r.json")
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["schema_version"] == report.SCHEMA_VERSION == 2
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600
    assert set(doc) >= {"example", "run", "answers", "flips", "context", "token_signals", "picks", "layer_signals",
                        "deviation", "residual", "costs", "attribution"}
    assert doc["example"]["passages"][0].endswith(SCRIPT)
    dense, spliced = diagnosis.answers.dense, diagnosis.answers.spliced
    assert doc["answers"]["dense"] == {"text": dense.text, "token_ids": list(dense.token_ids), "stopped": dense.stopped,
                                       "em": dense.em, "f1": dense.f1, "contains": dense.contains,
                                       "retrieved": dense.retrieved}
    assert doc["answers"]["spliced"]["text"] == spliced.text
    assert (doc["answers"]["spliced"]["flip"], doc["answers"]["spliced"]["flip_strict"]) == spliced.flips(dense)
    assert doc["flips"]["spliced"] == diagnosis.answers.splice_flip
    outcomes = diagnosis.outcomes
    assert [r["answer"] for r in doc["answers"]["repairs"]] == outcomes["answer"].tolist()
    assert [r["flip"] for r in doc["answers"]["repairs"]] == outcomes["flip"].tolist()
    assert doc["flips"]["n_flipped"] == int(outcomes["flip"].sum())
    picks = {(p["selector"], p["budget"], p["draw"]): p["positions"] for p in doc["picks"]}
    assert picks["random", 0.3, 0] == diagnosis.picks("random", 0.3)
    assert picks["random", 0.3, 4] == diagnosis.picks("random", 0.3, draw=4) != picks["random", 0.3, 0]
    assert set(doc["token_signals"]) == set(diagnosis.token_signals["signal"])
    assert doc["token_signals"]["cadence_grad"]["label"] == "CADENCE-Grad (decision saliency)"
    assert doc["token_signals"]["cadence_grad"]["log"] is True
    assert doc["run"]["seed"] == 0 and doc["run"]["model"]["name"] == "tiny-llama"
    assert doc["run"]["config"]["selectors"] == list(diagnosis.config.selectors)
    dev = doc["deviation"]["v/rel_l2"]
    assert len(dev["values"]) == len(dev["layers"]) == diagnosis.model["n_layers"]
    assert len(dev["values"][0]) == len(dev["positions"]) == diagnosis.context.n_reused


def test_json_names_the_unit_not_the_layout(diagnosis):
    doc = report.diagnosis_to_json(diagnosis)
    for rows in (doc["answers"]["repairs"], doc["picks"], doc["residual"]):
        assert rows and all("unit" in r and "layout" not in r for r in rows)
    assert "layout" not in json.dumps(doc)


def test_json_residual_keeps_a_coin_s_draws_apart(diagnosis):
    """One residual entry per cell: each draw of a drawn control its own, each layer once."""
    doc = report.diagnosis_to_json(diagnosis)
    n_layers = diagnosis.model["n_layers"]
    for entry in doc["residual"]:
        assert entry["layers"] == list(range(n_layers))
    res = diagnosis.tables["residual"]
    coin = res[(res["selector"] == "random") & (res["kind"] == "v") & ((res["budget"] - 0.3).abs() < 1e-9)]
    entries = {e["draw"]: e for e in doc["residual"]
               if e["selector"] == "random" and e["kind"] == "v" and abs(e["budget"] - 0.3) < 1e-9}
    assert set(entries) == set(coin["draw"].astype(int)) and len(entries) > 1
    for draw, entry in entries.items():
        assert entry["values"] == coin[coin["draw"] == draw].sort_values("layer")["value"].tolist()
    assert all(e["draw"] is None for e in doc["residual"] if e["selector"] == "cacheblend")


def test_json_writes_nan_as_null(diagnosis):
    tables = {**diagnosis.tables, "outcomes": diagnosis.outcomes.assign(dense_logprob=float("nan"))}
    doc = report.diagnosis_to_json(dataclasses.replace(diagnosis, tables=tables))
    json.dumps(doc, allow_nan=False)
    assert all(r["dense_logprob"] is None for r in doc["answers"]["repairs"])


# ------------------------------------------------------------------ writing


def test_write_report_refuses_bad_paths(diagnosis, tmp_path):
    with pytest.raises(WorkbenchError, match=r"\.html or \.json"):
        report.write_report(diagnosis, tmp_path / "r.txt")
    existing = tmp_path / "r.json"
    existing.write_text("old")
    with pytest.raises(WorkbenchError, match="exists.*--force"):
        report.write_report(diagnosis, existing)
    assert existing.read_text() == "old"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WorkbenchError, match="not a folder"):
        report.write_report(diagnosis, blocker / "r.json")
    folder = tmp_path / "dir.html"
    folder.mkdir()
    with pytest.raises(WorkbenchError, match="is a folder"):
        report.write_report(diagnosis, folder, force=True)


def test_write_report_never_overwrites_a_runs_own_files(diagnosis, tmp_path):
    folder = diagnosis.save(tmp_path / "diag")
    before = (folder / "diagnosis.json").read_text()
    with pytest.raises(WorkbenchError, match="run's own file"):
        report.write_report(diagnosis, folder / "diagnosis.json", force=True)
    assert (folder / "diagnosis.json").read_text() == before


def test_failure_mid_write_leaves_no_file(diagnosis, tmp_path, monkeypatch):
    def disk_full(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workbench.atomic.os, "fsync", disk_full)
    with pytest.raises(WorkbenchError, match="No space left"):
        report.write_report(diagnosis, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_a_report_file_and_a_failed_write_keeps_the_old_one(diagnosis, tmp_path, monkeypatch):
    existing = tmp_path / "r.json"
    existing.write_text("old")
    report.write_report(diagnosis, existing, force=True)
    assert json.loads(existing.read_text())["schema_version"] == 2
    existing.write_text("old")

    def disk_full(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workbench.atomic.os, "fsync", disk_full)
    with pytest.raises(WorkbenchError, match="No space left"):
        report.write_report(diagnosis, existing, force=True)
    assert _tree(tmp_path) == ["r.json"] and existing.read_text() == "old"


def test_report_of_a_saved_diagnosis_and_of_a_diagnose_run(diagnosis, model, tmp_path):
    bare = diagnosis.save(tmp_path / "diag")  # Diagnosis.save: diagnosis.json only
    doc = json.loads(report.report_run(bare, out=tmp_path / "r.json").read_text())
    assert doc["example"]["id"] == diagnosis.example_id and doc["run"]["run"] is None
    folder = runstore.write_diagnosis_run(tmp_path / "one", diagnosis, model_identity(model))  # kvwb diagnose --out
    doc = json.loads(report.report_run(folder, diagnosis.example_id, out=tmp_path / "one.json").read_text())
    assert doc["run"]["run"]["kind"] == "diagnosis" and doc["run"]["versions_source"] == "run manifest"
    assert doc["run"]["model"]["fingerprint"]
    with pytest.raises(WorkbenchError, match="holds example"):
        report.report_run(folder, "other", out=tmp_path / "x.json")
    with pytest.raises(WorkbenchError, match="--all needs a run folder"):
        report.report_run(folder, all=True, out=tmp_path / "site")


# ------------------------------------------------------------------ runs


def test_report_one_example_of_a_run(run, tmp_path):
    out = report.report_run(run, "q2", out=tmp_path / "q2.html")
    rest = _without_plotlyjs(out.read_text())
    assert "Heskara Mills" in rest and "torch" in rest  # the example, and versions from the manifest
    doc = json.loads(report.report_run(run, "q2", out=tmp_path / "q2.json").read_text())
    assert doc["run"]["versions_source"] == "run manifest" and doc["run"]["run"]["kind"] == "sweep"


def test_report_all_writes_an_index_a_manifest_and_one_file_per_example(run, tmp_path):
    out = report.report_run(run, all=True, out=tmp_path / "site")
    assert _tree(out) == ["index.html", "manifest.json", "q1.html", "q1.json", "q2.html", "q2.json"]
    index = (out / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', index)
    assert links and all((out / unquote(link)).is_file() for link in links)
    assert "Tressamor" in index and "plotly" not in index.lower()
    manifest = runstore.read_manifest(out, kind="report")
    assert manifest["status"] == "complete" and manifest["args"]["examples"] == ["q1", "q2"]
    assert [(r.name, r.kind, r.problems) for r in runstore.scan_runs(tmp_path)] == [("site", "report", [])]
    with pytest.raises(WorkbenchError, match="exists"):
        report.report_run(run, all=True, out=out)
    (out / "stale.txt").write_text("x")
    report.report_run(run, all=True, out=out, force=True)
    assert not (out / "stale.txt").exists()
    assert _tree(tmp_path) == ["site"]  # no temporary folders left


def test_report_all_never_replaces_a_folder_the_workbench_did_not_write(run, tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "index.html").write_text("my own page")  # looks like reports, but has no manifest
    with pytest.raises(WorkbenchError, match="did not write"):
        report.report_run(run, all=True, out=mine, force=True)
    assert _tree(mine) == ["index.html"] and (mine / "index.html").read_text() == "my own page"
    with pytest.raises(WorkbenchError, match="'sweep' run, not a 'report' run"):  # nor a run of another kind
        report.report_run(run, all=True, out=run, force=True)
    assert (run / "outcomes.parquet").is_file()


def test_report_all_failure_leaves_nothing(run, tmp_path, monkeypatch):
    calls = []
    real = report_runs.diagnosis_to_html

    def fail_second(diagnosis, run_manifest=None):
        calls.append(diagnosis.example_id)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return real(diagnosis, run_manifest)

    monkeypatch.setattr(report_runs, "diagnosis_to_html", fail_second)
    with pytest.raises(WorkbenchError, match="Input/output error"):
        report.report_run(run, all=True, out=tmp_path / "site")
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_run_with_odd_example_ids(odd_run, tmp_path):
    out = report.report_run(odd_run, all=True, out=tmp_path / "site")
    files = _tree(out)
    assert len(files) == 2 + 2 * len(ODD_IDS) and "index.html" in files and "manifest.json" in files
    assert all(len(name.encode()) < 255 and not name.startswith(".") for name in files)
    index = (out / "index.html").read_text()
    links = sorted({unquote(link) for link in re.findall(r'href="([^"]+)"', index)})
    assert len(links) == 2 * len(ODD_IDS) and all((out / link).is_file() for link in links)
    ids = {json.loads((out / link).read_text())["example"]["id"] for link in links if link.endswith(".json")}
    assert ids == set(ODD_IDS)
    assert e(ODD_IDS[-1]) in index
    for n, example_id in enumerate(("..", "/", ODD_IDS[-1])):
        doc = json.loads(report.report_run(odd_run, example_id, out=tmp_path / f"{n}.json").read_text())
        assert doc["example"]["id"] == example_id


def test_run_bad_input(run, tmp_path):
    with pytest.raises(WorkbenchError, match=r"'nope' is not in .*'q1', 'q2'"):
        report.report_run(run, "nope", out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="--example ID"):
        report.report_run(run, out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="looks like a file"):
        report.report_run(run, all=True, out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="not both"):
        report.report_run(run, "q1", all=True, out=tmp_path / "site")
    curve = tmp_path / "curve"
    curve.mkdir()
    (curve / "manifest.json").write_text(json.dumps(runstore.finished(runstore.new_manifest("curve", None, {}))))
    with pytest.raises(WorkbenchError, match="no per-example diagnoses.*kvwb run"):
        report.report_run(curve, "q1", out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="not a run folder"):
        report.report_run(tmp_path, "q1", out=tmp_path / "r.html")
    assert _tree(tmp_path) == ["curve"]


def test_file_names_are_unique_and_never_the_index_or_manifest():
    stems = report_runs.file_stems(["index", "a/b", "A", "a", ".x", "a-2", "manifest", "長" * 200])
    assert stems["a/b"] == "a%2Fb" and not {"index", "manifest"} & {s.lower() for s in stems.values()}
    assert len({s.lower() for s in stems.values()}) == 8 and not any(s.startswith(".") for s in stems.values())
    assert all(len(s) <= runstore.paths.MAX_NAME for s in stems.values())


# ------------------------------------------------------------------ markdown


def test_sweep_summary_markdown(run):
    sweep = runstore.load_sweep(run)
    table = summarize(sweep)
    text = report.sweep_summary_markdown(sweep, table, tokens_to_target(table, sweep.examples))
    assert text.startswith(f"run {run}: 2 examples (0 failed), model tiny-llama")
    assert "| budget | selector | flips | f1_to_dense | first_token_agree | em | f1 | contains |" in text
    assert "McNemar b/c" in text and "exact sign-flip tests on those means" in text  # the coin: no vote
    assert "vs_ref compares against random." in text  # the run's default reference
    assert report.markdown_table(pd.DataFrame({"a": [1.0], "b": ["x"]})) == "| a | b |\n|---|---|\n| 1.000 | x |"


def test_curve_summary_markdown():
    summary = pd.DataFrame({"unit": [1, 64], "budget_share": [0.2, 0.25], "budget_share_min": [0.2, 0.2],
                            "budget_share_max": [0.2, 0.3], "budget_matched": [True, False],
                            "informed_error": [0.1, 0.2], "random_error": [0.3, 0.3], "gap": [0.2, 0.1],
                            "gap_share": [0.4, 0.2], "prompts_won": [3, 2], "n_prompts": [3, 3],
                            "p_value": [0.004, float("nan")], "unrepaired_error": [0.5, 0.5]})
    lines = report.curve_summary_markdown(summary).splitlines()
    assert lines[0].startswith("| unit | budget | matched |") and len(lines) == 4
    assert lines[2] == "| 1 | 20.0% | yes | 0.1000 | 0.3000 | +0.2000 | +40.0% | 3/3 (4.0e-03) | 0.5000 |"
    assert "25.0% (20.0%-30.0%) | no" in lines[3] and "(n/a)" in lines[3]


def test_report_all_skips_a_corrupt_example_with_a_warning(model, tmp_path, capsys):
    import shutil

    from workbench.cli.main import main as kvwb

    run = _sweep(model, tmp_path / "run", f"jsonl:{FIXTURE}", 2)
    ids = runstore.load_sweep(run).example_ids
    broken = runstore.load_sweep(run).diagnosis_folder(ids[1]) / "outcomes.parquet"
    broken.write_bytes(broken.read_bytes()[:40])  # truncated by a badly timed kill
    assert kvwb(["report", str(run), "--all", "--out", str(tmp_path / "site")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("kvwb: warning: ") and f"example {ids[1]!r}" in err and "recomputes it" in err
    site = tmp_path / "site"
    assert (site / f"{ids[0]}.html").is_file() and not (site / f"{ids[1]}.html").exists()
    assert "unreadable, skipped" in (site / "index.html").read_text()
    assert runstore.read_manifest(site)["details"]["skipped"] == [ids[1]]
    shutil.rmtree(site)


@pytest.mark.parametrize("rerotation", ["delta", "exact"])
def test_the_rerotation_and_its_rounding_floor_reach_the_saved_diagnosis_and_report(model, tmp_path, rerotation):
    d = diagnose(model, small_example(3), selectors=("none",), budgets=(0.2,), rerotation=rerotation, progress=False)
    back = Diagnosis.load(d.save(tmp_path / "d"))
    assert back.context.rerotation == rerotation
    assert len(back.context.rope_floor) == model.adapter.n_layers
    assert all(v >= 0 for v in back.context.rope_floor)
    doc = report.diagnosis_to_json(back)
    assert doc["context"]["rerotation"] == rerotation and doc["context"]["rope_floor"] == list(back.context.rope_floor)
    html = report.diagnosis_to_html(back)
    assert f"keys moved by {rerotation} re-rotation" in html
