"""The run store: safe folders for any example id, out-path checks, one writer at a time,
resume identity, corrupt examples, manifests of the first version (tiny model, seconds)."""

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from conftest import tiny_model
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import (
    finished, lock_holder, writer_state,
    check_out, folder_name, load_sweep, natural_key, new_manifest, read_manifest, run_kind, run_lock, scan_runs,
    subfolders,
    write_manifest,
)

DIAGNOSE = DiagnoseConfig(selectors=("none", "random"), budgets=(0.5,), max_new_tokens=3, attribution=False)
PASSAGES = ["Varek Olundi is coached by Mira Tessk.", "Mira Tessk was born in Tressamor."]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def jsonl(path: Path, ids: list[str], question: str = "Where was the coach born?") -> str:
    path.write_text("".join(json.dumps({"id": i, "passages": PASSAGES, "question": question,
                                        "answers": ["Tressamor"]}) + "\n" for i in ids))
    return f"jsonl:{path}"


@pytest.mark.parametrize("example_id", [".", "..", "a/b", "m0", "x y", "~", "%2E", "é" * 40, "题" * 100,
                                        "a" * 300])
def test_folder_names_are_safe_bounded_and_distinct(example_id):
    name = folder_name(example_id)
    assert name not in (".", "..") and "/" not in name and not name.startswith(".")
    assert len(name.encode()) <= 96
    assert name == folder_name(example_id)


def test_folder_names_never_collide():
    ids = [".", "..", "%2E", "%252E", "a.b", "a%2Eb", "a" * 300, "a" * 301, "题" * 100, "题" * 101, "A", "a",
           "Q12", "q12", "aB", "Ab"]
    assert len({folder_name(i) for i in ids}) == len(ids)
    assert len({folder_name(i).lower() for i in ids}) == len(ids)  # distinct where case is ignored too


def test_dot_ids_do_not_delete_earlier_diagnoses(model, tmp_path):
    """An id of '.' once replaced the whole diagnoses/ folder; '..' and a long CJK id crashed."""
    ids = ["m0", "m1", ".", "..", "题" * 100]
    data = jsonl(tmp_path / "d.jsonl", ids)
    run_sweep(model, SweepConfig(dataset=data, n=len(ids), diagnose=DIAGNOSE), tmp_path / "run", progress=False)
    run = load_sweep(tmp_path / "run")
    assert run.manifest.is_complete and run.manifest.failures == ()
    assert run.example_ids == ids
    assert len(subfolders(tmp_path / "run" / "diagnoses")) == len(ids)
    for example_id in ids:
        assert run.diagnosis(example_id).example_id == example_id


def test_the_natural_order_is_total_and_the_same_in_every_process():
    ids = ["ex1", "ex01", "ex001", "ex2", "ex10", "b", "a1b2", "a1"]
    want = ["a1", "a1b2", "b", "ex001", "ex01", "ex1", "ex2", "ex10"]
    assert sorted(ids, key=natural_key) == sorted(reversed(ids), key=natural_key) == want
    code = ("import pandas as pd; from workbench.runstore.loaders import _in_natural_order as o; "
            f"print(list(o(pd.DataFrame({{'example_id': {ids!r}}}))['example_id']))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert seen == {f"{want!r}\n"}


def test_readings_do_not_depend_on_the_order_the_outcomes_were_written_in(model, tmp_path):
    """A run writes its tables in the data set's order, a restored record in its ids' order; the
    outcomes read back are the same either way (natural order of ids), the examples keep the data's."""
    ids = ["q10", "q2", "q1"]
    run_sweep(model, SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ids), n=3, diagnose=DIAGNOSE), tmp_path / "run",
              progress=False)
    first = load_sweep(tmp_path / "run")
    assert first.example_ids == ids
    assert list(dict.fromkeys(first.outcomes["example_id"])) == ["q1", "q2", "q10"]
    written = pd.read_parquet(tmp_path / "run" / "outcomes.parquet")
    blocks = [written[written["example_id"] == i] for i in ["q2", "q1", "q10"]]  # each example's rows as saved
    pd.concat(blocks).to_parquet(tmp_path / "run" / "outcomes.parquet")
    pd.testing.assert_frame_equal(load_sweep(tmp_path / "run").outcomes, first.outcomes)


