"""The check every `--out` passes before any model work: what may be written where, and what
may be replaced.

A folder output may be new, an empty folder, a run of the same kind to resume, or, with
`--force`, a run of the same kind the workbench wrote (`kinds.run_kind`: a manifest with the
workbench's marker, not just a file named manifest.json). Anything else is refused with a
message naming what was found; so is an output inside another run's folder, at any depth.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.runstore.kinds import DIAGNOSIS_FILE, run_kind
from workbench.runstore.lock import LOCK
from workbench.runstore.manifest import MANIFEST


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def check_writable_parent(out: Path) -> None:
    """Raise unless the folders above `out` exist or can be created, and can be written."""
    existing = _nearest_existing(out.parent)
    if not existing.is_dir():
        raise WorkbenchError(f"cannot write {out}: {existing} is a file, not a folder")
    try:
        probe = Path(tempfile.mkdtemp(prefix=".kvwb-probe-", dir=existing))
    except OSError as err:
        raise WorkbenchError(f"cannot write {out}: {existing} is not writable ({err.strerror or err})") from None
    shutil.rmtree(probe, ignore_errors=True)


def enclosing_run(path: Path) -> Path | None:
    """The outermost folder above `path` (not `path` itself) that holds a run, or None."""
    runs = [parent for parent in Path(path).expanduser().resolve().parents if run_kind(parent) is not None]
    return runs[-1] if runs else None


def _not_ours(out: Path) -> str:
    """Why `out` is not the workbench's, naming the file found."""
    for name in (MANIFEST, DIAGNOSIS_FILE):
        if (out / name).is_file():
            return (f"{out} holds {out / name}, which the workbench did not write (it has no 'kvwb-run' marker and "
                    f"run kind); the folder will not be replaced: choose another --out")
    return (f"{out} holds files the workbench did not write (no manifest.json or diagnosis.json); it will not "
            f"be replaced: choose another --out")


def check_out(out: str | Path, *, kind: str | None = None, force: bool = False, resume: bool = False,
              file_suffixes: tuple[str, ...] = (), option: str = "--out") -> Path:
    """Check an output path before any work starts; returns it as a Path.

    A folder output (`file_suffixes` empty) may be new, an empty folder, a run to resume
    (`resume=True`: a run of `kind`, or a folder holding only a run's lock, is accepted as it is;
    `run_lock` then refuses it while another process writes) or, with `force`, a run of `kind`
    the workbench wrote (`kind` None: of any kind). A folder of anything else is never replaced.
    A file output must end in one of `file_suffixes` and exists only with `force`. No output
    may lie inside another run's folder. `option` names the option in the messages (`--csv`).
    """
    if out is None or not str(out).strip():
        raise WorkbenchError(f"give an output path ({option})")
    out = Path(out).expanduser()
    host = enclosing_run(out)
    if host is not None:
        raise WorkbenchError(f"{out} is inside the {run_kind(host)} run {host}; writing there would mix into that "
                             f"run: choose an {option} outside it")
    if file_suffixes:
        if out.suffix.lower() not in file_suffixes:
            raise WorkbenchError(f"{out}: the format follows the suffix; use {' or '.join(file_suffixes)}, "
                                 f"not {out.suffix or 'no suffix'!r}")
        if out.is_dir():
            raise WorkbenchError(f"{out} is a folder; give a file name ending in {' or '.join(file_suffixes)}")
        if out.exists() and not force:
            raise WorkbenchError(f"{out} exists; pass --force to replace it")
    elif out.exists():
        if not out.is_dir():
            raise WorkbenchError(f"{out} exists and is a file, not a folder; choose another --out")
        entries = [p.name for p in out.iterdir()]
        if entries and not (resume and entries == [LOCK]):  # a lone lock: a run that stopped before writing
            found = run_kind(out)
            if found is None:
                raise WorkbenchError(_not_ours(out))
            if kind is not None and found != kind:
                marker = out / (MANIFEST if (out / MANIFEST).is_file() else DIAGNOSIS_FILE)
                rule = "; --force replaces only a run of the same kind" if force else ""
                raise WorkbenchError(f"{out} holds a {found!r} run, not a {kind!r} run ({marker}){rule}: choose "
                                     f"another --out")
            if not (force or resume):
                raise WorkbenchError(f"{out} exists; pass --force to replace it, or choose another --out")
    check_writable_parent(out)
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise WorkbenchError(f"cannot write into {out}: permission denied")
    return out
