"""Shared pieces of the app's pages: the runs directory, the model (loaded once per process),
cached readers of run folders, the background "demo run", exports and the per-example view.

Nothing here computes what `workbench` already computes: tables come from
`workbench.experiments` and `workbench.diagnosis`, figures from `workbench.plots`.

Environment:
    KVWB_RUNS    runs directory (default `runs`; the sidebar can change it)
    KVWB_MODEL   model spec for Live and the demo run (default `smollm2-135m`; a local HF folder works)
    KVWB_LIVE_MAX_TOKENS   longest context the Live page diagnoses (default 4096; the model's own
                 maximum applies too)
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import plotly.io as pio
import streamlit as st

import workbench as wb
from workbench import plots
from workbench.diagnosis import TABLES, Diagnosis
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, example_folder, run_sweep
from workbench.tasks import normalize_answer

RUNS_ENV, MODEL_ENV, LIVE_MAX_ENV = "KVWB_RUNS", "KVWB_MODEL", "KVWB_LIVE_MAX_TOKENS"
DEFAULT_MODEL = "smollm2-135m"

# Page files (relative to app/) and their URL paths; Home.py registers them with st.navigation.
PAGES = {
    "runs": ("views/runs.py", "Runs", ":material/folder_open:", "runs"),
    "explorer": ("views/explorer.py", "Example explorer", ":material/token:", "explorer"),
    "curves": ("views/curves.py", "Budget curves", ":material/show_chart:", "budget-curves"),
    "flips": ("views/flips.py", "Decision flips", ":material/swap_horiz:", "flips"),
    "unit": ("views/unit_curve.py", "Unit of choice", ":material/grid_view:", "unit-of-choice"),
    "fidelity": ("views/fidelity.py", "Fidelity vs consumability", ":material/compare:", "fidelity"),
    "live": ("views/live.py", "Live", ":material/bolt:", "live"),
}

# What each kind of run folder is made by, for the "how to get data" messages.
MAKE = {
    "sweep": "kvwb run --out runs/NAME` (e.g. `kvwb run --n 12 --out runs/first`",
    "curve": "kvwb curve --out runs/NAME` (e.g. `kvwb curve --tokens 512 --prompts 3 --out runs/curve`",
    "fidelity": "kvwb fidelity --out runs/NAME` (e.g. `kvwb fidelity --n 40 --out runs/fidelity`",
}

# Files and columns a folder of each kind must have for the pages (older versions lack some).
REQUIRED_FILES = {
    "sweep": ("examples.parquet", "outcomes.parquet", "diagnoses"),
    "curve": ("curve.parquet", "summary.parquet"),
    "diagnosis": tuple(f"{t}.parquet" for t in ("tokens", "token_signals", "deviation", "selections", "outcomes",
                                                 "residual")),
}
REQUIRED_COLUMNS = {
    "outcomes.parquet": ("example_id", "selector", "layout", "budget", "n_reused", "n_recomputed", "answer",
                         "flip", "flip_strict", "em", "f1", "dense_logprob"),
    "examples.parquet": ("example_id", "question", "dense_em", "spliced_em", "splice_flip"),
    "summary.parquet": ("unit", "informed_error", "random_error", "unrepaired_error", "budget_share"),
}

SIGNAL_LABELS = {
    "deviation": "KV deviation (splice vs dense) at a layer",
    "cadence_grad": "CADENCE-Grad (decision saliency)",
    "cadence": "gated CADENCE",
    "first_order": "first-order effect estimate (AtP)",
    "draft_attention": "draft attention (BCR)",
    "question_attention": "question attention",
    "patch_effect": "actual patch effect",
    "densedev": "exact deviation score (densedev)",
    "cacheblend": "CacheBlend check-layer value deviation",
    "relay": "RelayCaching score",
}
LAYER_SIGNAL_LABELS = {
    "grad_sq_k": "squared gradient, keys", "grad_sq_v": "squared gradient, values",
    "gated_k": "gated saliency, keys", "gated_v": "gated saliency, values",
    "draft_attention": "draft attention", "question_attention": "question attention",
}


# ----------------------------------------------------------------------------- settings

def model_spec() -> str:
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


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


def sidebar() -> None:
    """Widgets shared by every page (rendered by Home.py before the page runs)."""
    runs_root()
    st.sidebar.text_input("Runs directory", key="runs_dir",
                          help=f"Folder holding run folders (from ${RUNS_ENV}, default `runs`).")
    st.sidebar.caption(f"Model for Live and the demo run: `{model_spec()}` (set ${MODEL_ENV} to change)")
    if not _has_kaleido():
        st.sidebar.caption("Figures export as HTML; PNG export needs kaleido (`pip install kaleido`).")
    job = demo_job()
    if job.running:
        st.sidebar.caption(f"Demo run in progress: {job.done()} of {job.n} examples")


def how_to_get_data(kind: str = "sweep", root: Path | None = None) -> None:
    """The message pages show instead of an error when no run of a kind exists."""
    root = root or runs_root()
    what = {"sweep": "sweep runs", "curve": "unit-of-choice curve runs", "fidelity": "fidelity runs"}[kind]
    text = f"No {what} under `{root}` yet. Make one from a shell with `{MAKE[kind]}`)"
    if kind == "sweep":
        text += ", or press **Compute demo run** on the Runs page (several minutes on a CPU)"
    st.info(text + ". The **Live** page works without any run.")
    if kind == "sweep":
        st.page_link(PAGES["runs"][0], label="Runs page (compute demo run)", icon=":material/folder_open:")
    st.page_link(PAGES["live"][0], label="Live: diagnose an example now", icon=":material/bolt:")


# ----------------------------------------------------------------------------- model

@st.cache_resource(show_spinner="Loading the model (once per process)...")
def load_model(spec: str) -> wb.LoadedModel:
    return wb.load_model(spec)


def get_model() -> wb.LoadedModel:
    return load_model(model_spec())


@st.cache_resource
def model_lock() -> threading.Lock:
    """Held while the model runs: forward hooks of one diagnosis must not see another's forwards."""
    return threading.Lock()


