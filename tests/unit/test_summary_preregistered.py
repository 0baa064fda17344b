"""`kvwb summary RUN --preregistered` tests the families of the run's preregistration.json, each
under Holm on its own, exactly as the same contrasts given with --contrast would be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli.main import main as kvwb
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"
FAMILIES = {"A": {"A1": "cacheblend:random@0.5", "A2": "full:none@0.5"}, "B": {"B1": "cacheblend:none@0.5"}}


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_llama) -> Path:
    out = tmp_path_factory.mktemp("runs") / "tiny"
    config = SweepConfig(dataset=f"jsonl:{FIXTURE}", n=3, diagnose=DiagnoseConfig(
        selectors=("none", "full", "random", "cacheblend"), budgets=(0.5,), max_new_tokens=4, attribution=False))
    run_sweep(tiny_llama, config, out, progress=False)
    return out


def _tables(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and " vs " in line]


def test_each_family_is_tested_under_its_own_holm_as_with_contrast(run, capsys):
    (run / "preregistration.json").write_text(json.dumps({"source": "a test", "measure": "flip",
                                                          "families": FAMILIES}))
    try:
        assert kvwb(["summary", str(run), "--preregistered"]) == 0
        out = capsys.readouterr().out
    finally:
        (run / "preregistration.json").unlink()
    assert "Family A (A1, A2), pre-registered (a test); on flip, Holm within the family" in out
    assert "Family B (B1)" in out
    rows = _tables(out)
    assert len(rows) == 3
    assert kvwb(["summary", str(run), "--measure", "flip", "--contrast", FAMILIES["A"]["A1"],
                 "--contrast", FAMILIES["A"]["A2"]]) == 0
    assert _tables(capsys.readouterr().out) == rows[:2]  # family A alone: the same rows, the same Holm


def test_no_file_or_both_ways_at_once_is_one_line(run, capsys):
    assert kvwb(["summary", str(run), "--preregistered"]) != 0
    assert "keeps no preregistration.json" in capsys.readouterr().err
    assert kvwb(["summary", str(run), "--preregistered", "--contrast", "cacheblend:none@0.5"]) != 0
    assert "give it without --contrast" in capsys.readouterr().err
