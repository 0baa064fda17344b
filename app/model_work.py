"""Model work asked for from a page on one diagnosed example: the model that ran it, and a call taken
through the one gate every session shares (`state.model_gate`), this session told who holds it."""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

import jobs
import state
import workbench.app_api as wb
from workbench.app_api import Diagnosis, Manifest


def model_spec_for(d: Diagnosis, manifest: Manifest | None, model_spec: str | None = None) -> str:
    """The model that ran `d`: an embedded model by name, else the folder it was loaded from."""
    if model_spec:
        return model_spec
    names = [manifest.model_name if manifest is not None else None, d.model.get("name"), d.model.get("source")]
    names = [str(n) for n in names if n]
    found = next((n for n in names if n in wb.model_choices() or Path(n).expanduser().is_dir()), None)
    return found or (names[0] if names else state.model_spec())


def gated(title: str, work, spinner: str = "Running the model on this example..."):
    """`work()` once the model is free (this session waits its turn, told who holds the model)."""
    job, gate = jobs.Job(title=title), state.model_gate()
    ahead = gate.ahead_of(job)
    with st.spinner(gate.busy_text(job) if ahead else spinner):
        gate.acquire(job)
        job.state, job.began = "running", time.time()
        try:
            return work()
        finally:
            gate.release(job)
