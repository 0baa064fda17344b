"""One writer per run folder: an advisory lock held while a run writes.

The lock is `fcntl.flock` on `RUN/.lock`, which the kernel releases when its process dies,
so a killed run never leaves a stale lock; the file records the holder's process id and
host for the message a second writer gets.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import WorkbenchError

LOCK = ".lock"


@contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """Hold the folder's lock for the block; refuse at once if another process holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
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
