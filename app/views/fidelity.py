"""Fidelity vs consumability: the plots of `kvwb fidelity` runs. Is a cache that is close in
geometry to the reader's own usable by the reader?"""

from __future__ import annotations

import streamlit as st

import common
from workbench.errors import WorkbenchError

st.title("Fidelity vs consumability")
st.caption("Transfer (share of questions the reader answers from a substituted cache) against how close the "
           "substitute is to the reader's own cache, with the masked floor and the native reference.")

try:  # the fidelity probe is a separate module; an older install may lack it
    from workbench.experiments.fidelity import load_tables
    from workbench.plots import fidelity as fidelity_plots
except ImportError as err:
    st.warning(f"This version of the workbench has no fidelity probe ({err}).")
    st.stop()

run = common.choose_run(("fidelity",), key="fidelity_run")
try:
    tables = load_tables(run.path)
except (WorkbenchError, OSError, ValueError) as err:
    st.warning(f"Could not read the fidelity run `{run.path}`: {err}. Re-run `kvwb fidelity --out {run.path} "
               f"--force` with this version.")
    st.stop()

manifest = run.manifest or {}
conditions = tables["conditions"]
st.markdown(f"`{run.name}`: model `{manifest.get('model', {}).get('name', '?')}`, "
            f"{manifest.get('n_examples', '?')} questions · metric: {manifest.get('metric', '?')}")
anchors = tables.get("anchors")
if anchors is not None and not anchors.empty:
    st.dataframe(anchors, hide_index=True)

x = st.radio("Cosine of", ["key_cos", "value_cos", "key_cos_fact"], horizontal=True, key="fidelity_x",
             format_func=lambda c: {"key_cos": "keys", "value_cos": "values",
                                    "key_cos_fact": "keys of the fact's rows"}[c])
figures = [
    ("transfer-vs-cosine", lambda: fidelity_plots.transfer_vs_cosine(conditions, x=x)),
    ("layer-sweep", lambda: fidelity_plots.layer_sweep(conditions)),
    ("bank", lambda: fidelity_plots.bank_heatmap(conditions)),
    ("pool-scaling", lambda: fidelity_plots.pool_scaling(conditions)),
]
for name, make in figures:
    try:
        fig = make()
    except (KeyError, ValueError, WorkbenchError) as err:
        st.info(f"No {name.replace('-', ' ')} figure for this run ({type(err).__name__}: {err}).")
        continue
    common.show_figure(fig, f"fidelity-{name}-{run.name}", f"fidelity_{name}")

st.subheader("Tables")
for name, table in tables.items():
    with st.expander(f"{name} ({len(table)} rows)", expanded=(name == "conditions")):
        st.dataframe(table, hide_index=True, width="stretch")
    common.csv_button(table, f"fidelity-{name}-{run.name}", f"fidelity_{name}_csv", f"{name} as CSV")
with st.expander("Manifest"):
    st.json(manifest, expanded=1)