# ----------------------------------------------------------------------------- run folders

@dataclass
class RunFolder:
    """One folder under the runs directory, with what it lacks for the pages."""

    name: str
    path: Path
    kind: str | None
    manifest: dict | None
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str((self.manifest or {}).get("status", "complete" if self.kind == "diagnosis" else "?"))

    @property
    def ok(self) -> bool:
        return not self.problems


def _parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def check_folder(path: Path, kind: str | None) -> list[str]:
    """What a run folder of `kind` lacks (files, columns), in words; empty when complete."""
    problems = []
    if kind not in REQUIRED_FILES:
        return problems
    make = MAKE.get(kind, "").split("`")[0]
    missing = [name for name in REQUIRED_FILES[kind] if not (path / name).exists()]
    if missing:
        problems.append(f"missing {', '.join(missing)}" + (f" (re-run `{make}` with the same arguments "
                                                           f"to finish it)" if make else ""))
    for name, needed in REQUIRED_COLUMNS.items():
        file = path / name
        if name in REQUIRED_FILES[kind] and file.is_file():
            try:
                have = set(_parquet_columns(file))
            except Exception as err:  # noqa: BLE001 - a corrupt file is a message, not a traceback
                problems.append(f"{name} is unreadable ({type(err).__name__}: {err})")
                continue
            lacking = [c for c in needed if c not in have]
            if lacking:
                problems.append(f"{name} lacks columns {', '.join(lacking)} (made by an older version? "
                                f"re-run it with this version)")
    return problems


def inspect_folder(path: Path) -> RunFolder | None:
    """A RunFolder for a run-like folder (manifest, saved Diagnosis, or parquet tables), else None."""
    manifest_path = path / "manifest.json"
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text())
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
        except (ValueError, OSError) as err:
            return RunFolder(path.name, path, None, None, [f"manifest.json is unreadable ({err})"])
        kind = manifest.get("kind")
        run = RunFolder(path.name, path, kind, manifest)
        if kind not in ("sweep", "curve", "fidelity"):
            run.problems.append(f"unknown run kind {kind!r} (this app reads sweep, curve and fidelity runs)")
        run.problems += check_folder(path, kind)
        return run
    if (path / "diagnosis.json").is_file():
        return RunFolder(path.name, path, "diagnosis", None, check_folder(path, "diagnosis"))
    if any(path.glob("*.parquet")) or (path / "diagnoses").is_dir():
        return RunFolder(path.name, path, None, None, ["missing manifest.json: not a complete run folder "
                                                       "(interrupted before it began, or not made by kvwb)"])
    return None


