"""Run folders: a manifest plus parquet tables, written atomically so a killed run loses nothing.

Every command that writes a run (`kvwb run`, `kvwb curve`, `kvwb fidelity`) records
`manifest.json` with its kind, the model, its arguments, package versions, the git revision
and start/end times. Files are written to a temporary name and renamed into place.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError

MANIFEST = "manifest.json"
_PACKAGES = ("kv-repair-workbench", "torch", "transformers", "numpy", "pandas", "pyarrow", "scipy")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a result depends on."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_revision() -> str | None:
    """The workbench checkout's commit (with '+dirty' when it has changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temporary file in the same folder, then rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, default=str)
    os.replace(tmp, path)


def write_parquet(path: Path, table: pd.DataFrame) -> None:
    """Write a parquet table atomically."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    try:
        table.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_manifest(folder: Path, kind: str | None = None) -> dict:
    """The manifest of a run folder; a clear error if it is missing, corrupt or of another kind."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise WorkbenchError(f"{folder} is not a run folder: it has no {MANIFEST}")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise WorkbenchError(f"{path} is corrupt ({err}); remove the folder or pass a new --out") from None
    if kind is not None and manifest.get("kind") != kind:
        raise WorkbenchError(f"{folder} is a {manifest.get('kind')!r} run, not a {kind!r} run")
    return manifest


def write_folder(out: Path, json_files: dict[str, dict], tables: dict[str, pd.DataFrame]) -> Path:
    """Write JSON files and parquet tables as one folder: built in a temporary sibling, then
    renamed into place (an existing `out` is replaced only once the new one is complete)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    old = None
    try:
        for name, data in json_files.items():
            (tmp / name).write_text(json.dumps(data, indent=2, default=str))
        for name, table in tables.items():
            table.to_parquet(tmp / f"{name}.parquet", index=False)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.rename(out, old / out.name)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out
