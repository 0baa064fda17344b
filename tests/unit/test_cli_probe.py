"""What `kvwb` says to bad input a probe found (issue cli-fix): an unfinished run named in the
summary's header, the same run refused as --against, checks made before the model loads, and
one-line refusals in place of silence."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_cli
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_llama):
    """A finished sweep of three examples, two selectors at two budgets."""
    out = tmp_path_factory.mktemp("probe") / "tiny"
    config = SweepConfig(dataset=f"jsonl:{FIXTURE}", n=3, diagnose=DiagnoseConfig(
        selectors=("cacheblend", "random"), budgets=(0.2, 0.5), max_new_tokens=2, attribution=False))
    run_sweep(tiny_llama, config, out, progress=False)
    return out


def _edited(sweep: Path, to: Path, **changes) -> Path:
    """A copy of the sweep with its manifest's top-level keys (or args, under `args`) changed."""
    shutil.copytree(sweep, to)
    manifest = json.loads((to / "manifest.json").read_text())
    manifest["args"].update(changes.pop("args", {}))
    manifest.update(changes)
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to


def test_the_summary_of_an_unfinished_run_says_so(sweep, tmp_path, capsys):
    assert run_cli(["summary", sweep, "--contrast", "cacheblend:random@0.2"]) == 0
    captured = capsys.readouterr()
    assert "interrupted" not in captured.out and "warning" not in captured.err
    stopped = _edited(sweep, tmp_path / "stopped", status="interrupted", args={"n": 40})
    assert run_cli(["summary", stopped, "--contrast", "cacheblend:random@0.2"]) == 0
    captured = capsys.readouterr()
    header = captured.out.splitlines()[0]
    assert "3 of 40 examples" in header and "the run is interrupted: its command resumes it" in header
    assert "warning: the contrasts test 3 of 40 examples" in captured.err
    running = _edited(sweep, tmp_path / "running", status="running")
    assert run_cli(["summary", running]) == 0
    assert "3 of 3 examples" in capsys.readouterr().out.splitlines()[0]
    (tmp_path / "records").mkdir()  # a record kept in git (docs/records, beside keep.py) is restored first
    (tmp_path / "records" / "keep.py").write_text("")
    kept = _edited(sweep, tmp_path / "records" / "kept", status="running", args={"n": 40})
    assert run_cli(["summary", kept]) == 0
    assert ("the run is still running (or ended without closing its manifest): `docs/records/keep.py restore kept` "
            "brings it back to runs/, where its command resumes it") in capsys.readouterr().out.splitlines()[0]


