"""The demo run: a small sweep computed on a background thread from the Runs page, with its
progress (one job per process; the model lock keeps it and Live apart)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

import state
from widgets import plain
from workbench import runstore
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, run_sweep

NAME = "demo"


def demo_config() -> SweepConfig:
    """Six synthetic examples, the quick selectors, two budgets."""
    return SweepConfig(dataset="synthetic", n=6,
                       diagnose=DiagnoseConfig(selectors=tuple(state.quick_selectors()), budgets=(0.1, 0.3),
                                               max_new_tokens=12, attribution=False))


@dataclass
class DemoJob:
    """The background sweep behind "Compute demo run"."""

    out: Path | None = None
    n: int = 0
    thread: threading.Thread | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def done(self) -> int:
        folder = runstore.inspect_folder(self.out) if self.out is not None and self.out.is_dir() else None
        return folder.n_done() if folder is not None and folder.kind == "sweep" else 0


@st.cache_resource
def demo_job() -> DemoJob:
    return DemoJob()


def start_demo(root: Path, config: SweepConfig) -> DemoJob:
    """Start the demo sweep into `root/demo` on a background thread (no-op while one runs)."""
    job = demo_job()
    if job.running:
        return job
    out = runstore.check_out(root / NAME, kind="sweep", resume=True)  # before the model loads
    model = state.get_model()  # loaded in the script thread, where st.cache_resource has its context
    job.out, job.n, job.error, job.started, job.finished = out, config.n, None, time.time(), None

    def work() -> None:
        try:
            with state.model_lock():
                run_sweep(model, config, out, progress=False)
        except Exception as err:  # noqa: BLE001 - shown on the Runs page
            job.error = f"{type(err).__name__}: {err}"
        finally:
            job.finished = time.time()

    job.thread = threading.Thread(target=work, name="kvwb-demo-run", daemon=True)
    job.thread.start()
    return job


def demo_panel() -> None:
    """The "Compute demo run" button and its progress (polled by a fragment while it runs)."""
    root = state.runs_root()
    job = demo_job()
    config = demo_config()
    selectors, budgets = ",".join(config.diagnose.selectors), ",".join(f"{b:g}" for b in config.diagnose.budgets)
    st.markdown(f"**Demo run**: {config.n} synthetic examples, selectors {plain(', '.join(config.diagnose.selectors))}, "
                f"budgets {plain(budgets)} on {plain(state.model_spec())}, into {plain(root / NAME)} (several "
                f"minutes on a CPU; the same as `kvwb run --n {config.n} --selectors {selectors} --budgets "
                f"{budgets} --max-new-tokens {config.diagnose.max_new_tokens} --out runs/{NAME}`).")
    if st.button("Compute demo run", key="demo_start", disabled=job.running, type="primary"):
        try:
            start_demo(root, config)
        except WorkbenchError as err:
            st.error(f"Could not start the demo run: {plain(err)}")
    if job.running:  # poll only while a run is in flight
        st.fragment(run_every=1.0)(_progress)()
    else:
        _progress()


def _progress() -> None:
    job = demo_job()
    if job.out is None:
        return
    done = job.done()
    if job.running:
        st.progress(min(1.0, done / max(1, job.n)),
                    text=f"Demo run: {done} of {job.n} examples diagnosed ({time.time() - job.started:.0f} s)")
        st.session_state["demo_seen_running"] = True
        return
    if job.error:
        st.error(f"The demo run stopped: {plain(job.error)}")
    else:
        st.success(f"Demo run finished: {done} examples in {plain(job.out)} "
                   f"({(job.finished or time.time()) - (job.started or 0):.0f} s). Pick it in the pages.")
    if st.session_state.pop("demo_seen_running", False):
        st.rerun()  # refresh the whole page: the run list now holds the demo run
