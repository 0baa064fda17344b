"""Work on the model off the page's script thread: a `Job` per task (a Live diagnosis, the demo
run) and the `ModelGate` that lets one job at a time use the model, in the order they asked.

A widget change stops and reruns a page's script; a job on its own thread is not part of that
run, so it is never discarded: the page shows its progress with a polling fragment and its
result when it is done, or that it was cancelled (only its Cancel button does that). A job that
finds the model busy waits in line, and its page says truly who holds the model.

Plain Python (no Streamlit): the app keeps one gate per process (`state.model_gate`).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.app_api import WorkbenchError

ACTIVE = ("waiting", "running")


class Cancelled(Exception):
    """Raised inside a job's work when its Cancel was pressed (at its next progress report)."""


@dataclass(eq=False)
class Job:
    """One piece of model work: its state, progress, result or error."""

    title: str  # what other sessions read: "a Live diagnosis of example 5"
    owner: str = ""  # the browser session that started it ("session 2"; see status.session_label)
    state: str = "new"  # new, waiting, running, done, failed, cancelled
    share: float = 0.0  # progress, 0..1
    text: str = ""  # what it is doing now
    detail: Callable[[], str] | None = None  # progress read from elsewhere (the demo's folder)
    result: Any = None
    error: str | None = None
    trace: str | None = None
    asked: float = field(default_factory=time.time)  # when it was started
    began: float | None = None  # when it got the model
    finished: float | None = None
    cancel_requested: bool = False
    thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def seconds(self) -> float:
        """Seconds it has held the model (so far, or in all)."""
        return ((self.finished or time.time()) - self.began) if self.began else 0.0

    def progress(self, share: float, text: str) -> None:
        """Report progress from the work; raises `Cancelled` once Cancel was pressed."""
        if self.cancel_requested:
            raise Cancelled
        self.share, self.text = min(1.0, max(0.0, share)), text

    def describe(self) -> str:
        """The job as another page tells it: title, whose, progress, how long it has run (or waited)."""
        doing = self.detail() if self.detail is not None else self.text
        if self.began is not None:
            since = f"running for {time.time() - self.began:.0f} s"
        else:
            since = f"asked {time.time() - self.asked:.0f} s ago"
        whose = f" of {self.owner}" if self.owner else ""
        return f"{self.title}{whose} ({doing + ', ' if doing else ''}{since})"


class ModelGate:
    """One job at a time on the model, first come first served."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.holder: Job | None = None
        self.line: list[Job] = []  # jobs waiting, in the order they asked

    def acquire(self, job: Job) -> None:
        """Wait for the model (raises `Cancelled` if the job is cancelled while it waits)."""
        with self._cond:
            self.line.append(job)
            try:
                while self.holder is not None or self.line[0] is not job:
                    if job.cancel_requested:
                        raise Cancelled
                    self._cond.wait(timeout=0.2)
            except BaseException:
                self.line.remove(job)
                self._cond.notify_all()
                raise
            self.line.pop(0)
            self.holder = job

    def release(self, job: Job) -> None:
        with self._cond:
            if self.holder is job:
                self.holder = None
            self._cond.notify_all()

    def ahead_of(self, job: Job) -> list[Job]:
        """The jobs that get the model before `job`: the holder, then those ahead in line."""
        with self._cond:
            line = self.line[:self.line.index(job)] if job in self.line else list(self.line)
            return ([self.holder] if self.holder is not None and self.holder is not job else []) + line

    def busy_text(self, job: Job) -> str:
        """A true sentence about who holds the model while `job` waits."""
        ahead = self.ahead_of(job)
        if not ahead:
            return "The model is free: this run starts now."
        text = f"The model is busy with {ahead[0].describe()}"
        if len(ahead) > 1:
            text += f"; then, before this run: {', '.join(j.title for j in ahead[1:])}"
        return text + ". This run starts as soon as the model is free (it waits; nothing is lost)."


def start(job: Job, gate: ModelGate, work: Callable[[Job], Any]) -> Job:
    """Run `work(job)` on a thread once the gate gives it the model; the outcome lands on `job`."""
    job.state = "waiting"

    def target() -> None:
        try:
            gate.acquire(job)
        except Cancelled:
            job.state, job.finished = "cancelled", time.time()
            return
        job.state, job.began = "running", time.time()
        try:
            job.result = work(job)
            job.state = "done"
        except Cancelled:
            job.state = "cancelled"
        except WorkbenchError as err:
            job.state, job.error = "failed", str(err)
        except Exception as err:  # noqa: BLE001 - shown on the page, the details folded away
            job.state, job.error, job.trace = "failed", f"{type(err).__name__}: {err}", traceback.format_exc()
        finally:
            job.finished = time.time()
            gate.release(job)

    job.thread = threading.Thread(target=target, name=f"kvwb-job-{job.title[:40]}", daemon=True)
    job.thread.start()
    return job
