"""Runs: the run folders under the runs directory, their manifests and summary tables; pick one
for the other pages. Also the "compute demo run" button (a small sweep in the background)."""

from __future__ import annotations

import streamlit as st

import common
from workbench.errors import WorkbenchError

st.title("KV Repair Workbench")
st.caption("Splice isolated passage caches, compare them with the dense prefill, and see which rows each "
           "selector recomputes, what the repair changes, and when answers flip.")

root = common.runs_root()
runs = common.scan_runs(root)

with st.container(border=True):
    common.demo_panel()
    st.page_link(common.PAGES["live"][0], label="Or diagnose an example of your own now on the Live page",
                 icon=":material/bolt:")

st.header("Runs")
if not runs:
    where = "does not exist" if not root.exists() else "holds no run folders"
    st.info(f"`{root}` {where}. Make a run from a shell with `kvwb run --out runs/NAME` (e.g. "
            f"`kvwb run --n 12 --out runs/first`), `kvwb curve --out runs/NAME` or `kvwb fidelity --out runs/NAME`, "
            f"or press **Compute demo run** above.")
    st.stop()

table = common.runs_table(runs)
st.dataframe(table, hide_index=True, width="stretch")
common.csv_button(table, "runs", "runs_csv")

run = common.pick_run(runs, key="runs_pick", label="Run to open (the other pages start from it)")
common.show_problems(run)

left, right = st.columns([2, 1])
with right:
    st.subheader("Manifest")
    if run.manifest is not None:
        st.json(run.manifest, expanded=1)
    else:
        st.caption("no manifest.json")

with left:
    if run.kind == "sweep" and not run.ok:
        st.subheader("What is there")
        if (run.path / "examples.parquet").is_file():
            try:
                st.dataframe(common.read_table(run.path / "examples.parquet"), hide_index=True, width="stretch")
            except Exception as err:  # noqa: BLE001 - a message, not a traceback
                st.warning(f"examples.parquet is unreadable: {err}")
        st.markdown(f"{common.n_done(run)} example diagnoses saved. Examples that finished open in the "
                    f"Example explorer.")
    elif run.kind == "sweep":
        try:
            loaded = common.load_run(run.path)
        except WorkbenchError as err:
            st.warning(str(err))
            st.stop()
        ex = loaded.examples
        st.subheader("Summary")
        st.markdown(f"{len(ex)} examples ({loaded.n_failed} failed) · dense EM **{ex['dense_em'].mean():.3f}** · "
                    f"splice EM **{ex['spliced_em'].mean():.3f}** · the splice flips against dense on "
                    f"**{int(ex['splice_flip'].sum())}** of {len(ex)}")
        selectors = list(dict.fromkeys(loaded.outcomes["selector"]))
        reference = common.default_reference(selectors)
        try:
            summary = common.run_summary(run.path, reference)
        except WorkbenchError as err:
            st.warning(str(err))
        else:
            cols = ["selector", "budget", "n", "em", "em_low", "em_high", "flip_rate", "gap_recovered",
                    "rows_per_example", "ref_b", "ref_c", "ref_p_holm"]
            st.caption(f"McNemar b/c and Holm-corrected p against `{reference}` (more on the Budget curves page)")
            st.dataframe(summary[cols], hide_index=True, width="stretch")
            common.csv_button(summary, f"summary-{run.name}", "runs_summary_csv", "Summary as CSV")
        st.subheader("Examples")
        st.dataframe(ex, hide_index=True, width="stretch")
        common.csv_button(ex, f"examples-{run.name}", "runs_examples_csv", "Examples as CSV")
        failures = loaded.manifest.get("failures") or []
        if failures:
            st.subheader("Failures")
            st.dataframe([{k: f.get(k) for k in ("example_id", "error")} for f in failures], hide_index=True)
        st.page_link(common.PAGES["explorer"][0], label="Explore its examples", icon=":material/token:")
        st.page_link(common.PAGES["curves"][0], label="Budget curves", icon=":material/show_chart:")
        st.page_link(common.PAGES["flips"][0], label="Decision flips", icon=":material/swap_horiz:")
    elif run.kind == "curve" and run.ok:
        st.subheader("Summary")
        st.dataframe(common.read_table(run.path / "summary.parquet"), hide_index=True, width="stretch")
        st.page_link(common.PAGES["unit"][0], label="Unit of choice page", icon=":material/grid_view:")
    elif run.kind == "fidelity":
        st.page_link(common.PAGES["fidelity"][0], label="Fidelity page", icon=":material/compare:")
    elif run.kind == "diagnosis":
        st.markdown("A single saved Diagnosis (`kvwb diagnose --out`): open it in the Example explorer.")
        st.page_link(common.PAGES["explorer"][0], label="Example explorer", icon=":material/token:")
    files = sorted(p.name for p in run.path.iterdir())
    st.caption(f"Files in `{run.path}`: {', '.join(files) or 'none'}")
