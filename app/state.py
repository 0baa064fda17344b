"""The app's narrow backend: settings, user plugins, the model (loaded once per process) and
cached readers of run folders. Pages ask this module for data; they never read files.

Environment:
    KVWB_RUNS     runs directory (default `runs`; the sidebar can change it)
    KVWB_MODEL    model spec for Live and the demo run (default `smollm2-135m`; `gemma3-270m` or a
                  local HF folder work too; the sidebar can change it)
    KVWB_LIVE_MAX_TOKENS   longest context the Live page diagnoses (default 4096; the model's own
                  maximum applies too)
    KVWB_PLUGINS  comma-separated modules (`mypkg.signals`) or files (`~/kv/toy.py`) imported at
                  start-up, so that the selectors and signals they register appear in the app
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import streamlit as st
from streamlit import config as st_config

import workbench.app_api as wb
from jobs import ModelGate
from workbench.app_api import MANIFEST, CurveRun, Diagnosis, FidelityRun, PipelineRun, RunFolder, SweepRun

RUNS_ENV, MODEL_ENV, LIVE_MAX_ENV = "KVWB_RUNS", "KVWB_MODEL", "KVWB_LIVE_MAX_TOKENS"
POST_SCRIPT_GC = "runner.postScriptGC"  # Streamlit's full garbage collection after every script run
DEFAULT_MODEL = "smollm2-135m"
# The quick selector list: what Live starts with and what the demo run computes.
QUICK_SELECTORS = ("none", "full", "random", "cacheblend", "densedev", "cadence-grad", "bcr:grow")


# ----------------------------------------------------------------------------- settings

def model_spec() -> str:
    """The sidebar's model field, first taken from $KVWB_MODEL (default `smollm2-135m`)."""
    if "model_spec" not in st.session_state:
        st.session_state["model_spec"] = os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL
    return str(st.session_state["model_spec"]).strip() or DEFAULT_MODEL


def live_max_tokens() -> int:
    try:
        return max(16, int(os.environ.get(LIVE_MAX_ENV, "4096")))
    except ValueError:
        return 4096


def runs_root() -> Path:
    """The runs directory: the sidebar's value, first taken from $KVWB_RUNS (default `runs`)."""
    if "runs_dir" not in st.session_state:
        st.session_state["runs_dir"] = os.environ.get(RUNS_ENV, "").strip() or "runs"
    return Path(str(st.session_state["runs_dir"]).strip() or "runs").expanduser()


def quick_selectors() -> list[str]:
    """QUICK_SELECTORS that are registered (in this order)."""
    found = []
    for spec in QUICK_SELECTORS:
        try:
            found.append(wb.parse_selector(spec).label)
        except wb.WorkbenchError:
            continue
    return found


def keep_redraws_light() -> bool:
    """Turn off Streamlit's full garbage collection after every script run (`runner.postScriptGC`)
    unless the user set it; True when this call turned it off. While a job runs, the status box and
    Live's progress redraw every second, and each redraw's `gc.collect(2)` over this process (torch,
    the model, pandas) holds the GIL for up to hundreds of ms on a busy machine: the job thread, whose
    every torch op gives the GIL back and asks for it again, ran Live's diagnosis ~10x slower than a
    plain script (docs/BENCHMARKS.md, "Live in the app"). Python's own generational collection stays."""
    if st_config.get_where_defined(POST_SCRIPT_GC) != "<default>":  # the user's config file or flag
        return False
    st_config.set_option(POST_SCRIPT_GC, False, "kvwb app (app/state.py: keep_redraws_light)")
    return True


keep_redraws_light()  # once per process, on its first script run (before that run ends)


# ----------------------------------------------------------------------------- plugins

def load_plugins() -> list[str]:
    """Import every plugin named in $KVWB_PLUGINS (the CLI's loader, `workbench.registry.load_plugins`);
    the failures, in words."""
    return wb.load_plugins()


# ----------------------------------------------------------------------------- the model

@st.cache_resource(show_spinner="Loading the model (once per process)...")
def load_model(spec: str) -> wb.LoadedModel:
    return wb.load_model(spec)


def get_model() -> wb.LoadedModel:
    return load_model(model_spec())


@st.cache_resource
def model_gate() -> ModelGate:
    """One job at a time on the model, in the order asked (forward hooks of one diagnosis must
    not see another's forwards); shared by every session of the process."""
    return ModelGate()


# ----------------------------------------------------------------------------- run folders