def scan_runs(root: Path) -> list[RunFolder]:
    """Run folders directly under `root`, by name."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            run = inspect_folder(path)
        except OSError as err:
            run = RunFolder(path.name, path, None, None, [f"unreadable: {err}"])
        if run is not None:
            found.append(run)
    return found


def runs_table(runs: list[RunFolder]) -> pd.DataFrame:
    rows = []
    for r in runs:
        m = r.manifest or {}
        args = m.get("args") or {}
        rows.append({
            "run": r.name, "kind": r.kind or "?", "status": r.status,
            "model": (m.get("model") or {}).get("name", ""),
            "dataset": args.get("dataset", ""),
            "examples done": n_done(r) if r.kind == "sweep" else None,
            "failures": len(m.get("failures") or []),
            "start": m.get("start") or m.get("started") or "", "end": m.get("end") or m.get("ended") or "",
            "problems": "; ".join(r.problems),
        })
    return pd.DataFrame(rows)


def n_done(run: RunFolder) -> int:
    return sum(1 for _ in (run.path / "diagnoses").glob("*/diagnosis.json")) if run.kind == "sweep" else 0


def pick_run(runs: list[RunFolder], key: str, label: str = "Run") -> RunFolder:
    """A select box of runs; the choice is shared between pages (session key `kvwb_run`)."""
    names = [r.name for r in runs]
    asked = st.query_params.get("run")  # deep link: /explorer?run=NAME&example=ID&budget=0.2
    if key not in st.session_state and asked in names:
        st.session_state[key] = asked
    if st.session_state.get(key) not in names:
        current = st.session_state.get("kvwb_run")
        st.session_state[key] = current if current in names else names[0]
    name = st.selectbox(label, names, key=key, format_func=lambda n: _run_label(runs, n))
    st.session_state["kvwb_run"] = name
    return runs[names.index(name)]


def _run_label(runs: list[RunFolder], name: str) -> str:
    run = next(r for r in runs if r.name == name)
    bits = [run.kind or "?", run.status]
    if run.problems:
        bits.append("incomplete")
    return f"{name} ({', '.join(bits)})"


def show_problems(run: RunFolder) -> None:
    for problem in run.problems:
        st.warning(f"`{run.path}`: {problem}. Showing what is there.")


def _stamp(*paths: Path) -> tuple:
    """File modification times: cache keys that change when a run grows."""
    out = []
    for p in paths:
        try:
            out.append(p.stat().st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


@st.cache_data(show_spinner=False, max_entries=64)
def _read_parquet(path: str, stamp: tuple) -> pd.DataFrame:
    return pd.read_parquet(path)


def read_table(path: Path) -> pd.DataFrame:
    return _read_parquet(str(path), _stamp(path))


@st.cache_data(show_spinner="Reading the diagnosis...", max_entries=32)
def _load_diagnosis(path: str, stamp: tuple) -> Diagnosis:
    return Diagnosis.load(path)


def load_diagnosis(folder: Path) -> Diagnosis:
    return _load_diagnosis(str(folder), _stamp(*(folder / f"{t}.parquet" for t in TABLES), folder / "diagnosis.json"))


@st.cache_data(show_spinner="Reading the run...", max_entries=16)
def _load_run(path: str, stamp: tuple):
    from workbench.experiments.summary import load_run

    return load_run(path)


def load_run(folder: Path):
    return _load_run(str(folder), _stamp(*(folder / n for n in ("manifest.json", "examples.parquet",
                                                                  "outcomes.parquet"))))


@st.cache_data(show_spinner="Summarizing...", max_entries=16)
def _summary(path: str, stamp: tuple, reference: str) -> pd.DataFrame:
    from workbench.experiments.summary import summarize

    return summarize(_load_run(path, stamp), reference)


def run_summary(folder: Path, reference: str) -> pd.DataFrame:
    return _summary(str(folder), _stamp(*(folder / n for n in ("manifest.json", "examples.parquet",
                                                                 "outcomes.parquet"))), reference)


def default_reference(selectors: list[str]) -> str:
    for name in ("cacheblend", "random"):
        if name in selectors:
            return name
    others = [s for s in selectors if s not in ("none", "full")]
    return (others or selectors)[0]


def run_examples(run: RunFolder) -> list[tuple[str, Path]]:
    """(example id, Diagnosis folder) of every finished example of a sweep (or the one of a Diagnosis)."""
    if run.kind == "diagnosis":
        meta = json.loads((run.path / "diagnosis.json").read_text())
        return [(str(meta.get("example", {}).get("id", run.name)), run.path)]
    root = run.path / "diagnoses"
    if not root.is_dir():
        return []
    found = [(unquote(p.parent.name), p.parent) for p in root.glob("*/diagnosis.json")]
    return sorted(found, key=lambda item: natural_key(item[0]))


def natural_key(text) -> list:
    """Sort key that puts example "2" before "10"."""
    text = str(text)
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


# ----------------------------------------------------------------------------- the demo run

DEMO_NAME = "demo"
DEMO_CONFIG = SweepConfig(dataset="synthetic", n=6,
                          selectors=("none", "full", "random", "cacheblend", "densedev", "cadence-grad", "bcr:grow"),
                          budgets=(0.1, 0.3), options={"max_new_tokens": 12})


@dataclass
class DemoJob:
    """The background sweep behind "Compute demo run" (one per process)."""

    out: Path | None = None
    n: int = DEMO_CONFIG.n
    thread: threading.Thread | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def done(self) -> int:
        if self.out is None:
            return 0
        return sum(1 for _ in (self.out / "diagnoses").glob("*/diagnosis.json"))


@st.cache_resource
def demo_job() -> DemoJob:
    return DemoJob()


def start_demo(root: Path, config: SweepConfig = DEMO_CONFIG) -> DemoJob:
    """Start the demo sweep into `root/demo` on a background thread (no-op while one runs)."""
    job = demo_job()
    if job.running:
        return job
    model = get_model()  # loaded in the script thread, where st.cache_resource has its context
    out = root / DEMO_NAME
    job.out, job.n, job.error, job.started, job.finished = out, config.n, None, time.time(), None

    def work() -> None:
        try:
            with model_lock():
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
    root = runs_root()
    job = demo_job()
    c = DEMO_CONFIG
    st.markdown(f"**Demo run**: {c.n} synthetic examples, selectors {', '.join(c.selectors)}, budgets "
                f"{', '.join(map(str, c.budgets))} on `{model_spec()}`, into `{root / DEMO_NAME}` "
                f"(several minutes on a CPU; the same as `kvwb run --n {c.n} --selectors {','.join(c.selectors)} "
                f"--budgets {','.join(map(str, c.budgets))} --out {root / DEMO_NAME}`).")
    if st.button("Compute demo run", key="demo_start", disabled=job.running, type="primary"):
        try:
            start_demo(root)
        except WorkbenchError as err:
            st.error(f"Could not start the demo run: {err}")
    if job.running:  # poll only while a run is in flight
        st.fragment(run_every=1.0)(_demo_progress)()
    else:
        _demo_progress()


def _demo_progress() -> None:
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
        st.error(f"The demo run stopped: {job.error}")
    else:
        st.success(f"Demo run finished: {done} examples in `{job.out}` "
                   f"({(job.finished or time.time()) - (job.started or 0):.0f} s). Pick it in the pages.")
    if st.session_state.pop("demo_seen_running", False):
        st.rerun()  # refresh the whole page: the run list now holds the demo run


# ----------------------------------------------------------------------------- exports

def _has_kaleido() -> bool:
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return True


# Importing streamlit makes its "streamlit" template plotly's default: a template of placeholder
# colours (#000001..#000040) that only its chart component knows how to replace. Figures built in
# the app must look like the same figures in notebooks and reports, and their HTML exports must
# carry real colours: build them with plotly's own default template.
pio.templates.default = "plotly"
# The chart component rewrites those placeholder colours in any figure's JSON, even with
# theme=None, so a genuine colour among them (Magma's and Inferno's first stop is #000004) would
# turn lavender. `streamlit_safe` nudges such colours by one unit of red before display.
_PLACEHOLDER_COLOR = re.compile(r'"#0000([0-3][0-9]|40)"', re.IGNORECASE)


def streamlit_safe(fig):
    """The same figure with any colour Streamlit would replace nudged by one unit of red."""
    spec = fig.to_json()
    if not _PLACEHOLDER_COLOR.search(spec):
        return fig
    return pio.from_json(_PLACEHOLDER_COLOR.sub(lambda m: f'"#0100{m.group(1)}"', spec))


def show_figure(fig, name: str, key: str) -> None:
    """The figure as `workbench.plots` drew it (no Streamlit theme), with its exports: standalone HTML
    (plotly.js embedded, opens offline) and PNG where kaleido is installed."""
    st.plotly_chart(streamlit_safe(fig), key=f"{key}_chart", width="stretch", theme=None)
    row = st.container(horizontal=True, vertical_alignment="center")
    row.download_button("Figure as HTML", data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),
                        file_name=f"{name}.html", mime="text/html", key=f"{key}_html", on_click="ignore")
    if _has_kaleido():
        row.download_button("Figure as PNG", data=lambda: fig.to_image(format="png", scale=2),
                            file_name=f"{name}.png", mime="image/png", key=f"{key}_png", on_click="ignore")


def csv_button(table: pd.DataFrame, name: str, key: str, label: str = "Table as CSV") -> None:
    st.download_button(label, data=lambda: table.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
                       key=key, on_click="ignore")


def diagnosis_json(d: Diagnosis) -> str:
    """The Diagnosis as one JSON document (its tables as records), until the reports module lands."""
    doc = {"format": "kvwb-app-diagnosis", "example": d.example.to_dict(), "info": d.info,
           "tables": {name: json.loads(table.to_json(orient="records")) for name, table in d.tables.items()}}
    return json.dumps(doc, indent=1, default=str)


def report_buttons(d: Diagnosis, key: str, manifest: dict | None = None) -> None:
    """The per-example report: HTML and JSON from `workbench.report` when present, else a JSON of the tables."""
    name = f"report-{d.example_id}"
    try:
        from workbench.report import render_report
    except ImportError:
        render_report = None
    row = st.container(horizontal=True, vertical_alignment="center")
    if render_report is not None:
        row.download_button("Report (HTML)", data=lambda: render_report(d, "html", manifest),
                                file_name=f"{name}.html", mime="text/html", key=f"{key}_report_html",
                                on_click="ignore")
        row.download_button("Report (JSON)", data=lambda: render_report(d, "json", manifest),
                                file_name=f"{name}.json", mime="application/json", key=f"{key}_report_json",
                                on_click="ignore")
    else:
        row.caption("HTML report: needs `workbench.report` (not in this version)")
        row.download_button("Diagnosis (JSON)", data=lambda: diagnosis_json(d), file_name=f"{name}.json",
                                mime="application/json", key=f"{key}_report_json", on_click="ignore")


# ----------------------------------------------------------------------------- one example

def _ensure_choice(key: str, options: list, default) -> None:
    """Keep a keyed widget's state valid when its options change (another run or example)."""
    value = st.session_state.get(key)
    if isinstance(default, list):
        if value is None or not isinstance(value, list) or any(v not in options for v in value):
            st.session_state[key] = [v for v in (value or []) if v in options] or default
    elif value not in options:
        st.session_state[key] = default


