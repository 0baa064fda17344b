"""Fidelity vs consumability: the plots of `kvwb fidelity` runs. Is a cache that is close in
geometry to the reader's own usable by the reader?"""

from __future__ import annotations

import streamlit as st

import state
from widgets import choose_run, csv_button, plain, show_figure, warn
from workbench.app_api import WorkbenchError
from workbench.plots import fidelity as fidelity_plots

st.title("Fidelity vs consumability")
st.caption("Transfer (share of questions the reader answers from a substituted cache) against how close the "
           "substitute is to the reader's own cache, with the masked floor and the native reference.")

run = choose_run(("fidelity",), key="fidelity_run")
try:
    fidelity = state.read_fidelity(run.path)
except (WorkbenchError, OSError) as err:
    warn(err)
    st.stop()

manifest, tables = fidelity.manifest, fidelity.tables
details = manifest.details
conditions = tables["conditions"]
st.markdown(f"{plain(run.name)}: model {plain(manifest.model_name or '?')}, "
            f"{details.get('n_examples', '?')} questions · metric: {plain(details.get('metric', '?'))}")
anchors = tables.get("anchors")
if anchors is not None and not anchors.empty:
    st.dataframe(anchors, hide_index=True)

x = st.radio("Cosine of", ["key_cos", "value_cos", "key_cos_fact"], horizontal=True, key="fidelity_x",
             format_func=lambda c: {"key_cos": "keys", "value_cos": "values",
                                    "key_cos_fact": "keys of the fact's rows"}[c])
try:
    figures = {**fidelity_plots.fidelity_figures(conditions),
               "cosine": fidelity_plots.transfer_vs_cosine(conditions, x=x)}
except (KeyError, ValueError, WorkbenchError) as err:
    st.info(f"No figures for this run ({type(err).__name__}: {plain(err)}).")
    figures = {}
for name, fig in figures.items():
    show_figure(fig, f"fidelity-{name}-{run.name}", f"fidelity_{name}")

st.subheader("Tables")
for name, table in tables.items():
    with st.expander(f"{name} ({len(table)} rows)", expanded=(name == "conditions")):
        st.dataframe(table, hide_index=True, width="stretch")
    csv_button(table, f"fidelity-{name}-{run.name}", f"fidelity_{name}_csv", f"{name} as CSV")
with st.expander("Manifest"):
    st.json(manifest.to_dict(), expanded=1)