def _stamp(*paths: Path) -> tuple:
    """File modification times: cache keys that change when a run grows."""
    out = []
    for p in paths:
        try:
            out.append(p.stat().st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


def _sweep_stamp(folder: Path) -> tuple:
    return _stamp(*(folder / n for n in (MANIFEST, "examples.parquet", "outcomes.parquet")))


def scan_runs(kinds: tuple[str, ...] | None = None) -> list[RunFolder]:
    """The run folders under the runs directory (of `kinds`, when given)."""
    return wb.list_runs(runs_root(), kinds)


@st.cache_data(show_spinner="Reading the run...", max_entries=16)
def _sweep(path: str, stamp: tuple) -> SweepRun:
    return wb.open_run(path, "sweep")


def read_sweep(folder: Path) -> SweepRun:
    return _sweep(str(folder), _sweep_stamp(folder))


@st.cache_data(show_spinner="Summarizing...", max_entries=16)
def _summary(path: str, stamp: tuple, reference: str | None, measure: str) -> pd.DataFrame:
    return wb.summarize(_sweep(path, stamp), reference, measure=measure)


def run_summary(folder: Path, reference: str | None, measure: str = "em") -> pd.DataFrame:
    """`summarize(run, reference, measure)` of a sweep (None: no reference comparison; `measure`:
    the gap's and the tests' measure, em or retrieved)."""
    return _summary(str(folder), _sweep_stamp(folder), reference, measure)


@st.cache_data(show_spinner="Reading the evidence...", max_entries=8)
def _evidence(path: str, stamp: tuple):
    return wb.evidence_tables(_sweep(path, stamp))


def run_evidence(folder: Path):
    """(ranking, attention) of a sweep's evidence readings (`evidence_tables`; empty without them)."""
    return _evidence(str(folder), _sweep_stamp(folder))


@st.cache_data(show_spinner="Reading the whole answers...", max_entries=8)
def _first_lines(path: str, stamp: tuple):
    return wb.first_line_table(_sweep(path, stamp))


def run_first_lines(folder: Path):
    """A whole-answer sweep's `first_line_table` (what each answer names beyond its first line)."""
    return _first_lines(str(folder), _sweep_stamp(folder))


@st.cache_data(show_spinner="Tracing the answers' words...", max_entries=8)
def _answer_sources(path: str, stamp: tuple):
    return wb.answer_sources_table(_sweep(path, stamp))


def run_answer_sources(folder: Path):
    """A sweep's `answer_sources_table` (where its answers' words come from; empty without evidence)."""
    return _answer_sources(str(folder), _sweep_stamp(folder))


@st.cache_data(show_spinner="Reading the curve...", max_entries=8)
def _curve(path: str, stamp: tuple) -> CurveRun:
    return wb.open_run(path, "curve")


def read_curve(folder: Path) -> CurveRun:
    return _curve(str(folder), _stamp(*(folder / n for n in (MANIFEST, "curve.parquet", "summary.parquet"))))


@st.cache_data(show_spinner="Reading the pipeline run...", max_entries=8)
def _pipeline(path: str, stamp: tuple) -> PipelineRun:
    return wb.open_run(path, "pipeline")


def read_pipeline(folder: Path) -> PipelineRun:
    """A pipeline run, re-read when its tables change (it may still be running)."""
    return _pipeline(str(folder), _stamp(folder / MANIFEST, folder / "requests.parquet",
                                         folder / "calls.parquet"))


@st.cache_data(show_spinner="Reading the fidelity run...", max_entries=8)
def _fidelity(path: str, stamp: tuple) -> FidelityRun:
    return wb.open_run(path, "fidelity")


def read_fidelity(folder: Path) -> FidelityRun:
    return _fidelity(str(folder), _stamp(folder / MANIFEST, *sorted(folder.glob("*.parquet"))))


@st.cache_data(show_spinner="Reading the diagnosis...", max_entries=32)
def _diagnosis(path: str, stamp: tuple) -> Diagnosis:
    return wb.open_run(path, "diagnosis")


def read_diagnosis(folder: Path) -> Diagnosis:
    return _diagnosis(str(folder), _stamp(folder / "diagnosis.json", *sorted(folder.glob("*.parquet"))))


def run_examples(run: RunFolder) -> tuple[list[str], dict[str, str], dict[str, Path]]:
    """(example ids, questions by id, diagnosis folders by id) of a sweep or a diagnosis run."""
    if run.kind == "diagnosis":
        d = read_diagnosis(run.path)
        return [d.example_id], {d.example_id: d.example.question}, {d.example_id: run.path}
    sweep = read_sweep(run.path)
    ids = sweep.example_ids
    questions = dict(zip(ids, sweep.examples["question"].astype(str)))
    return ids, questions, {i: sweep.diagnosis_folder(i) for i in ids}


@st.cache_data(show_spinner="Testing the contrasts...", max_entries=16)
def _contrasts(path: str, stamp: tuple, families: str, measure: str) -> pd.DataFrame:
    return wb.family_table(_sweep(path, stamp), json.loads(families), measure)


def run_contrasts(folder: Path, families: dict, measure: str) -> pd.DataFrame:
    """`family_table` of a sweep: each family's contrasts on `measure`, Holm within each family."""
    return _contrasts(str(folder), _sweep_stamp(folder), json.dumps(families), measure)


@st.cache_data(show_spinner="Finding the examples behind it...", max_entries=32)
def _behind(path: str, stamp: tuple, text: str, measure: str, k: int):
    return wb.examples_behind(_sweep(path, stamp), text, measure, k)


def run_behind(folder: Path, text: str, measure: str, k: int):
    """`examples_behind` of a sweep: contrast `text`'s differing examples on `measure`, a sample of k."""
    return _behind(str(folder), _sweep_stamp(folder), text, measure, k)
