"""Small runs of every kind on a tiny random Llama, for the app's tests: a sweep (3 examples),
a unit-of-choice curve, a fidelity probe, one saved diagnosis and two pipelines, plus the model
saved to a folder so the app loads it by path through $KVWB_MODEL. `build_more_runs` adds what
the browser review found wanting: a one-budget sweep, a ten-selector five-budget sweep, a
pipeline with every method, a Gemma diagnosis, and a sweep whose writer was killed."""

from __future__ import annotations

from pathlib import Path

import torch

from conftest import small_example, tiny_model
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.experiments.fidelity import run_fidelity
from workbench.experiments.pipeline_run import DEFAULT_METHODS, PipelineConfig, run_pipeline
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.experiments.unit_curve import run_curve
from workbench.models import model_identity
from workbench.runstore import write_diagnosis_run
from workbench.tasks import Example

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "sample.jsonl"
SELECTORS = ("none", "full", "random", "cacheblend", "densedev", "bcr:single")
BUDGETS = (0.2, 0.5)


def config(selectors=SELECTORS, budgets=BUDGETS) -> DiagnoseConfig:
    return DiagnoseConfig(selectors=tuple(selectors), budgets=tuple(budgets), max_new_tokens=4, attribution=False)


def save_model(base: Path):
    """The tiny model, also saved to base/model; returns (model, folder)."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    folder = base / "model"
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return model, folder


def save_diagnosis(model, example: Example, out: Path, selectors=("none", "full", "random", "densedev")) -> Path:
    """One example diagnosed and written as a run folder of kind "diagnosis"."""
    d = diagnose(model, example, config(selectors), progress=False)
    return write_diagnosis_run(out, d, model_identity(model))


def build_runs(base: Path) -> dict:
    """base/model and base/runs/{tiny (sweep), curve, fid (fidelity), one (diagnosis), pipe and pipe-rep (pipelines)}."""
    model, folder = save_model(base)
    runs = base / "runs"
    run_sweep(model, SweepConfig(dataset=f"jsonl:{SAMPLE}", n=3, diagnose=config()), runs / "tiny", progress=False)
    run_curve(model, runs / "curve", tokens=96, prompts=2, units=(1, 8, 32), budget=0.25, seeds=2, progress=False)
    run_fidelity(model, runs / "fid", n=3, cosines=(0.99, 0.9), alphas=(0, 0.5, 1), bank_ranks=(1, 2),
                 bank_alphas=(0.5, 1), bank_size=3, pool_sizes=(1, 2), proj_cos=(0.95,), max_new_tokens=3,
                 progress=False)
    save_diagnosis(model, small_example(), runs / "one")
    run_pipeline(model, PipelineConfig(agents=3, n=6, methods=("chat-template", "token-matched", "kvcomm",
                                                               "kvcomm-always"), max_new_tokens=3),
                 runs / "pipe", progress=False)
    run_pipeline(model, PipelineConfig(agents=2, n=8, methods=("token-matched", "kvcomm-always"), max_new_tokens=2,
                                       repair_on="kvcomm-always"), runs / "pipe-rep", progress=False)
    return {"base": base, "model": folder, "runs": runs, "tiny_model": model}


WIDE_SELECTORS = ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad", "bcr",
                  "bcr:grow", "bcr:single", "qattn", "epic", "prophetkv", "relaxkv",
                  "coin:bcr")  # the sixteen of RESULTS 10.4's study: fourteen that are not references
WIDE_BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.5)


def build_more_runs(world: dict) -> dict:
    """runs/{one-budget, wide (sweeps), pipe-all (every method), gemma (a diagnosis), killed (a sweep
    whose manifest says running while its lock names a process that is gone)}."""
    model, runs = world["tiny_model"], world["runs"]
    data = f"jsonl:{SAMPLE}"
    run_sweep(model, SweepConfig(dataset=data, n=3, diagnose=config(budgets=(0.2,))), runs / "one-budget", progress=False)
    run_sweep(model, SweepConfig(dataset=data, n=3, diagnose=config(WIDE_SELECTORS, WIDE_BUDGETS)), runs / "wide",
              progress=False)
    run_pipeline(model, PipelineConfig(agents=3, n=4, methods=DEFAULT_METHODS, max_new_tokens=2), runs / "pipe-all",
                 progress=False)
    save_diagnosis(tiny_model("gemma3_text"), small_example(), runs / "gemma")
    kill_writer(runs / "tiny", runs / "killed")
    return world


def kill_writer(source: Path, out: Path) -> int:
    """A copy of the sweep `source` as a killed writer leaves it: manifest "running" with a target
    of 5 examples, one example folder gone, and a lock naming a process that has exited."""
    import json
    import shutil
    import socket
    import subprocess
    import sys

    shutil.copytree(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(status="running", end=None)
    manifest["args"]["n"] = 5
    (out / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(sorted((out / "diagnoses").iterdir())[-1])
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)
    (out / ".lock").write_text(f"process {pid} on {socket.gethostname()}")
    return pid


def old_unit_curve_figure():
    """The Unit-of-choice figure as the first version drew it: "not matched" notes at x = 64 and
    256 on a log axis, which plotly reads as 10^64 and 10^256, so the axis stretches to 10^256
    and the data (units 1 to 256) squeeze into its left edge. Axis checks must catch it."""
    import plotly.graph_objects as go

    units, informed, random = [1, 16, 64, 256], [0.08, 0.12, 0.2, 0.3], [0.2, 0.22, 0.25, 0.31]
    fig = go.Figure()
    for name, values, color in (("informed (draft attention)", informed, "#1f77b4"),
                                ("random (mean over seeds)", random, "#ff7f0e")):
        fig.add_trace(go.Scatter(x=units, y=values, name=name, mode="lines+markers", line={"color": color}))
    fig.add_hline(y=0.35, line_dash="dash", line_color="gray", annotation_text="unrepaired 0.3500")
    for unit, y, share in ((64, 0.25, 0.31), (256, 0.31, 0.5)):
        fig.add_annotation(x=unit, y=y, text=f"{share:.0%} rows<br>not matched", showarrow=True, ax=0, ay=-35)
    fig.update_xaxes(type="log", tickvals=units, ticktext=[str(u) for u in units])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(title="Value of choosing by unit of choice (open markers: not budget-matched)")
    return fig
