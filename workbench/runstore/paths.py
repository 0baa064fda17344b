"""Paths of the run store: safe folder names for any example id, listings that skip
temporaries, and moving a damaged file or folder aside (the check every `--out` passes is
`runstore.out`).

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
import time
from pathlib import Path

from workbench.atomic import is_temporary

MAX_NAME = 96
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


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


def move_aside(path: Path) -> Path:
    """Rename a damaged file or folder to the hidden `.corrupt-NAME-TIME` beside it (listings skip
    it; nothing is deleted) and return the new path, so that it is recomputed."""
    path = Path(path)
    aside = path.with_name(f".corrupt-{path.name}-{int(time.time())}")
    os.rename(path, aside)
    return aside
