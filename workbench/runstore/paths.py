"""Paths of the run store: safe folder names for any example id, listings that skip
temporaries, and the check every `--out` passes before any model work.

An example id becomes a folder name by percent-encoding every byte outside
`[A-Za-z0-9_-]` (so `.`, `..`, `/` and spaces are escaped); a name longer than
`MAX_NAME` keeps a prefix and ends in `~` and a hash of the id (`~` never appears in an
encoded name, so the two forms cannot collide). An id with an upper-case letter also ends in
`~` and a hash, so that ids differing only in case (`A`, `a`) stay distinct on file systems that
ignore case (macOS, Windows). The real id is kept in the record.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from workbench.atomic import is_temporary
from workbench.errors import WorkbenchError
from workbench.runstore.lock import LOCK

MAX_NAME = 96
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# What marks a folder as one the workbench wrote (and may therefore replace with --force).
OWNED_MARKERS = ("manifest.json", "diagnosis.json")


def folder_name(example_id: str) -> str:
    """A file-system-safe, unique folder name for an example id (see the module docstring)."""
    text = str(example_id)
    encoded = "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in text)
    cased = any("A" <= ch <= "Z" for ch in text)
    if len(encoded) <= MAX_NAME and not cased:
        return encoded
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]
    return f"{encoded[:MAX_NAME - 21]}~{digest}"


def subfolders(parent: Path) -> list[Path]:
    """The folders directly under `parent`, by name, without hidden and temporary ones."""
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not is_temporary(p))


def owned(folder: Path) -> bool:
    """Whether `folder` was written by the workbench (it holds a manifest or a diagnosis)."""
    return any((folder / marker).is_file() for marker in OWNED_MARKERS)


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


def check_out(out: str | Path, *, force: bool = False, resume: bool = False, file_suffixes: tuple[str, ...] = ()) -> Path:
    """Check an output path before any work starts; returns it as a Path.

    A folder output (`file_suffixes` empty) may be new, an empty folder, a run to resume
    (`resume=True`: an owned folder, or one holding only a run's lock, is accepted as it is;
    `run_lock` then refuses it while another process writes) or, with `force`, a folder the
    workbench wrote. A folder of anything else is never replaced. A file output must end in
    one of `file_suffixes` and exists only with `force`.
    """
    if out is None or not str(out).strip():
        raise WorkbenchError("give an output path (--out)")
    out = Path(out).expanduser()
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
            if not owned(out):
                raise WorkbenchError(f"{out} holds files the workbench did not write (no manifest.json or "
                                     f"diagnosis.json); it will not be replaced: choose another --out")
            if not (force or resume):
                raise WorkbenchError(f"{out} exists; pass --force to replace it, or choose another --out")
    check_writable_parent(out)
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise WorkbenchError(f"cannot write into {out}: permission denied")
    return out
