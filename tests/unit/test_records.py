"""docs/records/keep.py: a sweep's record kept in git restores into a run that summarises as the
original did and resumes without recomputing an example (tiny model, seconds)."""

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import tiny_model
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import load_sweep

KEEP = Path(__file__).parents[2] / "docs" / "records" / "keep.py"
DIAGNOSE = DiagnoseConfig(selectors=("none", "full", "random"), budgets=(0.5,), max_new_tokens=3, attribution=False)


def keep_module():
    spec = importlib.util.spec_from_file_location("keep", KEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def test_a_kept_record_restores_summarises_alike_and_resumes_without_recomputing(model, tmp_path):
    keep = keep_module()
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "passages": ["Ada is coached by Ben.", "Ben was born in Oslo."],
                                        "question": "Where was the coach born?", "answers": ["Oslo"]}) + "\n"
                            for i in range(3)))
    config = SweepConfig(dataset=f"jsonl:{data}", n=3, diagnose=DIAGNOSE)
    run_sweep(model, config, tmp_path / "runs" / "study", progress=False)
    original = load_sweep(tmp_path / "runs" / "study")

    records = tmp_path / "records"
    kept = keep.save(tmp_path / "runs" / "study", records)
    source = tmp_path / "runs" / "study" / "diagnoses" / "q0"
    assert sorted(p.name for p in (kept / "diagnoses" / "q0").iterdir()) == sorted(
        ["diagnosis.json", "outcomes.parquet", *(f for f in keep.KEPT_WHERE_PRESENT if (source / f).is_file())])
    with pytest.raises(SystemExit, match="exists"):
        keep.restore("study", records, tmp_path / "runs")

    restored_at = keep.restore("study", records, tmp_path / "elsewhere")
    restored = load_sweep(restored_at)
    assert restored.example_ids == original.example_ids
    pd.testing.assert_frame_equal(restored.outcomes, original.outcomes)

    saved = {p: p.stat().st_mtime_ns for p in (restored_at / "diagnoses").rglob("*")}
    store = run_sweep(model, config, restored_at, progress=False)  # the run's own command resumes it
    assert store.n_done == 3
    assert {p: p.stat().st_mtime_ns for p in (restored_at / "diagnoses").rglob("*")} == saved


@pytest.fixture(scope="module")
def study(model, tmp_path_factory):
    """A finished three-example sweep at runs/study, and one of other arguments at other/study."""
    root = tmp_path_factory.mktemp("keep")
    data = root / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "passages": ["Ada is coached by Ben.", "Ben was born in Oslo."],
                                        "question": "Where was the coach born?", "answers": ["Oslo"]}) + "\n"
                            for i in range(3)))
    run_sweep(model, SweepConfig(dataset=f"jsonl:{data}", n=3, diagnose=DIAGNOSE), root / "runs" / "study",
              progress=False)
    run_sweep(model, SweepConfig(dataset=f"jsonl:{data}", n=2, diagnose=DIAGNOSE), root / "other" / "study",
              progress=False)
    return root


def test_a_runs_preregistration_is_kept_and_restored_and_a_different_one_refused(study, tmp_path):
    keep = keep_module()
    run, records = study / "runs" / "study", tmp_path / "records"
    pre = run / keep.PREREGISTRATION
    pre.write_text('{"families": {"A": {"A1": "full:none@0.5"}}}')
    try:
        keep.save(run, records)
        assert (records / "study" / keep.PREREGISTRATION).read_bytes() == pre.read_bytes()
        restored = keep.restore("study", records, tmp_path / "runs")
        assert (restored / keep.PREREGISTRATION).read_bytes() == pre.read_bytes()
        pre.write_text('{"families": {"A": {"A1": "random:none@0.5"}}}')
        with pytest.raises(SystemExit, match="written once"):
            keep.save(run, records)
        assert "full:none" in (records / "study" / keep.PREREGISTRATION).read_text()  # left as it was
    finally:
        pre.unlink()


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_a_save_of_no_run_writes_nothing_and_a_save_from_inside_a_run_keeps_it_under_its_name(study, tmp_path,
                                                                                             monkeypatch):
    keep = keep_module()
    records = tmp_path / "records"
    (tmp_path / "plain").mkdir()
    for source, says in ((tmp_path / "missing", "is not a run folder: it does not exist"),
                         (tmp_path / "plain", "manifest")):
        with pytest.raises(SystemExit, match=says):
            keep.save(source, records)
    assert _tree(records) == []
    monkeypatch.chdir(study / "runs" / "study")
    kept = keep.save(Path("."), records)
    assert kept == records / "study" and sorted(p.name for p in records.iterdir()) == ["study"]
    assert sorted(p.name for p in (kept / "diagnoses").iterdir()) == ["q0", "q1", "q2"]


def test_a_save_over_the_record_of_another_run_is_refused_and_leaves_it_as_it_was(study, tmp_path):
    keep = keep_module()
    records = tmp_path / "records"
    keep.save(study / "other" / "study", records)
    before = {p: p.read_bytes() for p in (records / "study").rglob("*") if p.is_file()}
    with pytest.raises(SystemExit, match="another run"):
        keep.save(study / "runs" / "study", records)
    assert {p: p.read_bytes() for p in (records / "study").rglob("*") if p.is_file()} == before
    keep.save(study / "other" / "study", records)  # the same run again: what is kept stays


@pytest.mark.parametrize("name", ["../records/study", ".", "..", "a/b", ""])
def test_a_restore_takes_only_a_plain_name(study, tmp_path, name):
    keep = keep_module()
    records = tmp_path / "records" / "inner"
    keep.save(study / "runs" / "study", records)
    with pytest.raises(SystemExit, match="plain record name"):
        keep.restore(name, records, tmp_path / "runs")
    assert _tree(tmp_path / "runs") == []


def test_a_restore_of_a_truncated_manifest_leaves_nothing_and_a_truncated_example_is_named(study, tmp_path):
    keep = keep_module()
    records = tmp_path / "records"
    kept = keep.save(study / "runs" / "study", records)
    manifest = (kept / "manifest.json").read_bytes()
    (kept / "manifest.json").write_bytes(manifest[: len(manifest) // 2])
    with pytest.raises(SystemExit, match="corrupt"):
        keep.restore("study", records, tmp_path / "runs")
    assert _tree(tmp_path / "runs") == []
    (kept / "manifest.json").write_bytes(manifest)
    doc = (kept / "diagnoses" / "q1" / "diagnosis.json").read_bytes()
    (kept / "diagnoses" / "q1" / "diagnosis.json").write_bytes(doc[:100])
    with pytest.raises(SystemExit, match=r"1 example\(s\) .* unreadable .*q1"):
        keep.restore("study", records, tmp_path / "runs")
    assert list(load_sweep(tmp_path / "runs" / "study").example_ids) == ["q0", "q2"]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["study"]  # no temporary left


def test_a_committed_record_still_restores(tmp_path):
    keep = keep_module()
    name = "study-ruler-mk512-smollm2"
    restored = keep.restore(name, runs=tmp_path)
    assert len(load_sweep(restored).example_ids) == 200 and [p.name for p in tmp_path.iterdir()] == [name]
