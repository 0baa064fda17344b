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
    assert sorted(p.name for p in (kept / "diagnoses" / "q0").iterdir()) == ["diagnosis.json", "outcomes.parquet"]
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
