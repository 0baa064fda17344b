"""`kvwb pipeline`'s run and summary on a tiny model: resumable without losing or changing a
finished request, and tables computed as BCR computes them."""

import json
from dataclasses import replace

import pandas as pd
import pytest

from conftest import tiny_model
from workbench import cli
from workbench.errors import WorkbenchError
from workbench.experiments import pipeline_run
from workbench.experiments.pipeline_run import PipelineConfig, request_path, run_pipeline
from workbench.experiments.pipeline_summary import summarize_pipeline
from workbench.runstore import load_pipeline, read_manifest

CONFIG = PipelineConfig(agents=3, n=4, methods=("token-matched", "kvcomm-always"), max_new_tokens=3)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def answers(out, n, method="kvcomm-always"):
    return [json.loads(request_path(out, method, i).read_text()) for i in range(n)]


def test_a_killed_run_resumes_to_what_an_uninterrupted_run_gives(model, tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    run_pipeline(model, CONFIG, whole, progress=False)
    want = answers(whole, 4)
    assert any(c["reused"] for r in want for c in r["calls"])  # the replayed state is the anchor pool in use

    real, calls = pipeline_run.run_request, {"n": 0}

    def dies_on_the_third_new_request(*args, **kwargs):
        if kwargs.get("replay") is None and args[3] == "kvcomm-always":
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_run, "run_request", dies_on_the_third_new_request)
    killed = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(model, CONFIG, killed, progress=False)
    assert read_manifest(killed)["status"] == "interrupted"
    kept = [json.loads(request_path(killed, "kvcomm-always", i).read_text()) for i in range(2)]
    assert not request_path(killed, "kvcomm-always", 2).exists()
    monkeypatch.setattr(pipeline_run, "run_request", real)
    run_pipeline(model, CONFIG, killed, progress=False)  # replays 2 requests, then goes on
    got = answers(killed, 4)
    assert got[:2] == kept  # nothing finished was lost or redone
    strip = [[{k: v for k, v in c.items() if k != "seconds"} for c in r["calls"]] for r in got]
    assert strip == [[{k: v for k, v in c.items() if k != "seconds"} for c in r["calls"]] for r in want]
    assert read_manifest(killed)["status"] == "complete"

    def no_work(*args, **kwargs):
        raise AssertionError("a finished run replayed a request")

    monkeypatch.setattr(pipeline_run, "run_request", no_work)
    run_pipeline(model, CONFIG, killed, progress=False)  # nothing missing: no replay, no model work


def test_a_request_that_raises_leaves_the_finished_ones_in_the_tables(model, tmp_path, monkeypatch):
    real, seen = pipeline_run.run_request, {"n": 0}

    def raises_on_the_third_request(*args, **kwargs):
        seen["n"] += 1
        if seen["n"] == 3:
            raise RuntimeError("a broken request")
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_run, "run_request", raises_on_the_third_request)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="a broken request"):
        run_pipeline(model, CONFIG, out, progress=False)
    manifest = read_manifest(out)
    assert manifest["status"] == "interrupted" and manifest["end"] is not None
    assert manifest["details"]["error"] == "RuntimeError: a broken request"
    assert list(pd.read_parquet(out / "requests.parquet")["index"]) == [0, 1]

    monkeypatch.setattr(pipeline_run, "run_request", real)
    run_pipeline(model, CONFIG, out, progress=False)  # the resume completes: the old error is gone
    manifest = read_manifest(out)
    assert manifest["status"] == "complete" and "error" not in manifest["details"]


def test_a_resume_with_fewer_methods_or_requests_keeps_every_table_row(model, tmp_path):
    out = tmp_path / "run"
    run_pipeline(model, CONFIG, out, progress=False)
    request_path(out, "token-matched", 1).unlink()  # the smaller session has work, and rewrites the tables
    manifest = run_pipeline(model, replace(CONFIG, n=2, methods=("token-matched",)), out, progress=False)
    assert manifest["status"] == "complete"
    run = load_pipeline(out)
    assert len(run.requests) == 8 and set(run.requests["method"]) == set(CONFIG.methods)
    args = read_manifest(out)["args"]
    assert (args["n"], args["methods"]) == (4, list(CONFIG.methods))

    request_path(out, "kvcomm-always", 3).unlink()  # a request beyond this session's n is missing
    run_pipeline(model, replace(CONFIG, n=2, methods=("token-matched",)), out, progress=False)
    assert read_manifest(out)["status"] == "interrupted"  # the run holds n = 4, not all of it done
    assert len(load_pipeline(out).requests) == 7


def test_a_one_example_data_set_runs_its_one_request(model, tmp_path):
    out = tmp_path / "run"
    manifest = run_pipeline(model, replace(CONFIG, dataset="synthetic#1", n=3), out, progress=False)
    assert manifest["status"] == "complete" and manifest["details"]["n_requests"] == 1
    assert len(load_pipeline(out).requests) == 2


