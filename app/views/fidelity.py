"""Fidelity vs consumability: the plots of `kvwb fidelity` runs. Is a cache that is close in
geometry to the reader's own usable by the reader?"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import state
from readable import general, readable_headers, show_table
from widgets import choose_run, csv_button, plain, show_figure, warn
from workbench.app_api import WorkbenchError
from workbench.plots import fidelity as fidelity_plots

SENTINELS = ("layers", "rank", "pool")  # -1 in the run's tables: the setting does not apply to the condition


def blank_sentinels(table):
    """The table with -1 in `SENTINELS` (a setting a condition has not) as missing: shown blank, as NaN is."""
    out = table.copy()
    for column in SENTINELS:
        if column in out and pd.api.types.is_numeric_dtype(out[column]):
            out[column] = out[column].where(out[column] >= 0)
    return out


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
    show_table(anchors, readable_headers(anchors), {c: general for c in anchors.columns})

x = st.radio("Cosine of", ["key_cos", "value_cos", "key_cos_fact"], horizontal=True, key="fidelity_x",
             format_func=lambda c: {"key_cos": "keys", "value_cos": "values",
                                    "key_cos_fact": "keys of the fact's rows"}[c])
try:
    figures = {**fidelity_plots.fidelity_figures(conditions),
               "cosine": fidelity_plots.tell_apart(fidelity_plots.transfer_vs_cosine(conditions, x=x))}
except (KeyError, ValueError, WorkbenchError) as err:
    st.info(f"No figures for this run ({type(err).__name__}: {plain(err)}).")
    figures = {}
for name, fig in figures.items():
    show_figure(fig, f"fidelity-{name}-{run.name}", f"fidelity_{name}")

st.subheader("Tables")
for name, table in tables.items():
    with st.expander(f"{name} ({len(table)} rows)", expanded=(name == "conditions")):
        show_table(blank_sentinels(table), readable_headers(table), {c: general for c in table.columns
                                                                           if table[c].dtype.kind in "fi"})
    csv_button(table, f"fidelity-{name}-{run.name}", f"fidelity_{name}_csv", f"{name} as CSV")
with st.expander("Manifest"):
    st.json(manifest.to_dict(), expanded=1)
