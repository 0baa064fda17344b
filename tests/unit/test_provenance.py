"""Provenance (issue 43.5): a manifest records the environment that ran (the package's own git
tree, its diff's hash, versions, device, threads), and a run resumed in another environment keeps
both, each example listed under the segment that computed it (tiny model, seconds)."""

import json
import subprocess
import warnings
from pathlib import Path

import pytest

from conftest import tiny_model
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.experiments import pipeline_run
from workbench.experiments import sweep as sweep_module
from workbench.experiments.pipeline_run import PipelineConfig, run_pipeline
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import MANIFEST, load_manifest, new_manifest, write_manifest
from workbench.runstore.environment import code_state, environment
from workbench.runstore.segments import open_segment, record

DATA = f"jsonl:{Path(__file__).parents[1] / 'fixtures' / 'sample.jsonl'}"
CONFIG = SweepConfig(dataset=DATA, n=3, diagnose=DiagnoseConfig(selectors=("none", "full"), budgets=(0.2,),
                                                                max_new_tokens=4, attribution=False))
PIPELINE = PipelineConfig(agents=2, n=2, methods=("token-matched",), max_new_tokens=2)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def env_at(revision: str) -> dict:
    """This process's environment, as if another commit had run."""
    env = environment()
    return {**env, "code": {"revision": revision, "dirty": False, "diff_sha256": None}}


def run_in(monkeypatch, env: dict) -> None:
    """Make every manifest written from here on record `env` as what computed it."""
    monkeypatch.setattr("workbench.runstore.manifest.environment", lambda: env)
    monkeypatch.setattr("workbench.runstore.segments.environment", lambda: env)


def killed_sweep(model, out, monkeypatch, after: int = 1) -> None:
    """A sweep stopped (Ctrl-C) once `after` examples are saved."""
    real, calls = sweep_module.diagnose, []

    def dies(model, example, *args, **kwargs):
        calls.append(example.id)
        if len(calls) > after:
            raise KeyboardInterrupt
        return real(model, example, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "diagnose", dies)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(model, CONFIG, out, progress=False)
    monkeypatch.setattr(sweep_module, "diagnose", real)


def manifest_of(out) -> dict:
    return json.loads((Path(out) / MANIFEST).read_text())


def test_the_environment_names_the_code_packages_device_and_threads():
    env = environment()
    assert set(env) == {"code", "versions", "device", "threads"}
    assert set(env["code"]) == {"revision", "dirty", "diff_sha256"} and (env["code"]["dirty"]) == (
        env["code"]["diff_sha256"] is not None)
    assert env["code"]["revision"] is None or len(env["code"]["revision"]) == 40
    assert set(env["versions"]) == {"python", "torch", "transformers", "numpy"}
    assert env["device"]["cpu"] and isinstance(env["threads"]["torch"], int)
    manifest = new_manifest("curve", None, {})
    assert manifest["environment"] == env and "torch" in manifest["versions"] and "git_revision" in manifest


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_the_code_is_the_packages_own_tree_and_its_diff_is_hashed(tmp_path):
    package = tmp_path / "repo" / "pkg"
    package.mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (tmp_path / "repo" / "notes.txt").write_text("outside the package\n")
    git(tmp_path / "repo", "init", "-q")
    git(tmp_path / "repo", "add", ".")
    git(tmp_path / "repo", "commit", "-q", "-m", "one")
    clean = code_state(package)
    assert len(clean["revision"]) == 40 and clean["dirty"] is False and clean["diff_sha256"] is None
    (tmp_path / "repo" / "notes.txt").write_text("edited, but not the code\n")
    assert code_state(package) == clean
    (package / "a.py").write_text("x = 2\n")
    first = code_state(package)
    (package / "a.py").write_text("x = 3\n")
    second = code_state(package)
    (package / "b.py").write_text("y = 1\n")  # untracked code counts too
    third = code_state(package)
    assert first["dirty"] and first["revision"] == clean["revision"]
    assert len({first["diff_sha256"], second["diff_sha256"], third["diff_sha256"]}) == 3
    (tmp_path / "plain").mkdir()
    assert code_state(tmp_path / "plain") == {"revision": None, "dirty": False, "diff_sha256": None}


def test_a_resumed_run_on_other_code_keeps_both_environments(model, tmp_path, monkeypatch):
    old, new = env_at("a" * 40), env_at("b" * 40)
    run_in(monkeypatch, old)
    killed_sweep(model, tmp_path / "r", monkeypatch)
    run_in(monkeypatch, new)
    with pytest.warns(WorkbenchWarning, match=r"resumes on other code, packages or hardware .*code\.revision: 'aaaa.* in the run vs 'bbbb"):
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    manifest = manifest_of(tmp_path / "r")
    assert manifest["status"] == "complete" and manifest["environment"] == old  # the run's first environment
    assert [(s["environment"], s["examples"]) for s in manifest["segments"]] == [(old, ["q1"]), (new, ["q2", "q3"])]
    typed = load_manifest(tmp_path / "r")
    assert typed.environment_of("q1") == old and typed.environment_of("q3") == new
    assert typed.to_dict() == manifest