def test_a_resume_with_other_settings_is_refused(model, tmp_path):
    out = tmp_path / "run"
    run_pipeline(model, PipelineConfig(agents=2, n=1, methods=("token-matched",), max_new_tokens=2), out,
                 progress=False)
    with pytest.raises(WorkbenchError, match="other settings.*agents"):
        run_pipeline(model, PipelineConfig(agents=3, n=1, methods=("token-matched",), max_new_tokens=2), out,
                     progress=False)


def test_a_resume_with_another_kvcomm_variant_is_refused(model, tmp_path):
    out, config = tmp_path / "run", PipelineConfig(agents=2, n=1, methods=("token-matched",), max_new_tokens=2)
    run_pipeline(model, replace(config, kvcomm="legacy"), out, progress=False)
    assert read_manifest(out)["args"]["kvcomm"] == "legacy"
    with pytest.raises(WorkbenchError, match="other settings.*kvcomm: 'legacy' in the run vs 'code' now"):
        run_pipeline(model, config, out, progress=False)
    # a run made before the option existed holds no "kvcomm": it resumes only as "legacy"
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["args"]["kvcomm"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(WorkbenchError, match="made before --kvcomm existed.*--kvcomm legacy"):
        run_pipeline(model, config, out, progress=False)
    assert run_pipeline(model, replace(config, kvcomm="legacy"), out, progress=False)["status"] == "complete"
    assert read_manifest(out)["args"]["kvcomm"] == "legacy"
    with pytest.raises(WorkbenchError, match="unknown --kvcomm 'paper'"):
        replace(config, kvcomm="paper").checked()


@pytest.mark.parametrize("config, match", [
    (PipelineConfig(agents=0), "1 to 5 agents"),
    (PipelineConfig(topology="ring"), "unknown topology"),
    (PipelineConfig(methods=("dense-ish",)), "unknown reuse method"),
    (PipelineConfig(methods=()), "at least one"),
])
def test_bad_configs_are_refused(config, match):
    with pytest.raises(WorkbenchError, match=match):
        config.checked()


def test_a_corrupt_or_missing_request_file_is_moved_aside_and_recomputed(model, tmp_path, monkeypatch, capsys):
    """An empty request file blocked the run for good with a JSONDecodeError traceback (issue 29.5)."""
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    out = tmp_path / "P"
    argv = ["pipeline", "--agents", "2", "--n", "3", "--methods", "chat-template,kvcomm-always",
            "--max-new-tokens", "3", "--out", str(out)]
    assert cli.main(argv) == 0
    want = answers(out, 3)
    request_path(out, "kvcomm-always", 1).write_text("")
    request_path(out, "kvcomm-always", 2).unlink()
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("kvwb: warning: ") == 1, err
    assert f"{request_path(out, 'kvcomm-always', 1)} was unreadable (JSONDecodeError" in err and "recomputed" in err
    assert [p.name.startswith(".corrupt-00001.json-") for p in (out / "requests" / "kvcomm-always").iterdir()
            if p.name.startswith(".")] == [True]
    got = answers(out, 3)
    strip = [[{k: v for k, v in c.items() if k != "seconds"} for c in r["calls"]] for r in got]
    assert strip == [[{k: v for k, v in c.items() if k != "seconds"} for c in r["calls"]] for r in want]
    assert read_manifest(out)["status"] == "complete" and len(load_pipeline(out).requests) == 6


def test_the_cli_writes_a_run_the_loader_reads(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    out = tmp_path / "cli"
    assert cli.main(["pipeline", "--agents", "2", "--n", "2", "--methods", "chat-template,token-matched,kvcomm",
                     "--max-new-tokens", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "methods" in printed and "tax" in printed and "warmup" in printed
    run = load_pipeline(out)
    assert len(run.requests) == 6 and len(run.calls) == 12
    assert set(run.calls["role"]) == {"reader", "answerer"}


def requests_table(rows):
    return pd.DataFrame([{"method": m, "index": i, "example_id": str(i), "answer": a, "contains": ok, "em": ok}
                         for m, i, a, ok in rows])


def test_the_summary_computes_mcnemar_the_line_and_the_tax():
    # 4 requests; the reference right on all, kvcomm wrong on 2, token-matched wrong on 1
    rows = [("chat-template", i, "x", 1.0) for i in range(4)]
    rows += [("token-matched", i, "x" if i else "y", float(i > 0)) for i in range(4)]
    rows += [("kvcomm", i, "x" if i > 1 else "z", float(i > 1)) for i in range(4)]
    calls = pd.DataFrame([{"method": m, "index": i, "reused": m == "kvcomm" and i % 2 == 0,
                           "template_differs": m == "token-matched" and i == 0}
                          for m in ("chat-template", "token-matched", "kvcomm") for i in range(4) for _ in range(2)])
    # a fifth request only kvcomm finished, every call reused: left out of accuracy and reuse alike
    rows += [("kvcomm", 4, "x", 1.0)]
    calls = pd.concat([calls, pd.DataFrame([{"method": "kvcomm", "index": 4, "reused": True,
                                             "template_differs": False}] * 2)], ignore_index=True)
    tables = summarize_pipeline(requests_table(rows), calls)
    methods = tables["methods"].set_index("method")
    assert methods.loc["kvcomm", "n"] == 4
    assert methods.loc["kvcomm", "acc"] == 0.5 and methods.loc["kvcomm", "reuse"] == 0.5
    assert (methods.loc["kvcomm", "b_ref"], methods.loc["kvcomm", "c_ref"]) == (2, 0)
    assert methods.loc["kvcomm", "flip_rate"] == 0.5
    # the line through (0, 1.0) and (0.5, 0.5): slope 1; token-matched reuses nothing, so its residual is -0.25
    assert methods.loc["kvcomm", "line_resid"] == pytest.approx(0.0)
    assert methods.loc["token-matched", "line_resid"] == pytest.approx(-0.25)
    tax = tables["tax"].iloc[0]
    assert (tax["tokenization"], tax["approximation"], tax["calls_differ"]) == (0.25, 0.25, 0.25)
    assert list(tables["warmup"]["block"]) == ["1-1", "2-2", "3-3", "4-4"]


def test_the_pipeline_figures_show_their_data(model, tmp_path):
    from workbench import plots

    out = tmp_path / "figs"
    run_pipeline(model, PipelineConfig(agents=3, n=5, methods=("chat-template", "token-matched", "kvcomm-always"),
                                       max_new_tokens=2), out, progress=False)
    run = load_pipeline(out)
    tables = summarize_pipeline(run.requests, run.calls, anchor="kvcomm-always")
    line = plots.reuse_vs_accuracy(tables["methods"])
    assert {t.name for t in line.data if t.mode == "markers"} == {"chat-template", "token-matched", "kvcomm-always"}
    one = run.calls.query("method == 'kvcomm-always' and index == 4")
    graph = plots.agent_graph(one, [(0, 1), (0, 2), (1, 2)])
    assert sum(len(t.x) for t in graph.data) == 3 and len(graph.layout.annotations) == 3
    gate = plots.gate_entropy(run.calls[run.calls["method"] == "kvcomm-always"])
    for fig in (line, graph, gate):
        assert plots.figure_problems(fig) == []
    assert graph.layout.showlegend and all(t.showlegend for t in graph.data)  # grey = dense prefill, in words
    assert gate.layout.xaxis.dtick >= 1 and gate.layout.xaxis.tickformat == "d"  # a count: no tick at 0.5
    colors = {t.name: t.marker.color for t in line.data if t.mode == "markers"}
    assert colors == {m: plots.method_color(m) for m in ("chat-template", "token-matched", "kvcomm-always")}


def test_repair_on_a_method_writes_its_table_and_summary(model, tmp_path):
    from workbench.experiments.pipeline_summary import repair_summary

    out = tmp_path / "rep"
    config = PipelineConfig(agents=2, n=8, methods=("token-matched", "kvcomm-always"), max_new_tokens=2,
                            repair_on="kvcomm-always")
    run_pipeline(model, config, out, progress=False)
    run = load_pipeline(out)
    reused_final = run.calls.query("method == 'kvcomm-always' and agent == 1 and reused")
    assert run.repair["index"].nunique() == len(reused_final) > 0
    table = repair_summary(run.repair)
    assert {"bcr", "random", "cacheblend"} <= set(table["selector"])
    assert set(table["budget"]) == {0.05, 0.1, 0.2, 0.3, 0.4}
    with pytest.raises(WorkbenchError, match="not one of the methods"):
        PipelineConfig(methods=("kvcomm",), repair_on="opengate").checked()


def test_a_pipeline_over_musique_passages(model, tmp_path, monkeypatch):
    """The real variant: MuSiQue's retrieved passages (the first K) and its instruction form the task."""
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "musique_sample.json"
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    out = tmp_path / "musique"
    assert cli.main(["pipeline", "--dataset", f"musique:{fixture}", "--max-passages", "2", "--agents", "2",
                     "--n", "3", "--methods", "token-matched,kvcomm", "--max-new-tokens", "2",
                     "--out", str(out)]) == 0
    run = load_pipeline(out)
    assert list(run.requests["example_id"].unique()) == ["musique-900", "musique-901", "musique-902"]
    assert run.manifest.args["dataset_options"] == {"max_passages": 2}
    with pytest.raises(WorkbenchError, match="other settings.*max_passages"):
        run_pipeline(model, PipelineConfig(agents=2, dataset=f"musique:{fixture}", n=3,
                                           methods=("token-matched", "kvcomm"), max_new_tokens=2,
                                           dataset_options={"max_passages": 3}), out, progress=False)