def picks_table(d: Diagnosis, selectors: list[str], budget: float) -> pd.DataFrame:
    """Reused tokens x selectors: True where a selector recomputes the row at this budget."""
    tokens = d.tokens[d.tokens["reused"]][["position", "segment", "token"]].reset_index(drop=True)
    for label in selectors:
        chosen = set(d.picks(label, budget))
        tokens[label] = tokens["position"].isin(chosen)
    tokens["n_selectors"] = tokens[selectors].sum(axis=1) if selectors else 0
    return tokens


def answers_table(d: Diagnosis, selectors: list[str], budget: float) -> pd.DataFrame:
    """Dense, spliced and each selector's repaired answer at a budget, flips marked."""
    answers = d.info.get("answers", {})
    dense = answers.get("dense", {})
    rows = []
    for name in ("dense", "spliced"):
        a = answers.get(name, {})
        flip = "" if name == "dense" else _flip_word(
            normalize_answer(a.get("text", "")) != normalize_answer(dense.get("text", "")))
        rows.append({"cache": name, "rows recomputed": None if name == "dense" else 0,
                     "answer": a.get("text"), "flip vs dense": flip, "EM": a.get("em"), "F1": a.get("f1")})
    out = d.outcomes[(d.outcomes["budget"] - budget).abs() < 1e-9]
    sel = d.selections[(d.selections["budget"] - budget).abs() < 1e-9].set_index("selector")
    for label in selectors:
        row = out[out["selector"] == label]
        if row.empty:
            continue
        r = row.iloc[0]
        note = ""
        if label in sel.index:
            s = sel.loc[label]
            if bool(s.get("skipped", False)):
                note = "skipped: budget under one chunk"
            elif not bool(s.get("budget_matched", True)):
                note = f"not budget-matched ({int(s['n_recomputed'])} rows for {int(s['n_requested'])} asked)"
        rows.append({"cache": f"repaired: {label}", "rows recomputed": int(r["n_recomputed"]), "answer": r["answer"],
                     "flip vs dense": _flip_word(bool(r["flip"])), "EM": float(r["em"]), "F1": float(r["f1"]),
                     "note": note})
    table = pd.DataFrame(rows)
    table["rows recomputed"] = table["rows recomputed"].astype("Int64")
    if "note" in table:
        table["note"] = table["note"].fillna("")
    return table


