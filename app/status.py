"""The status area at the top of the sidebar, on every page: the work pending on the model (this
session's Live run, the demo run, other sessions' runs in line) and the errors of this session,
kept until the user dismisses them (a page that moves on never loses one).

    status.status_area()                                           # Home.py, before the page runs
    status.report_error("Could not load the model: ...", trace)   # from any page: shown at once, kept
"""

from __future__ import annotations

import threading
import time

import streamlit as st

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


def pending() -> list[str]:
    """The work on the model now, in words: who holds it, who waits, in order."""
    gate = state.model_gate()
    mine = st.session_state.get("live_job")
    return [f"{'running' if job is gate.holder else 'waiting'}: {'(this session) ' if job is mine else ''}"
            f"{job.describe()}" for job in gate.ahead_of(None)]


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
    _run.slot, _run.box = st.container(), None
    for line in pending():
        _box().caption(plain(line))
    for error in st.session_state.get(ERRORS, []):
        _show(error)
