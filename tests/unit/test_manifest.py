"""The typed manifest: what the writer writes reads back field for field; manifests of the
first schema and those written before the marker read too; a malformed one is one line naming
the file (no model, milliseconds)."""

import json

import pytest

from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError
from workbench.runstore import (
    MANIFEST, Manifest, finished, load_manifest, new_manifest, read_manifest, scan_runs, write_manifest,
)
from workbench.runstore.manifest import KEYS

MODEL = {"name": "tiny", "dtype": "float32", "fingerprint": {"config_sha256": "abc", "weights_sha256": "def"}}
CONFIG = DiagnoseConfig.of(selectors=("none", "random", "bcr:grow"), budgets=(0.1, 0.3), seed=7).to_dict()
SWEEP_ARGS = {"dataset": "synthetic", "n": 3, "diagnose": CONFIG}


def written(folder, manifest: dict) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, manifest)
    return json.loads((folder / MANIFEST).read_text())


def test_what_the_writer_writes_reads_back_field_for_field(tmp_path):
    manifest = new_manifest("sweep", MODEL, SWEEP_ARGS)
    manifest["failures"] = [{"example_id": "q2", "error": "RuntimeError: boom", "traceback": "..."}]
    manifest = finished(manifest, "interrupted", seconds=12.345678, n_done=2)
    on_disk = written(tmp_path / "run", manifest)
    typed = load_manifest(tmp_path / "run", kind="sweep")
    for key in KEYS:
        assert getattr(typed, key) == (tuple(on_disk[key]) if key == "failures" else on_disk[key]), key
    assert typed.to_dict() == on_disk and list(typed.to_dict()) == list(on_disk)
    before = (tmp_path / "run" / MANIFEST).read_bytes()
    write_manifest(tmp_path / "run", typed.to_dict())  # the typed manifest writes the same bytes back
    assert (tmp_path / "run" / MANIFEST).read_bytes() == before
    assert (typed.model_name, typed.fingerprint, typed.dataset, typed.n) == ("tiny", MODEL["fingerprint"], "synthetic", 3)
    assert typed.selectors == ("none", "random", "bcr:grow") and typed.budgets == (0.1, 0.3) and typed.seed == 7
    assert typed.failures_by_id["q2"]["error"] == "RuntimeError: boom" and not typed.is_complete
    assert typed.seconds == 12.35 and typed.details == {"n_done": 2}


def test_accessors_of_other_kinds(tmp_path):
    written(tmp_path / "d", finished(new_manifest("diagnosis", MODEL, {"example_id": "x", "config": CONFIG})))
    diagnosis = load_manifest(tmp_path / "d")
    assert diagnosis.is_complete and diagnosis.selectors == ("none", "random", "bcr:grow") and diagnosis.n is None
    written(tmp_path / "p", new_manifest("pipeline", MODEL, {"n": True, "methods": ["dense", "kvcomm"]}))
    pipeline = load_manifest(tmp_path / "p")
    assert pipeline.methods == ("dense", "kvcomm") and pipeline.n is None  # a bool is no count
    assert pipeline.selectors == () and pipeline.dataset is None
    written(tmp_path / "r", new_manifest("report", None, {"source": "runs/x"}))
    report = load_manifest(tmp_path / "r")
    assert report.model is None and report.model_name is None and report.fingerprint is None


def test_a_manifest_written_before_the_marker_reads(tmp_path):
    before_marker = {k: v for k, v in finished(new_manifest("curve", MODEL, {"units": [1, 16]})).items()
                     if k != "schema"}
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / MANIFEST).write_text(json.dumps(before_marker))
    typed = load_manifest(tmp_path / "v2", kind="curve")
    assert typed.schema == "kvwb-run" and typed.to_dict() == {"schema": "kvwb-run", **before_marker}
    assert [run.manifest for run in scan_runs(tmp_path)] == [typed]


def test_a_first_version_manifest_reads_as_schema_2(tmp_path):
    old = {"kind": "fidelity", "status": "complete", "model": MODEL, "args": {"n": 4}, "versions": {"torch": "2"},
           "started": "2025-01-01T00:00:00+00:00", "ended": "2025-01-01T00:01:00+00:00", "git": "abc123",
           "seconds": {"total": 60.0, "setup": 5.0, "per_example": 13.75}, "n_examples": 4}
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / MANIFEST).write_text(json.dumps(old))
    typed = load_manifest(tmp_path / "v1", kind="fidelity")
    assert (typed.schema, typed.schema_version, typed.kind, typed.status) == ("kvwb-run", 2, "fidelity", "complete")
    assert (typed.start, typed.end, typed.git_revision, typed.seconds) == (old["started"], old["ended"], "abc123", 60.0)
    assert typed.details == {"n_examples": 4, "seconds": old["seconds"], "upgraded_from_schema": 1}
    assert typed.failures == () and typed.n == 4 and typed.to_dict() == read_manifest(tmp_path / "v1")


@pytest.mark.parametrize("key, value, held", [
    ("args", ["a", "list"], "list"), ("status", None, "NoneType"), ("failures", ["boom"], "list"),
    ("seconds", "slow", "str"), ("model", "tiny", "str"), ("details", None, "NoneType"), ("seconds", True, "bool"),
])
def test_a_malformed_manifest_is_one_line_naming_the_file(tmp_path, key, value, held):
    manifest = {**new_manifest("sweep", MODEL, SWEEP_ARGS), key: value}
    written(tmp_path / "bad", manifest)
    with pytest.raises(WorkbenchError) as caught:
        load_manifest(tmp_path / "bad")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'bad' / MANIFEST} is malformed: its {key!r} "
                                                      f"holds {held}")
    [run] = scan_runs(tmp_path)  # the Runs page lists it with the problem, not a traceback
    assert run.manifest is None and run.problems == [message]


@pytest.mark.parametrize("text, says", [("{not json", "is corrupt"), ("[1, 2]", "is not a JSON object")])
def test_an_unreadable_manifest_is_one_line_naming_the_file(tmp_path, text, says):
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(WorkbenchError, match=f"^{tmp_path / MANIFEST} {says}") as caught:
        load_manifest(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_missing_key_is_named(tmp_path):
    data = {k: v for k, v in new_manifest("sweep", MODEL, SWEEP_ARGS).items() if k != "details"}
    with pytest.raises(WorkbenchError, match="x/manifest.json is malformed: its 'details' holds nothing"):
        Manifest.from_dict(data, "x/manifest.json")