def _flip_word(flip: bool) -> str:
    return "FLIP" if flip else "same"


def signal_values(d: Diagnosis, key: str) -> tuple[pd.Series | None, str]:
    """Widgets choosing the strip's colouring; the values by position and a title."""
    token_names = list(dict.fromkeys(d.token_signals["signal"])) if not d.token_signals.empty else []
    options = (["deviation"] if not d.deviation.empty else []) + token_names
    if not options:
        st.info("This diagnosis holds no token signals.")
        return None, "tokens"
    _ensure_choice(f"{key}_signal", options, options[0])
    signal = st.selectbox("Colour tokens by", options, key=f"{key}_signal",
                          format_func=lambda s: SIGNAL_LABELS.get(s, s))
    if signal != "deviation":
        return d.signal(signal), SIGNAL_LABELS.get(signal, signal)
    dev = d.deviation
    layers = sorted(dev["layer"].unique())
    kinds = sorted(dev["kind"].unique(), reverse=True)  # v before k
    metrics = list(dict.fromkeys(dev["metric"]))
    c1, c2, c3 = st.columns(3)
    _ensure_choice(f"{key}_layer", layers, layers[-1])
    layer = c1.select_slider("Layer", layers, key=f"{key}_layer")
    _ensure_choice(f"{key}_kind", kinds, kinds[0])
    kind = c2.radio("Kind", kinds, key=f"{key}_kind", horizontal=True,
                    format_func=lambda k: {"k": "keys (post-RoPE)", "v": "values"}.get(k, k))
    default_metric = "rel_l2" if "rel_l2" in metrics else metrics[0]
    _ensure_choice(f"{key}_metric", metrics, default_metric)
    metric = c3.selectbox("Metric", metrics, key=f"{key}_metric")
    rows = dev[(dev["layer"] == layer) & (dev["kind"] == kind) & (dev["metric"] == metric)]
    return rows.set_index("position")["value"], f"{metric} deviation of {kind.upper()} at layer {layer}"


