"""Budget curves: accuracy and flip rate against budget per selector with Wilson intervals,
recomputed rows against accuracy, and the summary table with McNemar b/c and Holm-corrected p."""

from __future__ import annotations

import streamlit as st

import common
from workbench import plots
from workbench.errors import WorkbenchError
from workbench.experiments.summary import tokens_to_target

st.title("Budget curves")

run = common.choose_run(("sweep",), key="curves_run", stop_on_problems=True)
try:
    loaded = common.load_run(run.path)
except WorkbenchError as err:
    st.warning(str(err))
    st.stop()

selectors = list(dict.fromkeys(loaded.outcomes["selector"]))
if st.session_state.get("curves_reference") not in selectors:
    st.session_state["curves_reference"] = common.default_reference(selectors)
reference = st.selectbox("Reference selector for the paired tests", selectors, key="curves_reference")
try:
    summary = common.run_summary(run.path, reference)
except WorkbenchError as err:
    st.warning(str(err))
    st.stop()
ex = loaded.examples
st.markdown(f"`{run.name}`: {len(ex)} examples, model `{loaded.manifest.get('model', {}).get('name', '?')}`, "
            f"data set `{loaded.manifest.get('args', {}).get('dataset', '?')}` · dense EM "
            f"{ex['dense_em'].mean():.3f}, splice EM {ex['spliced_em'].mean():.3f}")

common.show_figure(plots.budget_curve(summary, "em", "Exact match against budget (Wilson 95%)"),
                   f"accuracy-{run.name}", "curves_em")
common.show_figure(plots.budget_curve(summary, "flip_rate", "Flip rate against dense (Wilson 95%)"),
                   f"flips-{run.name}", "curves_flips")
common.show_figure(plots.rows_vs_accuracy(summary, "Rows recomputed per example against exact match"),
                   f"rows-{run.name}", "curves_rows")

st.subheader("Summary")
st.caption(f"McNemar b/c: b = the selector right where the other is wrong; p Holm-corrected within each budget. "
           f"`ref_*` against `{reference}`, `dense_*` against the dense prefill.")
columns = ["selector", "budget", "n", "em", "em_low", "em_high", "f1", "flip_rate", "flip_low", "flip_high",
           "gap_recovered", "rows_per_example", "share_recomputed", "ref_b", "ref_c", "ref_p", "ref_p_holm",
           "dense_b", "dense_c", "dense_p", "dense_p_holm"]
shown = summary[[c for c in columns if c in summary.columns]]
st.dataframe(shown, hide_index=True, width="stretch")
common.csv_button(summary, f"summary-{run.name}", "curves_summary_csv", "Summary as CSV")

st.subheader("Rows needed to reach a target")
t1, t2 = st.columns(2)
share = t1.slider("Share of dense EM", 0.5, 1.0, 0.9, 0.05, key="curves_share")
max_flip = t2.slider("Largest flip rate", 0.0, 0.5, 0.2, 0.05, key="curves_max_flip")
targets = tokens_to_target(summary, ex, share_of_dense=share, max_flip_rate=max_flip)
st.dataframe(targets, hide_index=True)
st.caption("Empty where no budget of the run reaches the target.")
common.csv_button(targets, f"targets-{run.name}", "curves_targets_csv")
