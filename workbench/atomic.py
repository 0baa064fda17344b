"""Atomic writes: a file or a whole folder appears complete or not at all.

Every file and folder the workbench writes goes through here: it is built under a temporary
name beside its target (same file system, so the final rename is atomic) and renamed into
place only once complete. A crash, a full disk or Ctrl-C leaves the target as it was, plus
at most a hidden `.NAME-*` temporary that listings skip (`is_temporary`).

    with atomic_folder(Path("runs/x")) as tmp:      # build the folder's content in tmp
        (tmp / "a.json").write_text("{}")
    write_json(Path("runs/x/manifest.json"), {...})   # one file
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd


def is_temporary(path: Path) -> bool:
    """A hidden name: the temporaries of this module (and dotfiles) that listings skip."""
    return path.name.startswith(".")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _usual_mode(path: str | Path, folder: bool) -> None:
    """mkstemp/mkdtemp create 0600/0700; give the result the permissions a plain write would."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


def write_bytes(path: Path, data: bytes, make_folders: bool = False) -> None:
    """Write `data` to `path` atomically (temporary file in the same folder, fsync, rename).
    `make_folders`: make the folders above it first (a file output the output check accepted; a
    run's own files never, so a run folder removed mid-run is not silently made again)."""
    path = Path(path)
    if make_folders:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _usual_mode(tmp, folder=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: Path, text: str, make_folders: bool = False) -> None:
    """Write UTF-8 text atomically (`make_folders` as in `write_bytes`)."""
    write_bytes(path, text.encode("utf-8"), make_folders)


def json_safe(value):
    """A JSON-safe copy: numpy/pandas scalars to Python, NaN/inf/NA to None, tuples and arrays to
    lists, mapping keys to str, anything else (a path) to its str. The one cleaner every strict
    JSON document (the report, a pipeline request) goes through."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        return [json_safe(v) for v in value]
    if value is pd.NA or value is pd.NaT:
        return None
    return str(value)


def dumps(data) -> str:
    """The workbench's JSON style: indented, non-JSON values (paths, numpy scalars) as strings."""
    return json.dumps(data, indent=2, default=str) + "\n"


def write_json(path: Path, data) -> None:
    """Write a JSON document atomically."""
    write_text(path, dumps(data))


def write_parquet(path: Path, table: pd.DataFrame) -> None:
    """Write a parquet table atomically."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        table.to_parquet(tmp, index=False)
        _usual_mode(tmp, folder=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def atomic_folder(out: Path, guard: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of `out` to fill; on a clean exit it replaces `out`.

    An existing `out` is moved aside and deleted only after the new folder is in place; on an
    exception the temporary folder is removed and `out` is untouched. Whether `out` may be
    replaced at all is the caller's decision (see `workbench.runstore.out`). `guard`, when given,
    is called before anything is made and again just before the rename: it raises to stop the
    write (a Ray worker whose driver no longer holds the run's lock), leaving nothing behind.
    """
    out = Path(out)
    if guard is not None:
        guard()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    old = None
    try:
        yield tmp
        _usual_mode(tmp, folder=True)
        if guard is not None:
            guard()
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.rename(out, old / out.name)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def write_folder(out: Path, files: dict[str, object], tables: dict[str, pd.DataFrame],
                 guard: Callable[[], None] | None = None) -> Path:
    """Write files (a str as UTF-8 text, anything else as a JSON document) and parquet tables
    (`NAME.parquet`) as one folder, atomically: the one folder writer (`guard`: `atomic_folder`'s)."""
    with atomic_folder(out, guard) as tmp:
        for name, data in files.items():
            (tmp / name).write_text(data if isinstance(data, str) else dumps(data), encoding="utf-8")
        for name, table in tables.items():
            table.to_parquet(tmp / f"{name}.parquet", index=False)
    return Path(out)