def diagnosis_view(d: Diagnosis, key: str, manifest: dict | None = None) -> None:
    """Every per-example view: answers, token strip, picks, heatmaps, residual deviation, exports."""
    ex = d.example
    st.markdown(f"**Question.** {ex.question}  \n**Gold:** {' | '.join(ex.gold) or '(none given)'} · "
                f"{d.info.get('n_tokens', len(d.tokens))} tokens, {d.info.get('n_reused', '?')} reused · "
                f"model `{(d.info.get('model') or {}).get('name', '?')}`")
    with st.expander(f"Passages ({len(ex.passages)})"):
        for i, passage in enumerate(ex.passages, 1):
            st.text(f"Passage {i}: {passage}")

    sel = d.selections
    if sel.empty:
        st.warning("This diagnosis holds no selections (no selector was run).")
        return
    budgets = sorted(float(b) for b in sel["budget"].unique())
    selectors = list(dict.fromkeys(sel["selector"]))
    informative = [s for s in selectors if s not in ("none", "full")] or selectors
    c1, c2 = st.columns([1, 2])
    _ensure_choice(f"{key}_budget", budgets, budgets[0])
    if len(budgets) > 1:
        budget = c1.select_slider("Budget (share of reused rows recomputed)", budgets, key=f"{key}_budget",
                                  format_func=lambda b: f"{b:g}")
    else:
        budget = budgets[0]
        c1.markdown(f"Budget: **{budget:g}** (the only one in this diagnosis)")
    preferred = [s for s in ("cacheblend", "densedev", "cadence-grad", "bcr", "bcr:grow", "bcr:single", "random")
                 if s in selectors][:4]
    _ensure_choice(f"{key}_selectors", selectors, preferred if len(preferred) >= 2 else informative[:4])
    chosen = c2.multiselect("Selectors", selectors, key=f"{key}_selectors")

    st.subheader("Answers")
    answers = answers_table(d, chosen, budget)
    st.dataframe(answers, hide_index=True, width="stretch")
    csv_button(answers, f"answers-{d.example_id}-b{budget:g}", f"{key}_answers_csv")

    st.subheader("Tokens")
    values, what = signal_values(d, key)
    outline = None
    if chosen:
        _ensure_choice(f"{key}_outline", chosen, chosen[0])
        outline = st.selectbox("Outline the rows picked by", chosen, key=f"{key}_outline")
    picks = d.picks(outline, budget) if outline else None
    title = f"{what}" + (f" · outlined: {outline} at b = {budget:g}" if outline else "")
    show_figure(plots.token_strip(d.tokens, values, title=title, picks=picks), f"tokens-{d.example_id}",
                f"{key}_strip")

    if chosen:
        st.subheader(f"Rows each selector recomputes at b = {budget:g}")
        show_figure(plots.picks_matrix(d.tokens, {s: d.picks(s, budget) for s in chosen},
                                       title="picked rows (last line: share of selectors that agree)"),
                    f"picks-{d.example_id}-b{budget:g}", f"{key}_picks")
        table = picks_table(d, chosen, budget)
        with st.expander("Picks as a table (reused tokens)"):
            st.dataframe(table, hide_index=True, width="stretch")
        csv_button(table, f"picks-{d.example_id}-b{budget:g}", f"{key}_picks_csv", "Picks as CSV")

    st.subheader("Layer × token")
    dev = d.deviation
    if dev.empty:
        st.info("No deviation table in this diagnosis.")
    else:
        kinds = sorted(dev["kind"].unique(), reverse=True)
        metrics = list(dict.fromkeys(dev["metric"]))
        c1, c2 = st.columns(2)
        _ensure_choice(f"{key}_hm_kind", kinds, kinds[0])
        kind = c1.radio("Deviation of", kinds, key=f"{key}_hm_kind", horizontal=True,
                        format_func=lambda k: {"k": "keys (post-RoPE)", "v": "values"}.get(k, k))
        _ensure_choice(f"{key}_hm_metric", metrics, "rel_l2" if "rel_l2" in metrics else metrics[0])
        metric = c2.selectbox("Deviation metric", metrics, key=f"{key}_hm_metric")
        rows = dev[(dev["kind"] == kind) & (dev["metric"] == metric)]
        title = f"{metric} deviation of {kind.upper()}, splice vs dense, per layer and reused token"
        show_figure(plots.layer_heatmap(rows, d.tokens, title=title), f"deviation-{d.example_id}",
                    f"{key}_dev_heatmap")
    ls = d.layer_signals
    if ls.empty:
        st.info("No per-layer saliency or attention here: run `cadence`/`cadence-grad` (gradients), "
                "`bcr` (draft attention) or `qattn` (question attention) to get them.")
    else:
        names = list(dict.fromkeys(ls["signal"]))
        c1, c2 = st.columns(2)
        _ensure_choice(f"{key}_hm_signal", names, names[0])
        name = c1.selectbox("Saliency / attention", names, key=f"{key}_hm_signal",
                            format_func=lambda s: LAYER_SIGNAL_LABELS.get(s, s))
        log = c2.checkbox("log10 scale", key=f"{key}_hm_log", value=True)
        show_figure(plots.layer_heatmap(ls[ls["signal"] == name], d.tokens, log=log,
                                        title=f"{LAYER_SIGNAL_LABELS.get(name, name)}, per layer and reused token"),
                    f"{name}-{d.example_id}", f"{key}_sal_heatmap")

    st.subheader("Deviation left per layer after each repair")
    res = d.residual
    if res.empty:
        st.info("No residual deviation in this diagnosis.")
    else:
        kinds = sorted(res["kind"].unique(), reverse=True)
        _ensure_choice(f"{key}_res_kind", kinds, kinds[0])
        kind = st.radio("Residual of", kinds, key=f"{key}_res_kind", horizontal=True,
                        format_func=lambda k: {"k": "keys", "v": "values"}.get(k, k))
        show_figure(plots.residual_by_layer(res, budget, kind=kind, selectors=chosen or None),
                    f"residual-{d.example_id}-b{budget:g}", f"{key}_residual")

    with st.expander("Outcomes, costs and the attribution check"):
        st.dataframe(d.outcomes, hide_index=True, width="stretch")
        csv_button(d.outcomes, f"outcomes-{d.example_id}", f"{key}_outcomes_csv", "Outcomes as CSV")
        if not d.costs.empty:
            st.dataframe(d.costs, hide_index=True, width="stretch")
        st.caption(f"Attribution check: {d.info.get('attribution_summary', 'not recorded')}")
    st.markdown("**Per-example report**")
    report_buttons(d, key, manifest)