def test_temporary_and_hidden_folders_are_not_examples(model, tmp_path):
    data = jsonl(tmp_path / "d.jsonl", ["a", "b"])
    config = SweepConfig(dataset=data, n=2, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "run", progress=False)
    (tmp_path / "run" / "diagnoses" / ".a-x1y2").mkdir()  # left by a kill mid-save
    (tmp_path / "run" / "diagnoses" / ".a-x1y2" / "diagnosis.json").write_text("{}")
    run_sweep(model, config, tmp_path / "run", progress=False)
    assert load_sweep(tmp_path / "run").example_ids == ["a", "b"]
    assert [r.name for r in scan_runs(tmp_path)] == ["run"]


def test_force_never_replaces_a_folder_the_workbench_did_not_write(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    for force in (False, True):
        with pytest.raises(wb.WorkbenchError, match="did not write"):
            check_out(mine, force=force)
    assert (mine / "thesis.tex").read_text() == "years of work"
    ours = run_folder(tmp_path / "ours", "diagnosis")
    with pytest.raises(wb.WorkbenchError, match="--force"):
        check_out(ours, kind="diagnosis")
    assert check_out(ours, kind="diagnosis", force=True) == ours


def run_folder(folder: Path, kind: str) -> Path:
    """A folder holding a manifest as the workbench writes one, of `kind`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, new_manifest(kind, None, {}))
    return folder


@pytest.mark.parametrize("manifest", [{"manifest_version": 3, "name": "an extension"}, {}, {"kind": "sweep"},
                                      {"schema": "other", "schema_version": 2, "kind": "sweep"},
                                      {"schema": "kvwb-run", "schema_version": 2, "kind": "banana"}])
def test_a_file_named_manifest_json_does_not_make_a_folder_the_workbenchs(manifest, tmp_path):
    # Browser extensions, web apps and Jupyter Books have a manifest.json; --force deleted them (issue 29.1).
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "manifest.json").write_text(json.dumps(manifest))
    (ext / "thesis.tex").write_text("years of work")
    for kind in ("diagnosis", "curve", None):
        with pytest.raises(wb.WorkbenchError, match=f"holds {ext / 'manifest.json'}, which the workbench did not "
                                                     f"write"):
            check_out(ext, kind=kind, force=True)
    assert (ext / "thesis.tex").read_text() == "years of work"


def test_runs_of_earlier_versions_stay_the_workbenchs(tmp_path):
    """A schema-2 manifest written before the marker, and a first-version one, are still recognised."""
    before_marker = {k: v for k, v in new_manifest("curve", None, {}).items() if k != "schema"}
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "manifest.json").write_text(json.dumps(before_marker))
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "manifest.json").write_text(json.dumps({
        "kind": "sweep", "model": {}, "args": {}, "versions": {}, "git_revision": None, "start": "", "end": None,
        "status": "complete", "failures": []}))  # what the first `kvwb run` wrote
    assert run_kind(tmp_path / "v2") == "curve" and run_kind(tmp_path / "v1") == "sweep"
    assert check_out(tmp_path / "v2", kind="curve", force=True) == tmp_path / "v2"
    assert check_out(tmp_path / "v1", kind="sweep", resume=True) == tmp_path / "v1"
    assert read_manifest(tmp_path / "v2")["schema"] == "kvwb-run"


def test_force_replaces_only_a_run_of_the_same_kind(tmp_path):
    # `diagnose --force` over a sweep replaced the whole sweep with one diagnosis (issue 29.2).
    sweep = run_folder(tmp_path / "s", "sweep")
    for kind in ("diagnosis", "curve", "fidelity", "report"):
        with pytest.raises(wb.WorkbenchError, match=f"holds a 'sweep' run, not a '{kind}' run .*--force replaces "
                                                     f"only a run of the same kind"):
            check_out(sweep, kind=kind, force=True)
    with pytest.raises(wb.WorkbenchError, match="holds a 'sweep' run, not a 'pipeline' run"):
        check_out(sweep, kind="pipeline", resume=True)
    assert check_out(sweep, kind="sweep", resume=True) == sweep


@pytest.mark.parametrize("inside", ["diagnoses/m0", "diagnoses/m0/deeper/x", "new", "report.html"])
def test_an_output_inside_another_run_is_refused(inside, tmp_path):
    # A sweep into another run's example folder overwrote that example's outcomes (issue 29.4).
    run = run_folder(tmp_path / "RUN", "sweep")
    (run / "diagnoses" / "m0").mkdir(parents=True)
    (run / "diagnoses" / "m0" / "diagnosis.json").write_text(json.dumps({"schema_version": 2, "example": {}}))
    suffixes = (".html",) if inside.endswith(".html") else ()
    for resume in (False, True):
        with pytest.raises(wb.WorkbenchError, match=f"is inside the sweep run {run}"):
            check_out(run / inside, kind="sweep", resume=resume, force=True, file_suffixes=suffixes)
    assert check_out(run, kind="sweep", resume=True) == run  # the run itself is no run's inside


def test_a_refused_run_leaves_no_lock_and_names_the_file_it_found(model, tmp_path):
    # "is a None run, not a 'sweep' run", and an empty .lock left behind (issue 29.16).
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "manifest.json").write_text('{"manifest_version": 3}')
    config = SweepConfig(dataset="synthetic", n=1, diagnose=DIAGNOSE)
    with pytest.raises(wb.WorkbenchError, match=f"holds {ext / 'manifest.json'}, which the workbench did not write"):
        run_sweep(model, config, ext, progress=False)
    assert sorted(p.name for p in ext.iterdir()) == ["manifest.json"]
    with pytest.raises(wb.WorkbenchError, match=f"{ext / 'manifest.json'} is not a run manifest of the workbench"):
        read_manifest(ext)


@pytest.mark.parametrize("make, match", [
    (lambda t: (t / "f").write_text("x") and t / "f", "is a file"),
    (lambda t: (t / "f").write_text("x") and t / "f" / "run", "is a file, not a folder"),
])
def test_out_paths_that_cannot_be_written_are_refused_up_front(tmp_path, make, match):
    with pytest.raises(wb.WorkbenchError, match=match):
        check_out(make(tmp_path))


def test_a_read_only_parent_is_refused_up_front(tmp_path, monkeypatch):
    """The check writes a probe folder; a read-only file system (EROFS) refuses it. Root ignores
    permission bits, so the refusal is simulated at the probe."""
    import errno

    from workbench.runstore import out as paths

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(paths.tempfile, "mkdtemp", read_only)
    with pytest.raises(wb.WorkbenchError, match="not writable .Read-only file system"):
        check_out(tmp_path / "run")


def _hold_lock(folder: str, ready, release) -> None:
    with run_lock(Path(folder)):
        ready.set()
        release.wait(30)


def test_a_second_writer_is_refused_at_once_and_a_dead_ones_lock_is_taken_over(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready, release))
    holder.start()
    assert ready.wait(30)
    started = time.perf_counter()
    with pytest.raises(wb.WorkbenchError, match=f"process {holder.pid}"):
        with run_lock(tmp_path):
            pass
    assert time.perf_counter() - started < 2
    assert writer_state(tmp_path) == "alive"
    holder.kill()  # dies holding the lock: the kernel releases it, the file still names it
    holder.join()
    assert lock_holder(tmp_path)[0] == holder.pid and writer_state(tmp_path) == "gone"
    with run_lock(tmp_path):
        pass
    assert writer_state(tmp_path) == "none"  # a writer that ends clears its name
    # it died before writing anything: the folder holds only its lock, and a rerun may use it
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]
    assert check_out(tmp_path, resume=True) == tmp_path


def test_resume_refuses_another_dtype_and_an_edited_data_file(model, tmp_path):
    data = jsonl(tmp_path / "d.jsonl", ["a", "b"])
    config = SweepConfig(dataset=data, n=2, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "run", progress=False)
    bf16 = tiny_model("llama", dtype=__import__("torch").bfloat16)
    with pytest.raises(wb.WorkbenchError, match="model.dtype: 'float32' in the run vs 'bfloat16' now"):
        run_sweep(bf16, config, tmp_path / "run", progress=False)
    jsonl(tmp_path / "d.jsonl", ["a", "b"], question="Who coaches Varek Olundi?")
    with pytest.raises(wb.WorkbenchError, match="data_sha256"):
        run_sweep(model, config, tmp_path / "run", progress=False)


def test_resume_refuses_another_device(model, tmp_path, monkeypatch):
    data = jsonl(tmp_path / "d.jsonl", ["a"])
    config = SweepConfig(dataset=data, n=1, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "run", progress=False)
    from workbench.models import model_identity

    def on_cuda(m):
        identity = model_identity(m)
        return {**identity, "device": "cuda:0", "fingerprint": {**identity["fingerprint"], "device": "cuda"}}
    monkeypatch.setattr("workbench.experiments.sweep.model_identity", on_cuda)
    with pytest.raises(wb.WorkbenchError, match="model.device: 'cpu' in the run vs 'cuda' now"):
        run_sweep(model, config, tmp_path / "run", progress=False)


def test_a_corrupt_example_is_reported_and_recomputed_on_resume(model, tmp_path):
    data = jsonl(tmp_path / "d.jsonl", ["a", "b"])
    config = SweepConfig(dataset=data, n=2, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "run", progress=False)
    outcomes = tmp_path / "run" / "diagnoses" / "b" / "outcomes.parquet"
    outcomes.write_bytes(outcomes.read_bytes()[:40])  # truncated
    store = run_sweep(model, config, tmp_path / "run", progress=False)
    assert len(store.corrupt) == 1 and store.corrupt[0].startswith("b ")
    run = load_sweep(tmp_path / "run")
    assert run.example_ids == ["a", "b"] and len(pd.read_parquet(outcomes)) == 1 + 5  # none, five coin draws


def test_a_failure_recorded_for_an_example_whose_folder_was_saved_is_dropped_on_resume(model, tmp_path):
    """A Ray worker killed between saving its folder and returning leaves both; the folder wins."""
    data = jsonl(tmp_path / "d.jsonl", ["a", "b"])
    config = SweepConfig(dataset=data, n=2, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "run", progress=False)
    manifest_path = tmp_path / "run" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["failures"] = [{"example_id": "a", "error": "its worker died (ActorDiedError)", "traceback": ""}]
    manifest_path.write_text(json.dumps(manifest))
    store = run_sweep(model, config, tmp_path / "run", progress=False)
    assert store.n_done == 2 and not store.failures
    assert json.loads(manifest_path.read_text())["failures"] == []


def test_a_run_where_every_example_fails_says_why(model, tmp_path):
    long = jsonl(tmp_path / "d.jsonl", ["a"])
    text = Path(long.removeprefix("jsonl:")).read_text().replace("Mira Tessk was born", "x " * 3000)
    Path(long.removeprefix("jsonl:")).write_text(text)
    with pytest.raises(wb.WorkbenchError, match="every example failed.*longer than the model's maximum"):
        run_sweep(model, SweepConfig(dataset=long, n=1, diagnose=DIAGNOSE), tmp_path / "run", progress=False)


def test_manifests_of_the_first_version_read_as_schema_2(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({
        "kind": "curve", "schema_version": 1, "model": {"name": "m"}, "args": {"tokens": 64},
        "versions": {}, "started": "2026-11-29T00:00:00+00:00", "ended": "2026-11-29T00:01:00+00:00",
        "seconds": 60.0, "status": "complete", "prompts": [], "protocol": {}}))
    manifest = read_manifest(tmp_path, kind="curve")
    assert manifest["schema_version"] == 2 and manifest["start"].startswith("2026-11-29")
    assert manifest["end"] and manifest["details"]["upgraded_from_schema"] == 1 and "protocol" in manifest["details"]
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(wb.WorkbenchError, match="not a JSON object"):
        read_manifest(tmp_path)


# ----------------------------------------------------------------------------- the model's weights (issue 29.3)

def save_llama(folder: Path, seed: int) -> Path:
    """A tiny Llama saved into `folder`, over whatever weights it held (the same file names)."""
    tiny = tiny_model("llama", seed=seed)
    tiny.hf.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVWB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def interrupted_at(example_id: str, monkeypatch):
    """Make the sweep stop (as a kill would) when it reaches `example_id`."""
    from workbench.experiments import sweep

    real = sweep.diagnose

    def diagnose(model, example, *args, **kwargs):
        if example.id == example_id:
            raise KeyboardInterrupt
        return real(model, example, *args, **kwargs)
    monkeypatch.setattr(sweep, "diagnose", diagnose)


def test_a_resume_refuses_weights_overwritten_in_place(tmp_path, private_cache, monkeypatch):
    # The fingerprint listed the weight files' names: a resume mixed two models' answers and ended
    # `complete` (issue 29.3).
    folder = save_llama(tmp_path / "m", seed=0)
    config = SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ["a", "b"]), n=2, diagnose=DIAGNOSE)
    with monkeypatch.context() as patch:
        interrupted_at("b", patch)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(wb.load_model(str(folder)), config, tmp_path / "run", progress=False)
    assert load_sweep(tmp_path / "run").example_ids == ["a"]
    save_llama(folder, seed=1)  # the same names, other weights
    with pytest.raises(wb.WorkbenchError, match="model.weights_sha256.model.safetensors: '[0-9a-f]{64}' in the run"):
        run_sweep(wb.load_model(str(folder)), config, tmp_path / "run", progress=False)
    assert load_sweep(tmp_path / "run").example_ids == ["a"]


def test_a_run_fingerprinted_by_an_earlier_version_resumes_and_records_the_weights_hash(tmp_path, private_cache):
    folder = save_llama(tmp_path / "m", seed=0)
    config = SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=DIAGNOSE)
    run_sweep(wb.load_model(str(folder)), config, tmp_path / "run", progress=False)
    path = tmp_path / "run" / "manifest.json"
    old = json.loads(path.read_text())
    digest = old["model"]["fingerprint"].pop("weights_sha256")
    old.pop("schema")
    path.write_text(json.dumps(old))  # as the version before the content hash wrote it
    run_sweep(wb.load_model(str(folder)), config, tmp_path / "run", progress=False)
    resumed = json.loads(path.read_text())
    assert resumed["model"]["fingerprint"]["weights_sha256"] == digest and resumed["schema"] == "kvwb-run"
    save_llama(folder, seed=1)
    with pytest.raises(wb.WorkbenchError, match="weights_sha256"):
        run_sweep(wb.load_model(str(folder)), config, tmp_path / "run", progress=False)


def test_weight_digests_are_computed_once_per_file_version(tmp_path, monkeypatch):
    from workbench import weights

    folder = save_llama(tmp_path / "m", seed=0)
    files, cache = [folder / "model.safetensors"], tmp_path / "digests.json"
    first = weights.weights_sha256(files, cache)
    assert first == {"model.safetensors": weights.tensors_sha256(files[0])}
    with monkeypatch.context() as patch:
        patch.setattr(weights, "tensors_sha256", lambda path: pytest.fail("an untouched file was hashed again"))
        assert weights.weights_sha256(files, cache) == first
    save_llama(folder, seed=1)
    assert weights.weights_sha256(files, cache) != first
    files[0].write_bytes(files[0].read_bytes()[:100])
    with pytest.raises(wb.WorkbenchError, match="model.safetensors is"):
        weights.weights_sha256(files, cache)


def test_a_killed_sweep_reads_stopped_with_its_progress(tmp_path):
    """A manifest left "running" by a killed writer: its status says so, with done of target."""
    import socket
    import subprocess
    import sys

    from workbench.runstore import STOPPED, inspect_folder, write_manifest

    folder = tmp_path / "run"
    (folder / "diagnoses" / "a").mkdir(parents=True)
    (folder / "diagnoses" / "a" / "diagnosis.json").write_text("{}")
    write_manifest(folder, new_manifest("sweep", None, {"dataset": "synthetic", "n": 4}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (folder / ".lock").write_text(f"process {int(gone.stdout)} on {socket.gethostname()}")
    run = inspect_folder(folder)
    assert run.status == STOPPED and (run.n_done(), run.n_target()) == (1, 4)
    (folder / ".lock").write_text(f"process {os.getpid()} on {socket.gethostname()}")
    assert inspect_folder(folder).status == "running"  # this process is alive
    (folder / ".lock").write_text("process 1 on another-host")
    assert inspect_folder(folder).status == "running"  # another host's process: not checkable here
    assert finished(new_manifest("curve", None, {}), seconds=98.59604503000003)["seconds"] == 98.6