def test_a_resume_on_another_cpu_is_warned_and_keeps_both_environments(model, tmp_path, monkeypatch):
    here = environment()
    other = {**here, "device": {**here["device"], "cpu": "Another CPU"}}
    run_in(monkeypatch, other)
    killed_sweep(model, tmp_path / "r", monkeypatch)
    run_in(monkeypatch, here)
    with pytest.warns(WorkbenchWarning, match=r"or hardware .*device\.cpu: 'Another CPU' in the run vs"):
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    assert [s["environment"]["device"]["cpu"] for s in manifest_of(tmp_path / "r")["segments"]] == [
        "Another CPU", here["device"]["cpu"]]
    from workbench.experiments.summary import summarize, tokens_to_target
    from workbench.report import sweep_summary_markdown
    from workbench.runstore import load_sweep
    from workbench.runstore.segments import hardware

    run = load_sweep(tmp_path / "r")
    assert hardware(run.manifest.segments) == {here["device"]["cpu"]: 2, "Another CPU": 1}
    table = summarize(run)
    header = sweep_summary_markdown(run, table, tokens_to_target(table, run.examples, 0.9, 0.1)).splitlines()[1]
    assert header.startswith(f"computed on {here['device']['cpu']} (2 examples), Another CPU (1 examples)")


def test_hardware_counts_an_unrecorded_environment_and_a_gpu():
    from workbench.runstore.segments import hardware

    segments = [{"environment": None, "examples": ["a"]},
                {"environment": {"device": {"cpu": "C", "gpu": "G"}}, "examples": ["b", "c"]}]
    assert hardware(segments) == {"C + G": 2, "not recorded": 1} and hardware(None) == {}


def test_a_resume_in_the_same_environment_adds_no_segment(model, tmp_path, monkeypatch):
    killed_sweep(model, tmp_path / "r", monkeypatch)
    assert [s["examples"] for s in manifest_of(tmp_path / "r")["segments"]] == [["q1"]]  # listed as it was saved
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkbenchWarning)
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    [segment] = manifest_of(tmp_path / "r")["segments"]
    assert segment["examples"] == ["q1", "q2", "q3"] and segment["environment"] == environment()


def test_a_manifest_from_before_environments_loads_and_resumes_as_one_unknown_segment(model, tmp_path, monkeypatch):
    killed_sweep(model, tmp_path / "r", monkeypatch, after=2)
    old = {k: v for k, v in manifest_of(tmp_path / "r").items() if k not in ("environment", "segments")}
    write_manifest(tmp_path / "r", old)  # as the committed records under docs/records/ are
    typed = load_manifest(tmp_path / "r")
    assert typed.environment is None and typed.segments is None and typed.environment_of("q1") is None
    assert typed.to_dict() == old
    with pytest.warns(WorkbenchWarning, match="was not recorded"):
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    segments = manifest_of(tmp_path / "r")["segments"]
    assert [(s["environment"], s["examples"]) for s in segments] == [(None, ["q1", "q2"]), (environment(), ["q3"])]
    assert segments[0]["started"] == old["start"] and "environment" not in manifest_of(tmp_path / "r")


def test_a_resumed_pipeline_on_other_code_keeps_both_environments(model, tmp_path, monkeypatch):
    old, new = env_at("a" * 40), env_at("b" * 40)
    run_in(monkeypatch, old)
    real, calls = pipeline_run.run_request, []

    def dies_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_run, "run_request", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(model, PIPELINE, tmp_path / "p", progress=False)
    monkeypatch.setattr(pipeline_run, "run_request", real)
    run_in(monkeypatch, new)
    with pytest.warns(WorkbenchWarning, match=r"code\.revision"):
        run_pipeline(model, PIPELINE, tmp_path / "p", progress=False)
    segments = manifest_of(tmp_path / "p")["segments"]
    assert [(s["environment"], s["examples"]) for s in segments] == [(old, ["token-matched/00000"]),
                                                                     (new, ["token-matched/00001"])]


def test_a_recomputed_example_moves_to_the_segment_that_recomputed_it():
    a, b = env_at("a" * 40), env_at("b" * 40)
    manifest = {"start": "t0", "environment": a, "segments": [{"environment": a, "started": "t0", "examples": ["x", "y"]}]}
    with pytest.warns(WorkbenchWarning):
        manifest = open_segment(manifest, ["x", "y", "z"], "runs/r", current=b)  # z: saved, never listed
    assert [s["examples"] for s in manifest["segments"]] == [["x", "y", "z"], []]
    record(manifest, "x")  # its folder was unreadable: recomputed here
    record(manifest, "y", computed=False)  # recomputing it failed
    assert [s["examples"] for s in manifest["segments"]] == [["z"], ["x"]]
    manifest = open_segment(manifest, ["z", "x"], "runs/r", current=b)
    assert [s["examples"] for s in manifest["segments"]] == [["z"], ["x"]]  # the same environment goes on


def test_a_malformed_environment_is_one_line(tmp_path):
    write_manifest(tmp_path, {**new_manifest("sweep", None, {}), "segments": [{"environment": None}]})
    with pytest.raises(WorkbenchError, match=r"is malformed: its 'segments' holds list .*, not a list of objects"):
        load_manifest(tmp_path)
