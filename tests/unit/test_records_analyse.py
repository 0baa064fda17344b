"""docs/records/analyse-10.12.sh prints every reading 10.12's study pre-registered (the families, the
em contrasts at b = 0.2, amendment 1's B3 on contains, the test across settings) on a run that reached
its n, and refuses a partial run unless told; its contrasts are the ones `kvwb summary` prints for
the same arguments. Two tiny runs stand in for the study and the second setting."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli.main import main as kvwb
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "records" / "analyse-10.12.sh"
FIXTURE = ROOT / "tests" / "fixtures" / "sample.jsonl"
FAMILIES = {"A": {"A1": "cadence-grad:cacheblend@auc"},
            "B": {"B1": "prophetkv:cadence-grad@auc", "B3": "relaxkv:prophetkv@auc"}}


def _sweep(model, out: Path, dataset: str) -> Path:
    config = SweepConfig(dataset=dataset, n=3, diagnose=DiagnoseConfig(
        selectors=("none", "full", "cacheblend", "cadence-grad", "prophetkv", "relaxkv"), budgets=(0.2, 0.5),
        max_new_tokens=4))
    run_sweep(model, config, out, progress=False)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("analyse")
    study = _sweep(tiny_llama, root / "study", f"jsonl:{FIXTURE}")
    other = _sweep(tiny_llama, root / "other", "synthetic")  # the second setting: other examples
    (study / "preregistration.json").write_text(json.dumps({"source": "a test", "measure": "retrieved",
                                                            "families": FAMILIES}))
    return study, other


def _analyse(study: Path, other: Path, **env) -> subprocess.CompletedProcess:
    kvwb = f"{sys.executable} -m workbench.cli"
    return subprocess.run(["bash", str(SCRIPT), str(study), str(other)], capture_output=True, text=True,
                          env={**os.environ, "KVWB": kvwb, "PY": sys.executable, **env}, timeout=600)


def _kvwb_contrasts(*args: str, headers: bool = False) -> list[str]:
    """The contrast rows `kvwb summary` itself prints for these arguments (with `headers`, also the
    across table's header, which names the two runs)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kvwb(["summary", *args]) == 0
    return [line for line in out.getvalue().splitlines() if line.startswith("| ") and (" vs " in line or (headers and "A - B in" in line))]


def test_every_reading_in_its_order_with_kvwbs_own_numbers(runs):
    study, other = runs
    done = _analyse(study, other)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    heads = [out.index(f"## {k}.") for k in (1, 2, 3, 4)]
    assert heads == sorted(heads)
    assert "PARTIAL" not in out
    assert "Family A (A1), pre-registered (a test); on retrieved" in out
    primary = _kvwb_contrasts(str(study), "--measure", "retrieved", "--preregistered")
    assert len(primary) == 3 and all(row in out[:heads[1]] for row in primary)  # the families, kvwb's own rows
    assert "Family B (B1, B3), pre-registered (a test); on retrieved" in out
    assert "Behind cadence-grad vs cacheblend at auc over 0.2-0.5 on retrieved" in out[:heads[1]]  # ten to read
    assert "Behind relaxkv vs prophetkv at 0.2 on em" in out[heads[1]:heads[2]]
    em_rows = _kvwb_contrasts(str(study), "--measure", "em", "--contrast", "cadence-grad:cacheblend@0.2",
                              "--contrast", "prophetkv:cadence-grad@0.2", "--contrast", "relaxkv:prophetkv@0.2")
    assert len(em_rows) == 3 and all(row in out[heads[1]:heads[2]] for row in em_rows)  # the families at 0.2
    contains_rows = _kvwb_contrasts(str(study), "--measure", "contains", "--contrast", "relaxkv:prophetkv@auc")
    assert contains_rows and all(row in out[heads[2]:heads[3]] for row in contains_rows)
    across = _kvwb_contrasts(str(study), "--measure", "retrieved", "--contrast", "cadence-grad:cacheblend@auc",
                             "--against", str(other), headers=True)
    assert any(f"A - B in {other.name}" in row for row in across)
    assert all(row in out[heads[3]:] for row in across)  # A1 here, then A1 here against there


def test_a_run_short_of_its_n_is_refused_unless_partial(runs, tmp_path):
    study, other = runs
    manifest = json.loads((study / "manifest.json").read_text())
    short = tmp_path / "short"
    subprocess.run(["cp", "-r", str(study), str(short)], check=True)
    (short / "manifest.json").write_text(json.dumps({**manifest, "args": {**manifest["args"], "n": 200}}))
    refused = _analyse(short, other)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "holds 3 of its 200 examples" in refused.stderr
    partial = _analyse(short, other, PARTIAL="1", KVWB="echo kvwb")  # the commands it would run, printed
    assert partial.returncode == 0, partial.stderr
    lines = partial.stdout.splitlines()
    assert "(PARTIAL: 3 of 200 examples)" in lines[0]
    assert f"kvwb summary {short} --measure retrieved --preregistered --read 10" in lines
