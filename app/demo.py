"""The demo run: a small sweep computed on a background thread from the Runs page, with its
progress (one job per process, on the model gate with Live's jobs: see `jobs`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

import jobs
import state
from jobs import Job
from status import report_error
from widgets import plain
from workbench.app_api import DiagnoseConfig, SweepConfig, WorkbenchError, check_out, inspect_run, run_sweep

NAME = "demo"


def demo_config() -> SweepConfig:
    """Six synthetic examples, the quick selectors, two budgets."""
    return SweepConfig(dataset="synthetic", n=6,
                       diagnose=DiagnoseConfig(selectors=tuple(state.quick_selectors()), budgets=(0.1, 0.3),
                                               max_new_tokens=12, attribution=False))


@dataclass(eq=False)
class DemoJob(Job):
    """The background sweep behind "Compute demo run" (a `jobs.Job` on the model gate)."""

    out: Path | None = None
    n: int = 0

    @property
    def running(self) -> bool:
        return self.active

    def done(self) -> int:
        folder = inspect_run(self.out) if self.out is not None and self.out.is_dir() else None
        return folder.n_done() if folder is not None and folder.kind == "sweep" else 0


@st.cache_resource
def _slot() -> list[DemoJob]:
    """The process's demo job, in a list so that a new one replaces the last."""
    return [DemoJob("the demo run", state="none")]


def demo_job() -> DemoJob:
    """The latest demo job of this process (state "none" before the first)."""
    return _slot()[0]


def start_demo(root: Path, config: SweepConfig) -> DemoJob:
    """Start the demo sweep into `root/demo` on a background thread (no-op while one runs)."""
    if demo_job().active:
        return demo_job()
    out = check_out(root / NAME, kind="sweep", resume=True)  # before the model loads
    model = state.get_model()  # loaded in the script thread, where st.cache_resource has its context
    job = DemoJob("the demo run", out=out, n=config.n)
    job.detail = lambda: f"{job.done()} of {job.n} examples done"
    _slot()[0] = job
    return jobs.start(job, state.model_gate(), lambda _: run_sweep(model, config, out, progress=False))


def demo_panel() -> None:
    """The "Compute demo run" button and its progress (polled by a fragment while it runs)."""
    root = state.runs_root()
    job = demo_job()
    config = demo_config()
    selectors, budgets = ",".join(config.diagnose.selectors), ",".join(f"{b:g}" for b in config.diagnose.budgets)
    st.markdown(f"**Demo run**: {config.n} synthetic examples, selectors {plain(', '.join(config.diagnose.selectors))}, "
                f"budgets {plain(budgets)} on {plain(state.model_spec())}, into {plain(root / NAME)} (several "
                f"minutes on a CPU; the same as `kvwb run --model {state.model_spec()} --n {config.n} --selectors "
                f"{selectors} --budgets {budgets} --max-new-tokens {config.diagnose.max_new_tokens} "
                f"--out {root / NAME}`).")
    if st.button("Compute demo run", key="demo_start", disabled=job.running, type="primary"):
        try:
            start_demo(root, config)
        except WorkbenchError as err:
            report_error(f"Could not start the demo run: {err}")
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
    if job.state == "waiting":
        st.info(plain(state.model_gate().busy_text(job)))
        st.session_state["demo_seen_running"] = True
        return
    if job.running:
        st.progress(min(1.0, done / max(1, job.n)),
                    text=f"Demo run: {done} of {job.n} examples diagnosed ({job.seconds:.0f} s)")
        st.session_state["demo_seen_running"] = True
        return
    if job.error:
        report_error(f"The demo run stopped: {job.error}", job.trace, once=f"demo-{id(job)}")
        st.error(f"The demo run stopped: {plain(job.error)}")
    else:
        st.success(f"Demo run finished: {done} examples in {plain(job.out)} "
                   f"({job.seconds:.0f} s). Pick it in the pages.")
    if st.session_state.pop("demo_seen_running", False):
        st.rerun()  # refresh the whole page: the run list now holds the demo run
