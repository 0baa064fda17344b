"""Example explorer: one example of a run, its tokens coloured by a signal, which rows each
selector picks at a budget, layer x token heatmaps, the answers and the deviation left.
Deep links: /explorer?run=NAME&example=ID&budget=0.2."""

from __future__ import annotations

import streamlit as st

import state
from diagnosis_panel import diagnosis_panel
from widgets import choose_run, plain
from workbench.errors import WorkbenchError

st.title("Example explorer")

run = choose_run(("sweep", "diagnosis"), key="explorer_run")
try:
    ids, questions, folders = state.run_examples(run)
except WorkbenchError as err:
    st.warning(f"{plain(run.path)} holds no finished example yet ({plain(err)}). Run "
               f"`kvwb run ... --out RUN` again (it resumes), or wait for a run in progress.")
    st.stop()

asked = st.query_params.get("example")
if "explorer_example" not in st.session_state and asked in ids:
    st.session_state["explorer_example"] = asked
    try:
        st.session_state.setdefault("explorer_budget", float(st.query_params.get("budget", "nan")))
    except ValueError:
        pass
if st.session_state.get("explorer_example") not in ids:
    st.session_state["explorer_example"] = ids[0]
example_id = st.selectbox("Example", ids, key="explorer_example",  # options are plain text, never markdown
                          format_func=lambda i: f"{i}: {questions[i]}" if i in questions else i)
try:
    diagnosis = state.read_diagnosis(folders[example_id])
except (WorkbenchError, OSError) as err:
    st.error(f"Could not read this example of {plain(run.path)}: {plain(err)}")
    st.stop()
diagnosis_panel(diagnosis, "explorer", run.manifest)
