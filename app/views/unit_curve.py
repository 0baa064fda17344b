"""Unit of choice: the error curve of `kvwb curve` runs (BCR §4.2, Table 8): how much choosing
rows well is worth as the unit of choice grows from single rows to large chunks."""

from __future__ import annotations

import streamlit as st

import state
from readable import show_table
from widgets import choose_run, csv_button, plain, show_figure, warn
from workbench import plots
from workbench.app_api import WorkbenchError

st.title("Unit of choice")
st.caption("Informed (draft attention) vs random choice of the dense rows restored into the splice, at one "
           "nominal budget, as the unit of choice grows; error = relative L2 of the attention output.")

run = choose_run(("curve",), key="unit_run")
try:
    curve = state.read_curve(run.path)
    figure = plots.unit_curve_figure(curve.summary)
except (WorkbenchError, OSError) as err:
    warn(err)
    st.stop()

args = curve.manifest.args
st.markdown(f"{plain(run.name)}: model {plain(curve.manifest.model_name or '?')}, "
            f"{args.get('prompts', '?')} prompts of about {args.get('tokens', '?')} tokens, budget "
            f"{args.get('budget', '?')}, {args.get('seeds', '?')} random seeds per prompt and unit.")
show_figure(figure, f"unit-curve-{run.name}", "unit_figure")

st.subheader("Summary per unit")
show_table(curve.summary, None, key="unit_summary_table", pinned=("unit",))
csv_button(curve.summary, f"unit-summary-{run.name}", "unit_summary_csv", "Summary as CSV")
with st.expander("Every measurement (prompt x unit x method x seed)"):
    show_table(curve.curve, None, key="unit_curve_table")  # an informed row has no seed: blank
csv_button(curve.curve, f"unit-curve-{run.name}", "unit_curve_csv", "Measurements as CSV")
with st.expander("Manifest"):
    st.json(curve.manifest.to_dict(), expanded=1)
