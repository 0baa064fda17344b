"""docs/records/resume-10.12w.sh (10.12w's amendment 1): it starts 10.12w only on the CPU model that the
first record's manifest names for all of its examples; elsewhere it says why and starts nothing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.runstore.environment import environment

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "docs" / "records" / "resume-10.12w.sh"


def _checkout(tmp_path: Path, cpus: list[str]) -> Path:
    """A checkout in small: the script, this .venv, and a first record whose
    segments name `cpus`."""
    (tmp_path / "docs" / "records" / "study-10.12-mv1024-smollm2").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "docs" / "records" / SCRIPT.name)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # this environment's python and packages
    segments = [{"environment": {"device": {"cpu": cpu, "gpu": None}}, "examples": [str(i)]} for i, cpu in enumerate(cpus)]
    (tmp_path / "docs" / "records" / "study-10.12-mv1024-smollm2" / "manifest.json").write_text(
        json.dumps({"segments": segments}))
    return tmp_path


def _run(checkout: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", str(checkout / "docs" / "records" / SCRIPT.name)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_another_cpu_is_refused_and_nothing_starts(tmp_path):
    checkout = _checkout(tmp_path, ["Not this machine's CPU"])
    done = _run(checkout)
    assert done.returncode == 1 and "the first record's 'Not this machine's CPU'" in done.stderr
    assert f"this machine's CPU is '{environment()['device']['cpu']}'" in done.stderr
    assert not (checkout / "runs").exists()  # nothing started, nothing written


def test_a_first_record_of_several_cpus_is_refused(tmp_path):
    done = _run(_checkout(tmp_path, ["A", "B"]))
    assert done.returncode != 0 and "several CPUs" in done.stderr
