"""Unit of choice: the error curve of `kvwb curve` runs (BCR §4.2, Table 8): how much choosing
rows well is worth as the unit of choice grows from single rows to large chunks."""

from __future__ import annotations

import streamlit as st

import common
from workbench.errors import WorkbenchError
from workbench.experiments.unit_curve import load_curve, summary_markdown
from workbench.plots.unit_curve import unit_curve_figure

st.title("Unit of choice")
st.caption("Informed (draft attention) vs random choice of the dense rows restored into the splice, at one "
           "nominal budget, as the unit of choice grows; error = relative L2 of the attention output.")

run = common.choose_run(("curve",), key="unit_run")
try:
    manifest, curve, summary = load_curve(run.path)
    figure = unit_curve_figure(summary)
except (WorkbenchError, OSError, ValueError) as err:
    st.warning(f"Could not read the curve in `{run.path}`: {err}")
    st.stop()

args = manifest.get("args", {})
st.markdown(f"`{run.name}`: model `{manifest.get('model', {}).get('name', '?')}`, {args.get('prompts', '?')} prompts "
            f"of about {args.get('tokens', '?')} tokens, budget {args.get('budget', '?')}, "
            f"{args.get('seeds', '?')} random seeds per prompt and unit.")
common.show_figure(figure, f"unit-curve-{run.name}", "unit_figure")

st.subheader("Summary per unit")
st.markdown(summary_markdown(summary))
st.dataframe(summary, hide_index=True, width="stretch")
common.csv_button(summary, f"unit-summary-{run.name}", "unit_summary_csv", "Summary as CSV")
with st.expander("Every measurement (prompt x unit x method x seed)"):
    st.dataframe(curve, hide_index=True, width="stretch")
common.csv_button(curve, f"unit-curve-{run.name}", "unit_curve_csv", "Measurements as CSV")
with st.expander("Manifest"):
    st.json(manifest, expanded=1)
