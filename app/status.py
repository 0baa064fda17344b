"""The status area at the top of the sidebar, on every page: the work pending on the model (this
session's Live run, the demo run, other sessions' runs in line) and the errors of this session,
kept until the user dismisses them (a page that moves on never loses one).

    status.status_area()                                           # Home.py, before the page runs
    status.report_error("Could not load the model: ...", trace)   # from any page: shown at once, kept
"""

from __future__ import annotations

import itertools
import threading
import time

import streamlit as st

import jobs
import state
from widgets import plain

ERRORS = "kvwb_errors"  # session key: [{"id", "text", "trace", "when"}], oldest first
_run = threading.local()  # this script run's status box (a page's script runs on one thread)


def report_error(text: str, trace: str | None = None, once: str | None = None) -> None:
    """Keep an error (plain text) in the status area until it is dismissed, and show it there now; a
    text already shown is not added again, nor one whose `once` key this session has reported
    before (a page that says the same error on every rerun reports it once)."""
    errors = st.session_state.setdefault(ERRORS, [])
    seen = st.session_state.setdefault(f"{ERRORS}_once", set())
    if any(e["text"] == text for e in errors) or (once is not None and once in seen):
        return
    if once is not None:
        seen.add(once)
    number = max((e["id"] for e in errors), default=0) + 1
    errors.append({"id": number, "text": text, "trace": trace, "when": time.strftime("%H:%M:%S")})
    if getattr(_run, "slot", None) is not None:
        _show(errors[-1])


def dismiss(number: int) -> None:
    st.session_state[ERRORS] = [e for e in st.session_state.get(ERRORS, []) if e["id"] != number]


_sessions = itertools.count(1)  # the process's browser sessions, numbered as they first draw a page
_numbering = threading.Lock()


def session_label() -> str:
    """This browser session's name in the status lines ("session 2"), the same on every page."""
    if "kvwb_session" not in st.session_state:
        with _numbering:
            st.session_state["kvwb_session"] = f"session {next(_sessions)}"
    return st.session_state["kvwb_session"]


def pending_lines(gate: jobs.ModelGate, me: str) -> list[str]:
    """The work on `gate` now, in words, as session `me` reads it: who holds the model and who waits,
    in order, each job's stage and time, and whose it is (this session's, or which other one's)."""
    out = []
    for job in gate.ahead_of(None):
        whose = "" if not job.owner else " (this session)" if job.owner == me else \
            f" ({job.owner}, another browser session)"
        words = job.describe().replace(f" of {job.owner}", "", 1) if job.owner else job.describe()
        out.append(f"{'running' if job is gate.holder else 'waiting'}{whose}: {words}")
    return out


def pending() -> list[str]:
    """The work on the model now, in words (`pending_lines` for this session)."""
    return pending_lines(state.model_gate(), session_label())


def _pending_box() -> None:
    """The pending work, redrawn every second while there is any; once it is all done, the whole page
    again (the result it waited for, no stale line)."""
    lines = pending()
    if not lines:
        st.rerun()
    with st.container(border=True):
        st.markdown("**Status**")
        for line in lines:
            st.caption(plain(line))


def _box():
    """The status box of this run, made (bordered, with its heading) on first use."""
    if _run.box is None:
        _run.box = _run.slot.container(border=True)
        _run.box.markdown("**Status**")
    return _run.box


def _show(error: dict) -> None:
    box = _box()
    box.error(f"{error['when']}: {plain(error['text'])}")
    if error.get("trace"):
        with box.expander("Details"):
            st.code(error["trace"])
    box.button("Dismiss", key=f"status_dismiss_{error['id']}", on_click=dismiss, args=(error["id"],))


def status_area() -> None:
    """A bordered box of the pending work and the kept errors, drawn where it is called (before the
    page, so that a page that stops early still has it); errors the page reports join it."""
    session_label()
    if pending():
        st.fragment(run_every=1.0)(_pending_box)()
    _run.slot, _run.box = st.container(), None
    for error in st.session_state.get(ERRORS, []):
        _show(error)
