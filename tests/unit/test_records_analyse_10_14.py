"""docs/records/analyse-10.14.sh prints every reading 10.14 pre-registered (evidence recall and
precision per selector and budget, each scorer's average precision, the question's attention on the
evidence per layer at b = 0.2) on a run that reached its n, and refuses a partial run unless told;
its numbers are `kvwb summary`'s and `attention_by_layer`'s own. A tiny run stands in for the study."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli.main import main as kvwb
from workbench.errors import WorkbenchError
from workbench.experiments.evidence import attention_by_layer, evidence_tables
from workbench.runstore import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "records" / "analyse-10.14.sh"


@pytest.fixture(scope="module")
def run(evidence_run) -> Path:
    """conftest's three examples: two with evidence in the context (one in the pool), one without."""
    return evidence_run


def _analyse(run: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(run)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KVWB": f"{sys.executable} -m workbench.cli", "PY": sys.executable, **env})


def _table_rows(text: str, after: str) -> list[str]:
    """The markdown rows (header and rule included) of the first table after the line starting `after`."""
    lines = text[text.index(after):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_every_reading_in_its_order_with_the_workbenchs_own_numbers(run):
    done = _analyse(run)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("## 1.") < out.index("## 2.") and "PARTIAL" not in out
    assert "are not 10.14 readings" in out and "none and full are the splice and dense again" in out
    own = io.StringIO()
    with contextlib.redirect_stdout(own):
        assert kvwb(["summary", str(run)]) == 0
    for heading in ("Evidence recall", "Evidence precision", "Average precision"):
        rows = _table_rows(own.getvalue(), heading)
        assert rows and _table_rows(out, heading) == rows  # kvwb summary's own table
    _, attention = evidence_tables(load_sweep(run))
    for mass in ("mass_mean", "mass_last"):
        table = attention_by_layer(attention, 0.2, mass)
        rows = _table_rows(out, f"### {mass}")
        assert rows[0].split("|")[1:-1] == [" layer ", " dense ", " spliced ", " cacheblend ", " random "]
        assert len(rows) == 2 + len(table)  # header, rule, one row a layer
        assert rows[2:] == ["| " + " | ".join([str(row.layer), *(f"{v:.4f}" for v in row[1:])]) + " |"
                            for row in table.itertuples(index=False)]  # every layer, every cache in its column
        assert table.iloc[-1, 1] != table.iloc[-1, 2]  # dense and the splice differ above layer 0
    assert "n = 2 examples with evidence in the context" in out


def test_a_partial_run_is_refused_unless_labelled(run, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(run, partial)
    manifest = json.loads((partial / "manifest.json").read_text())
    manifest["args"]["n"] = 94
    (partial / "manifest.json").write_text(json.dumps(manifest))
    refused = _analyse(partial)
    assert refused.returncode == 1 and "holds 3 of its 94 examples" in refused.stderr and refused.stdout == ""
    labelled = _analyse(partial, PARTIAL="1")
    assert labelled.returncode == 0 and "(PARTIAL: 3 of 94 examples)" in labelled.stdout


def test_attention_by_layer_is_the_attention_table_pivoted(run):
    _, attention = evidence_tables(load_sweep(run))
    table = attention_by_layer(attention, 0.5, "mass_last")
    assert list(table.columns) == ["layer", "dense", "spliced", "cacheblend", "random"]
    coin = attention[(attention["cell"] == "random") & (attention["budget"] == 0.5)].set_index("layer")
    assert table.set_index("layer")["random"].tolist() == coin["mass_last"].tolist()
    dense = attention[attention["cell"] == "dense"].set_index("layer")
    assert table.set_index("layer")["dense"].tolist() == dense["mass_last"].tolist()
    with pytest.raises(WorkbenchError, match="no repaired cell's attention at b = 0.3; the run's budgets: 0.2, 0.5"):
        attention_by_layer(attention, 0.3)
    with pytest.raises(WorkbenchError, match="mass is mass_mean or mass_last"):
        attention_by_layer(attention, 0.2, "mass")