# ----------------------------------------------------------------------------- saving Live results

def save_as_run(d: Diagnosis, model: wb.LoadedModel, out: Path) -> Path:
    """Write one Diagnosis as a sweep run folder (manifest, tables, diagnoses/ID) that every page reads.

    The example is also written as `example.jsonl`, so `kvwb run --dataset jsonl:OUT/example.jsonl`
    reproduces it.
    """
    from workbench.experiments.runstore import git_revision, now, package_versions, write_json
    from workbench.experiments.sweep import write_tables
    from workbench.models import model_fingerprint

    if out.exists():
        raise WorkbenchError(f"{out} exists: choose another name")
    cfg = d.info.get("config", {})
    config = SweepConfig(dataset=f"jsonl:{out / 'example.jsonl'}", n=1, selectors=tuple(cfg.get("selectors", ())),
                         budgets=tuple(cfg.get("budgets", ())), seed=int(cfg.get("seed", 0)),
                         attribution=not d.tables.get("attribution", pd.DataFrame()).empty,
                         options={"max_new_tokens": cfg.get("max_new_tokens", 24)})
    out.mkdir(parents=True)
    ex = d.example
    record = {"id": ex.id, "passages": list(ex.passages), "question": ex.question, "answers": list(ex.gold)}
    if ex.system:
        record["system"] = ex.system
    (out / "example.jsonl").write_text(json.dumps(record) + "\n")
    d.save(example_folder(out, ex.id))
    write_tables(out, [ex])
    write_json(out / "manifest.json", {
        "kind": "sweep", "source": "app Live page",
        "model": {**model.describe(), "fingerprint": model_fingerprint(model)}, "args": asdict(config),
        "versions": package_versions(), "git_revision": git_revision(), "start": now(), "end": now(),
        "status": "complete", "failures": [], "n_done": 1})
    return out


def choose_run(kinds: tuple[str, ...], key: str, stop_on_problems: bool = False) -> RunFolder:
    """The page header every run view shares: list the runs of `kinds`, say how to make one
    when there is none, let the user pick one and show what it lacks (stopping if asked)."""
    runs = [r for r in scan_runs(runs_root()) if r.kind in kinds]
    if not runs:
        how_to_get_data(kinds[0])
        st.stop()
    run = pick_run(runs, key=key)
    show_problems(run)
    if stop_on_problems and run.problems:  # the tables the view needs are missing or too old
        st.stop()
    return run