def test_against_refuses_the_same_run_before_printing_anything(sweep, tmp_path, capsys):
    contrast = ["--contrast", "cacheblend:random@0.2"]
    assert run_cli(["summary", sweep, *contrast, "--against", sweep]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "is the run itself" in captured.err
    copy = _edited(sweep, tmp_path / "copy")
    assert run_cli(["summary", sweep, *contrast, "--against", copy]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "is a copy of this run" in captured.err
    # the same examples under another setting (another model, or here fewer new tokens) are compared
    # (PROTOCOLS: two models on one data set), with a note that the test takes them as independent
    tokens = _edited(sweep, tmp_path / "tokens", args={"diagnose": {**json.loads(
        (sweep / "manifest.json").read_text())["args"]["diagnose"], "max_new_tokens": 3}})
    assert run_cli(["summary", sweep, *contrast, "--against", tokens]) == 0
    captured = capsys.readouterr()
    assert "Across settings" in captured.out and "shares 3 examples with this run" in captured.err
    model = _edited(sweep, tmp_path / "model", model={**json.loads((sweep / "manifest.json").read_text())["model"],
                                                     "fingerprint": {"spec": "another"}})
    assert run_cli(["summary", sweep, *contrast, "--against", model]) == 0
    assert "Across settings" in capsys.readouterr().out
    (tmp_path / "plain").mkdir()
    assert run_cli(["summary", sweep, *contrast, "--against", tmp_path / "plain"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "is not a run folder" in captured.err
    other = _edited(sweep, tmp_path / "other", args={"dataset_options": {"target_words": 99}})
    assert run_cli(["summary", sweep, *contrast, "--against", other]) == 0
    assert "Across settings" in capsys.readouterr().out
    # another task numbers its examples 0, 1, ... too: the same ids with other questions share nothing
    task = _edited(sweep, tmp_path / "task", args={"dataset_options": {"target_words": 98}})
    examples = pd.read_parquet(task / "examples.parquet")
    examples["question"] = "another task's question " + examples["example_id"].astype(str)
    examples.to_parquet(task / "examples.parquet")
    assert run_cli(["summary", sweep, *contrast, "--against", task]) == 0
    captured = capsys.readouterr()
    assert "Across settings" in captured.out and "shares" not in captured.err


@pytest.fixture
def no_model(monkeypatch):
    """A model load fails the test: every refusal here must come before it."""
    def load(*a, **k):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr("workbench.models.load_model", load)


def test_run_into_a_run_of_other_settings_is_refused_before_the_model_loads(sweep, no_model, capsys):
    before = (sweep / "manifest.json").read_text()
    assert run_cli(["run", "--dataset", f"jsonl:{FIXTURE}", "--n", "3", "--selectors", "cacheblend",
                    "--out", sweep]) == 2
    err = capsys.readouterr().err
    assert "holds a sweep run made with other settings" in err
    assert "model: 'tiny-llama' in the run vs 'smollm2-135m' now" in err
    assert (sweep / "manifest.json").read_text() == before


@pytest.mark.parametrize("option", [["--workers", "2"], ["--address", "auto"], ["--cpus-per-worker", "1"],
                                    ["--gpus-per-worker", "0"]])
def test_ray_options_without_the_ray_executor_are_refused(option, tmp_path, no_model, capsys):
    assert run_cli(["run", "--n", "1", *option, "--out", tmp_path / "r"]) == 2
    assert f"{option[0]} applies to --executor ray only" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, says", [
    (["answer", "--example", "synthetic"], "names no example: add '#ID'"),
    (["diagnose", "--example", "synthetic"], "names no example: add '#ID'"),
    (["answer", "--example", "ruler:niah_single#abc"], "example id 'abc'"),
    (["diagnose", "--example", "ruler:niah_single#abc"], "example id 'abc'"),
])
def test_an_example_spec_is_checked_before_the_model_loads(argv, says, no_model, capsys):
    assert run_cli(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("data, says", [
    (["--dataset", "rulr:x"], "unknown data set kind"),
    (["--dataset", "jsonl:{tmp}/bad.jsonl"], "bad.jsonl"),
    (["--max-passages", "2"], "do not apply to 'synthetic' data"),
])
def test_pipeline_checks_its_data_before_the_model_loads(data, says, tmp_path, no_model, capsys):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    argv = ["pipeline", *[a.replace("{tmp}", str(tmp_path)) for a in data], "--n", "1", "--out", tmp_path / "p"]
    assert run_cli(argv) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_results_check_of_a_file_with_no_marked_table_fails(tmp_path, capsys):
    plain = tmp_path / "plain.md"
    plain.write_text("# Notes\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert run_cli(["results", "--check", "--results", plain]) == 1
    out = capsys.readouterr().out
    assert f"no <!-- kvwb-results: NAME --> table in {plain}" in out and "nothing checked (1 unmarked" in out


@pytest.mark.parametrize("argv, says", [
    (["prepare", "smollm2-135m", "--model", "gemma3-270m"], "two models named: smollm2-135m and --model gemma3-270m"),
    (["results", "--list", "--check"], "--list only lists the tables and figures: give it without --check"),
])
def test_options_that_contradict_each_other_are_refused(argv, says, capsys):
    assert run_cli(argv) == 2
    assert says in capsys.readouterr().err


def test_a_damaged_manifest_read_by_summary_says_the_other_files_are_untouched(sweep, tmp_path, capsys):
    broken = _edited(sweep, tmp_path / "broken")
    (broken / "manifest.json").write_text("{not json")
    assert run_cli(["summary", broken]) == 2
    err = capsys.readouterr().err
    assert "the manifest is damaged and the run's other files are untouched: move the folder aside" in err
    assert "keep.py restore" in err and "remove the folder" not in err and "--out" not in err
    assert (broken / "diagnoses").is_dir()


@pytest.mark.parametrize("contrast, says", [
    ("nosuch:cacheblend@0.2", "unknown selector 'nosuch'; this run's selectors: cacheblend, random"),
    ("cacheblend:nosuch@0.2", "unknown selector 'nosuch'; this run's selectors: cacheblend, random"),
    ("bcr:grow:nosuch@0.2", "unknown selector 'nosuch'; this run's selectors: cacheblend, random"),
    ("coin:random@0.2", "'coin' stands second, after the selector it controls (A:coin@BUDGET)"),
    ("coin:coin@0.2", "'coin' stands second"),
    ("cacheblend:random@0.2000001", "no outcomes at budget 0.2000001 for cacheblend or random; the run's budgets "
                                    "are 0.2, 0.5 (the nearest: 0.2)"),
])
def test_a_contrast_the_run_cannot_answer_names_what_it_has(contrast, says, sweep, capsys):
    assert run_cli(["summary", sweep, "--contrast", contrast]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.out == ""


def test_summary_html_with_an_empty_name_is_refused(sweep, capsys):
    assert run_cli(["summary", sweep, "--html", ""]) == 2
    captured = capsys.readouterr()
    assert "give an output path (--html)" in captured.err and captured.out == ""


def test_what_is_not_a_run_folder_says_why(sweep, tmp_path, capsys):
    assert run_cli(["summary", sweep / "manifest.json"]) == 2
    assert f"is a file, not a run folder: give the folder that holds it, {sweep}" in capsys.readouterr().err
    assert run_cli(["summary", tmp_path / "nothing"]) == 2
    assert f"{tmp_path / 'nothing'} is not a run folder: it does not exist" in capsys.readouterr().err


def test_fidelity_layers_out_of_range_reads_as_a_sentence(capsys, tmp_path, no_model):
    assert run_cli(["fidelity", "--layers", "-1", "--out", tmp_path / "f"]) == 2
    assert "a count of replaced layers must be an integer >= 0" in capsys.readouterr().err


def test_a_report_file_under_missing_folders_is_written_there(sweep, tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "r.json"
    assert run_cli(["report", sweep, "--example", "q1", "--out", out]) == 0
    assert json.loads(out.read_text())["example"]["id"] == "q1"


def test_a_runs_own_file_does_not_make_a_removed_folder_again(tmp_path):
    from workbench.atomic import write_text

    gone = tmp_path / "run-removed-mid-run" / "manifest.json"
    with pytest.raises(FileNotFoundError):
        write_text(gone, "{}")
    assert not gone.parent.exists()
    write_text(gone, "{}", make_folders=True)  # a file output the output check accepted
    assert gone.read_text() == "{}"


def test_an_answerability_csv_under_missing_folders_is_written_there(tiny_llama, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: tiny_llama)
    out = tmp_path / "new" / "sub" / "a.csv"
    assert run_cli(["answerability", "--n", "2", "--max-new-tokens", "2", "--csv", out]) == 0
    assert out.is_file() and not (tmp_path / "new" / "sub" / "a.csv.partial.jsonl").exists()


def test_a_report_of_a_kept_record_says_its_views_were_not_kept(sweep, tmp_path, capsys):
    kept = _edited(sweep, tmp_path / "kept")
    for table in (kept / "diagnoses" / "q1").glob("*.parquet"):
        if table.name != "outcomes.parquet":
            table.unlink()  # what keep.py keeps of an example: its record and its outcomes
    assert run_cli(["report", kept, "--example", "q1", "--out", tmp_path / "q1.html"]) == 0
    page = (tmp_path / "q1.html").read_text()
    assert "Token signals were not kept in this record" in page and "Selections were not kept in this record" in page
    assert "No token signals in this diagnosis" not in page and "No selections in this diagnosis" not in page


def test_report_all_of_a_figures_folder_suggests_a_new_folder(sweep, tmp_path, capsys):
    figures = tmp_path / "figures"
    assert run_cli(["summary", sweep, "--html", figures]) == 0
    capsys.readouterr()
    assert run_cli(["report", figures, "--all", "--out", tmp_path / "site"]) == 2
    err = capsys.readouterr().err
    assert "kvwb run --dataset DATA --out NEW_FOLDER" in err and f"--out {figures}`" not in err
