"""Runs: the run folders under the runs directory, their manifests and summaries; pick one for
the other pages. Also the "Compute demo run" button (a small sweep in the background)."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

import demo
import state
from navigation import PAGES
from readable import against_itself_blank, fitted, header, show_table
from widgets import csv_button, pick_run, plain, show_problems, warn
from workbench.app_api import Manifest, RunFolder, WorkbenchError, make_command, resolve_reference, summarize_pipeline

SUMMARY_COLUMNS = ["selector", "budget", "n", "em", "em_low", "em_high", "flip_rate", "gap_recovered",
                   "gap_recovered_low", "gap_recovered_high", "rows_per_example", "ref_b", "ref_c", "ref_p_holm"]


def dataset_of(run: RunFolder) -> str:
    """What a run was computed on, in words (a data set spec, the curve's prompts, one example)."""
    if run.manifest is None:
        return ""
    args = run.manifest.args
    if run.manifest.dataset:
        return str(run.manifest.dataset)
    if run.kind == "curve":
        return f"synthetic prompts ({args.get('prompts', '?')} of about {args.get('tokens', '?')} tokens)"
    if run.kind == "fidelity":
        return "built-in one-fact questions"
    if run.kind == "diagnosis":
        return f"one example ({args.get('example_id') or run.name})"
    return ""


def ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago" if seconds < 7200 else \
        f"{seconds / 3600:.0f} h ago"


def runs_table(runs: list[RunFolder]) -> pd.DataFrame:
    now = time.time()
    rows = []
    for r in runs:
        m = r.manifest
        target = r.n_target()
        rows.append({"run": r.name, "kind": r.kind or "?", "status": r.status,
                     "model": (m and m.model_name) or "", "dataset": dataset_of(r),
                     "examples done": r.n_done() if target is not None else None, "of": target,
                     "failures": len(m.failures) if m else 0, "last written": ago(now - r.last_written()),
                     "start": (m and m.start) or "", "end": (m and m.end) or "", "problems": "; ".join(r.problems)})
    table = pd.DataFrame(rows)
    for column in ("examples done", "of"):
        table[column] = table[column].astype("Int64")
    return table


def manifest_shown(manifest: Manifest) -> dict:
    """The manifest as shown: seconds rounded (a float's last digits say nothing)."""
    def tidy(value):
        if isinstance(value, float):
            return round(value, 3)
        if isinstance(value, dict):
            return {k: tidy(v) for k, v in value.items()}
        return [tidy(v) for v in value] if isinstance(value, list) else value
    return tidy(manifest.to_dict())


def state_note(run: RunFolder) -> None:
    """A run that is not complete: how far it got, and whether anything still writes it."""
    target = run.n_target()
    progress = f"{run.n_done()} of {target} examples done" if target is not None else "unfinished"
    idle = ago(time.time() - run.last_written())
    if run.status.startswith("stopped"):
        make = make_command(run.kind)
        st.warning(f"{plain(run.name)} is {plain(run.status)}: {progress}, last written {idle}. Run its command "
                   f"again with the same arguments to resume it (e.g. `{make}`).")
    elif run.status == "running":
        st.info(f"{plain(run.name)} is running: {progress}, last written {idle}.")


def link(name: str, label: str) -> None:
    st.page_link(PAGES[name].path, label=label, icon=PAGES[name].icon)


def sweep_summary(run: RunFolder) -> None:
    """The numbers of a complete sweep: summary against the default reference, examples, failures."""
    try:
        sweep = state.read_sweep(run.path)
    except WorkbenchError as err:
        warn(err)
        return
    ex = sweep.examples
    st.subheader("Summary")
    st.markdown(f"{len(ex)} examples ({sweep.n_failed} failed) · dense EM **{ex['dense_em'].mean():.3f}** · "
                f"splice EM **{ex['spliced_em'].mean():.3f}** · the splice flips against dense on "
                f"**{int(ex['splice_flip'].sum())}** of {len(ex)}")
    reference = resolve_reference(sweep, None)
    try:
        summary = state.run_summary(run.path, reference)
    except WorkbenchError as err:
        warn(err)
    else:
        if reference is None:
            st.info("This run has no default reference selector (cacheblend or random): the summary leaves the "
                    "comparison against a reference out. Choose one on the Budget curves page.")
        else:
            st.caption(f"McNemar b/c and Holm-corrected p against {plain(reference)} (more on the Budget curves page)")
        summary = against_itself_blank(summary, reference)
        show_table(summary, {c: header(c) for c in SUMMARY_COLUMNS}, fitted(summary), key="runs_summary_table",
                   pinned=("selector", "budget"))  # blank where not defined (a coin's b / c), never "None"
        csv_button(summary, f"summary-{run.name}", "runs_summary_csv", "Summary as CSV")
    st.subheader("Examples")
    st.caption("Click a row to open that example in the Example explorer.")
    event = show_table(ex, None, key="runs_examples", pinned=("example_id",), select="single-row")
    rows = event.selection.rows if event else []
    if rows:
        st.switch_page(PAGES["explorer"].path, query_params={"run": run.name,
                                                             "example": str(ex["example_id"].iloc[rows[0]])})
    csv_button(ex, f"examples-{run.name}", "runs_examples_csv", "Examples as CSV")
    if sweep.failures:
        st.subheader("Failures")
        failed = pd.DataFrame([{"example_id": i, "error": f.get("error")} for i, f in sweep.failures.items()])
        show_table(failed, {"example_id": "example", "error": "error"}, key="runs_failures_table",
                   widths={"error": "large"})
    link("explorer", "Explore its examples")
    link("curves", "Budget curves")
    link("flips", "Decision flips")


def fidelity_summary(run: RunFolder) -> None:
    """A fidelity run in numbers: the floor and the reference, each condition's transfer range."""
    try:
        conditions = state.read_fidelity(run.path).tables["conditions"]
    except (WorkbenchError, OSError, KeyError) as err:
        warn(err)
        return
    st.subheader("Summary")
    anchors = {r["condition"]: float(r["transfer"]) for _, r in conditions.iterrows()
               if r["condition"] in ("floor", "reference")}
    st.markdown(" · ".join(f"{name} transfer **{value:.3f}**" for name, value in anchors.items()) or "No floor "
                "or reference condition.")
    rest = conditions[~conditions["condition"].isin(["floor", "reference"])]
    table = (rest.groupby(["condition", "variant"], dropna=False, sort=False)["transfer"]
             .agg(points="size", lowest="min", highest="max").reset_index())
    show_table(table, None, key="runs_fidelity_table")  # a condition without variants: blank


def pipeline_summary(run: RunFolder) -> None:
    """A pipeline run in numbers: each method's reuse rate and accuracy (the Multi-agent page's table)."""
    try:
        data = state.read_pipeline(run.path)
        methods = summarize_pipeline(data.requests, data.calls)["methods"]
    except (WorkbenchError, OSError, KeyError) as err:
        warn(err)
        return
    st.subheader("Summary")
    st.markdown("A multi-agent reuse run (`kvwb pipeline`): every reuse method over the same requests.")
    show_table(methods, None, key="runs_methods_table", pinned=("method",))
    csv_button(methods, f"methods-{run.name}", "runs_methods_csv", "Methods as CSV")


def what_is_there(run: RunFolder) -> None:
    """An incomplete sweep: the examples table when readable, the count of saved diagnoses."""
    st.subheader("What is there")
    try:
        show_table(state.read_sweep(run.path).examples, None, key="runs_partial_examples", pinned=("example_id",))
    except WorkbenchError as err:
        warn(err)
    st.markdown(f"{run.n_done()} example diagnoses saved. Examples that finished open in the Example explorer.")


st.title("KV Repair Workbench")
st.caption("Splice isolated passage caches, compare them with the dense prefill, and see which rows each "
           "selector recomputes, what the repair changes, and when answers flip.")

root = state.runs_root()
runs = state.scan_runs()
with st.container(border=True):
    demo.demo_panel()
    link("live", "Or diagnose an example of your own now on the Live page")

st.header("Runs")
if not runs:
    where = "does not exist" if not root.exists() else "holds no run folders"
    makes = ", ".join(f"`{make_command(k, root)}`" for k in ("sweep", "curve", "fidelity"))
    st.info(f"{plain(root)} {where}. Make a run from a shell with {makes}, or press **Compute demo run** above.")
    st.stop()

table = runs_table(runs)
show_table(table, {c: c for c in table.columns}, key="runs_table", pinned=("run",),  # a curve's "examples done": blank
           widths={"kind": "small", "of": "small", "failures": "small", "status": "medium", "dataset": "medium"})
csv_button(table, "runs", "runs_csv")
run = pick_run(runs, key="runs_pick", label="Run to open (the other pages start from it)")
show_problems(run)

state_note(run)
if run.kind == "sweep" and run.ok:
    sweep_summary(run)
elif run.kind == "sweep":
    what_is_there(run)
elif run.kind == "curve" and run.ok:
    st.subheader("Summary")
    try:
        show_table(state.read_curve(run.path).summary, None, key="runs_curve_table", pinned=("unit",))
    except WorkbenchError as err:
        warn(err)
    link("unit", "Unit of choice page")
elif run.kind == "fidelity":
    fidelity_summary(run)
    link("fidelity", "Fidelity page")
elif run.kind == "pipeline":
    pipeline_summary(run)
    link("pipeline", "Multi-agent reuse page")
elif run.kind == "diagnosis":
    st.markdown("A single saved Diagnosis (`kvwb diagnose --out`, or saved from Live): open it in the "
                "Example explorer.")
    link("explorer", "Example explorer")
with st.expander("Manifest"):
    if run.manifest is not None:
        st.json(manifest_shown(run.manifest), expanded=1)
    else:
        st.caption("no manifest.json")
files = sorted(p.name for p in run.path.iterdir())
st.caption(f"Files in {plain(run.path)}: {plain(', '.join(files)) or 'none'}")
