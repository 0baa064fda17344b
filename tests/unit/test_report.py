"""Per-example reports: standalone HTML (escaped, offline), JSON schema, run reports and bad input."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from urllib.parse import unquote

import plotly.graph_objects as go
import pytest
from conftest import small_example, tiny_model
from plotly.offline import get_plotlyjs

from workbench import report
from workbench.diagnose import diagnose
from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.tasks import Example

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"
ALLOWED_TAGS = re.compile(r"</?(br|extra|b|i)>")


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


@pytest.fixture(scope="module")
def run(model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "tiny"
    config = SweepConfig(dataset=f"jsonl:{FIXTURE}", n=2, selectors=("none", "full", "random"), budgets=(0.5,),
                         options={"max_new_tokens": 4})
    return run_sweep(model, config, out, progress=False)


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


# ------------------------------------------------------------------ HTML


def test_html_escapes_payloads_in_the_body(page):
    rest = _without_plotlyjs(page)
    for raw in (SCRIPT, IMG, "<img", "onerror=alert(1)>"):
        assert raw not in rest
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rest
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in rest
    # the only script tags are the embedded plotly.js and the figures' inline scripts
    tags = set(re.findall(r"<script[^>]*>", rest))
    assert tags == {'<script type="text/javascript">'}
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
    # token strips, picks per budget, layer heatmaps, deviation, residual per budget and kind
    n_signals = diagnosis.token_signals["signal"].nunique()
    n_layer = diagnosis.layer_signals["signal"].nunique()
    assert len(figures) == n_signals + 2 + n_layer + 2 + 4
    for fig in figures:
        for text in _strings(fig):
            assert "<" not in ALLOWED_TAGS.sub("", text), text
    # the token '<' of the passages is shown escaped, as plotly decodes it
    assert any("&lt;" in text for fig in figures for text in _strings(fig))


def test_html_content(page, diagnosis):
    rest = _without_plotlyjs(page)
    for section in ("Example", "Answers", "Token signals", "Selectors' picks", "Layer × token heatmaps",
                    "Deviation left after repair", "Run"):
        assert section in rest
    assert diagnosis.example.question in rest
    assert "tiny-llama" in rest and "seed" in rest
    assert 'class="flip"' in rest or 'class="same"' in rest
    shown = re.findall(r'<td class="answer">(.*?)</td>', rest, flags=re.S)  # dense, spliced, each repair
    assert shown[2:] == [report._e(a) for a in diagnosis.outcomes["answer"]]
    assert shown[0] == report._e(diagnosis.info["answers"]["dense"]["text"])


def test_figure_json_cannot_close_its_script():
    fig = go.Figure(go.Scatter(x=[1], y=[1], name="</script><script>alert(1)</script>"))
    fig.update_layout(title="</SCRIPT><!--")
    div = report._Figures().div(fig)
    assert div.lower().count("</script") == 1 and "<!--" not in div
    assert json.loads(re.search(r"var fig = (\{.*?\}); Plotly", div).group(1))["data"][0]["name"].startswith("</")


# ------------------------------------------------------------------ JSON


def test_json_round_trips_with_the_same_answers(diagnosis, tmp_path):
    out = report.write_report(diagnosis, tmp_path / "r.json")
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["schema_version"] == report.SCHEMA_VERSION == 1
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600
    assert set(doc) >= {"example", "run", "answers", "flips", "context", "token_signals", "picks", "layer_signals",
                        "deviation", "residual", "costs", "attribution"}
    assert doc["example"]["passages"][0].endswith(SCRIPT)
    assert doc["answers"]["dense"]["text"] == diagnosis.info["answers"]["dense"]["text"]
    assert doc["answers"]["spliced"]["text"] == diagnosis.info["answers"]["spliced"]["text"]
    outcomes = diagnosis.outcomes
    assert [r["answer"] for r in doc["answers"]["repairs"]] == outcomes["answer"].tolist()
    assert [r["flip"] for r in doc["answers"]["repairs"]] == outcomes["flip"].tolist()
    assert doc["flips"]["n_flipped"] == int(outcomes["flip"].sum())
    picks = {(p["selector"], p["budget"]): p["positions"] for p in doc["picks"]}
    assert picks["random", 0.3] == diagnosis.picks("random", 0.3)
    assert set(doc["token_signals"]) == set(diagnosis.token_signals["signal"])
    assert doc["run"]["seed"] == 0 and doc["run"]["model"]["name"] == "tiny-llama"
    dev = doc["deviation"]["v/rel_l2"]
    assert len(dev["values"]) == len(dev["layers"]) == diagnosis.info["model"]["n_layers"]
    assert len(dev["values"][0]) == len(dev["positions"]) == diagnosis.info["n_reused"]


def test_json_writes_nan_as_null(diagnosis):
    tables = dict(diagnosis.tables)
    tables["outcomes"] = tables["outcomes"].assign(dense_logprob=float("nan"))
    doc = report.diagnosis_to_json(Diagnosis(diagnosis.example, diagnosis.info, tables))
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
    report.write_report(diagnosis, existing, force=True)
    assert json.loads(existing.read_text())["schema_version"] == 1
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WorkbenchError, match="not a folder"):
        report.write_report(diagnosis, blocker / "r.json")


def test_failure_mid_write_leaves_no_file(diagnosis, tmp_path, monkeypatch):
    def disk_full(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report.os, "fsync", disk_full)
    with pytest.raises(WorkbenchError, match="No space left"):
        report.write_report(diagnosis, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "r.json").write_text("old")
    with pytest.raises(WorkbenchError):
        report.write_report(diagnosis, tmp_path / "r.json", force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"] and (tmp_path / "r.json").read_text() == "old"


def test_report_of_a_diagnose_folder(diagnosis, tmp_path):
    folder = diagnosis.save(tmp_path / "diag")
    out = report.report_run(folder, out=tmp_path / "r.json")
    assert json.loads(out.read_text())["example"]["id"] == diagnosis.example_id


# ------------------------------------------------------------------ runs


def test_report_one_example_of_a_run(run, tmp_path):
    out = report.report_run(run, "q2", out=tmp_path / "q2.html")
    rest = _without_plotlyjs(out.read_text())
    assert "Heskara Mills" in rest and "torch" in rest  # the example, and versions from the manifest
    doc = json.loads(report.report_run(run, "q2", out=tmp_path / "q2.json").read_text())
    assert doc["run"]["versions_source"] == "run manifest" and doc["run"]["run"]["kind"] == "sweep"


def test_report_all_writes_an_index_and_one_file_per_example(run, tmp_path):
    out = report.report_run(run, all=True, out=tmp_path / "site")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["index.html", "q1.html", "q1.json", "q2.html", "q2.json"]
    index = (out / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', index)
    assert links and all((out / unquote(link)).is_file() for link in links)
    assert "Tressamor" in index and "plotly" not in index.lower()
    with pytest.raises(WorkbenchError, match="exists"):
        report.report_run(run, all=True, out=out)
    (out / "stale.txt").write_text("x")
    report.report_run(run, all=True, out=out, force=True)
    assert not (out / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["site"]  # no temporary folders left


def test_report_all_failure_leaves_nothing(run, tmp_path, monkeypatch):
    calls = []
    real = report.diagnosis_to_html

    def fail_second(diagnosis, run_manifest=None):
        calls.append(diagnosis.example_id)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return real(diagnosis, run_manifest)

    monkeypatch.setattr(report, "diagnosis_to_html", fail_second)
    with pytest.raises(WorkbenchError, match="Input/output error"):
        report.report_run(run, all=True, out=tmp_path / "site")
    assert list(tmp_path.iterdir()) == []


def test_run_bad_input(run, tmp_path):
    with pytest.raises(WorkbenchError, match=r"'nope' is not in .*'q1', 'q2'"):
        report.report_run(run, "nope", out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="--example ID"):
        report.report_run(run, out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="looks like a file"):
        report.report_run(run, all=True, out=tmp_path / "r.html")
    curve = tmp_path / "curve"
    curve.mkdir()
    (curve / "manifest.json").write_text(json.dumps({"kind": "curve", "status": "complete"}))
    with pytest.raises(WorkbenchError, match="no per-example diagnoses.*kvwb run"):
        report.report_run(curve, "q1", out=tmp_path / "r.html")
    with pytest.raises(WorkbenchError, match="not a run folder"):
        report.report_run(tmp_path, "q1", out=tmp_path / "r.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve"]


def test_cli_arguments(run, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    report.add_report_arguments(parser)
    args = parser.parse_args([str(run), "--example", "q1", "--out", str(tmp_path / "q1.json")])
    assert report.report_main(args) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "q1.json").is_file()
    with pytest.raises(WorkbenchError, match="exists"):
        report.report_main(args)
    args = parser.parse_args([str(run), "--example", "q1", "--out", str(tmp_path / "q1.json"), "--force"])
    assert report.report_main(args) == 0
    with pytest.raises(SystemExit):
        parser.parse_args([str(run), "--example", "q1", "--all", "--out", str(tmp_path / "d")])


def test_file_names_are_unique_and_never_the_index():
    stems = report._file_stems(["index", "a/b", "A", "a", ".x", "a-2"])
    assert stems["a/b"] == "a%2Fb" and "index" not in {s.lower() for s in stems.values()}
    assert len({s.lower() for s in stems.values()}) == 6 and not any(s.startswith(".") for s in stems.values())
