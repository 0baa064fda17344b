"""Runs: the run folders under the runs directory, their manifests and summaries; pick one for
the other pages. Also the "Compute demo run" button (a small sweep in the background)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import demo
import state
from navigation import PAGES
from widgets import csv_button, pick_run, plain, show_problems, warn
from workbench import runstore
from workbench.errors import WorkbenchError
from workbench.experiments.summary import resolve_reference

SUMMARY_COLUMNS = ["selector", "budget", "n", "em", "em_low", "em_high", "flip_rate", "gap_recovered",
                   "rows_per_example", "ref_b", "ref_c", "ref_p_holm"]


def runs_table(runs: list[runstore.RunFolder]) -> pd.DataFrame:
    rows = []
    for r in runs:
        m = r.manifest or {}
        rows.append({"run": r.name, "kind": r.kind or "?", "status": r.status,
                     "model": (m.get("model") or {}).get("name", ""),
                     "dataset": (m.get("args") or {}).get("dataset") or "",
                     "examples done": r.n_done() if r.kind in ("sweep", "diagnosis") else None,
                     "failures": len(m.get("failures") or []), "start": m.get("start") or "",
                     "end": m.get("end") or "", "problems": "; ".join(r.problems)})
    table = pd.DataFrame(rows)
    table["examples done"] = table["examples done"].astype("Int64")
    return table


def link(name: str, label: str) -> None:
    st.page_link(PAGES[name].path, label=label, icon=PAGES[name].icon)


def sweep_summary(run: runstore.RunFolder) -> None:
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
        st.dataframe(summary[[c for c in SUMMARY_COLUMNS if c in summary]], hide_index=True, width="stretch")
        csv_button(summary, f"summary-{run.name}", "runs_summary_csv", "Summary as CSV")
    st.subheader("Examples")
    st.dataframe(ex, hide_index=True, width="stretch")
    csv_button(ex, f"examples-{run.name}", "runs_examples_csv", "Examples as CSV")
    if sweep.failures:
        st.subheader("Failures")
        st.dataframe([{"example_id": i, "error": f.get("error")} for i, f in sweep.failures.items()], hide_index=True)
    link("explorer", "Explore its examples")
    link("curves", "Budget curves")
    link("flips", "Decision flips")


def what_is_there(run: runstore.RunFolder) -> None:
    """An incomplete sweep: the examples table when readable, the count of saved diagnoses."""
    st.subheader("What is there")
    try:
        st.dataframe(state.read_sweep(run.path).examples, hide_index=True, width="stretch")
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
    makes = ", ".join(f"`{runstore.KINDS[k].make}`" for k in ("sweep", "curve", "fidelity"))
    st.info(f"{plain(root)} {where}. Make a run from a shell with {makes}, or press **Compute demo run** above.")
    st.stop()

table = runs_table(runs)
st.dataframe(table, hide_index=True, width="stretch")
csv_button(table, "runs", "runs_csv")
run = pick_run(runs, key="runs_pick", label="Run to open (the other pages start from it)")
show_problems(run)

left, right = st.columns([2, 1])
with right:
    st.subheader("Manifest")
    if run.manifest is not None:
        st.json(run.manifest, expanded=1)
    else:
        st.caption("no manifest.json")
with left:
    if run.kind == "sweep" and run.ok:
        sweep_summary(run)
    elif run.kind == "sweep":
        what_is_there(run)
    elif run.kind == "curve" and run.ok:
        st.subheader("Summary")
        try:
            st.dataframe(state.read_curve(run.path).summary, hide_index=True, width="stretch")
        except WorkbenchError as err:
            warn(err)
        link("unit", "Unit of choice page")
    elif run.kind == "fidelity":
        link("fidelity", "Fidelity page")
    elif run.kind == "pipeline":
        st.markdown("A multi-agent reuse run (`kvwb pipeline`): every reuse method over the same requests.")
        link("pipeline", "Multi-agent reuse page")
    elif run.kind == "diagnosis":
        st.markdown("A single saved Diagnosis (`kvwb diagnose --out`, or saved from Live): open it in the "
                    "Example explorer.")
        link("explorer", "Example explorer")
    files = sorted(p.name for p in run.path.iterdir())
    st.caption(f"Files in {plain(run.path)}: {plain(', '.join(files)) or 'none'}")
