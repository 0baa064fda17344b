"""One writer per run folder: an advisory lock held while a run writes.

The lock is `fcntl.flock` on `RUN/.lock`, which the kernel releases when its process dies,
so a killed run never leaves a stale lock; the file records the holder's process id and
host for the message a second writer gets, and for `writer_state`: whether the process a
"running" manifest's lock names still exists (a killed run leaves its name behind).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import WorkbenchError

LOCK = ".lock"
_HOLDER = re.compile(r"process (\d+) on (.+)")


@contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """Hold the folder's lock for the block; refuse at once if another process holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:  # never through a symlink: the writer truncates its lock, and would truncate what it points to
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        why = "is a symbolic link" if (folder / LOCK).is_symlink() else f"cannot be opened ({err.strerror or err})"
        raise WorkbenchError(f"{folder / LOCK} {why}; the run's lock must be a plain file: remove it and run "
                             f"again") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise WorkbenchError(f"{folder} is being written by {holder}; wait for it to finish or stop it, "
                                 f"then run again (it resumes)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_holder(folder: Path) -> tuple[int, str] | None:
    """(process id, host) that `folder`'s lock names, or None when it names none (no writer
    since, or the last one finished and cleared it)."""
    try:
        text = (Path(folder) / LOCK).read_text(errors="replace").strip()
    except OSError:
        return None
    found = _HOLDER.fullmatch(text)
    return (int(found.group(1)), found.group(2)) if found else None


def writer_state(folder: Path) -> str:
    """Of the writer a run folder's lock names: "alive", "gone" (a process of this host that no
    longer exists), "elsewhere" (another host: not checkable here) or "none" (no name)."""
    holder = lock_holder(folder)
    return "none" if holder is None else process_state(*holder)


def process_state(pid: int, host: str) -> str:
    """Of process `pid` on `host`: "alive", "gone" (a process of this host that no longer exists)
    or "elsewhere" (another host: not checkable here)."""
    if host != socket.gethostname():
        return "elsewhere"
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return "gone"
    except PermissionError:  # it exists, under another user
        return "alive"
    return "alive"
