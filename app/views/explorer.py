"""Example explorer: one example of a run, its tokens coloured by a signal, which rows each
selector picks at a budget, layer x token heatmaps, the answers and the deviation left.
The examples can be searched, filtered and sorted, and stepped through (P / N). The URL holds
the view: /explorer?run=NAME&example=ID&budget=0.2&selectors=cadence-grad,cacheblend&signal=...&layer=5,
kept current as the widgets change, and opening such a link restores it (also the chosen token,
&token=POSITION, and the two selectors set against each other, &a=...&b=...)."""

from __future__ import annotations

import streamlit as st

import state
from compare_panel import runs_against
from diagnosis_panel import DEVIATION, diagnosis_panel
from example_finder import find, previous_next
from live_fields import open_in_live
from permalink import Permalink
from status import report_error
from widgets import choose_run, plain
from workbench.app_api import WorkbenchError

LINK = Permalink({"run": "explorer_run", "example": "explorer_example", "budget": "explorer_budget",
                  "selectors": "explorer_selectors", "signal": "explorer_signal", "layer": "explorer_layer",
                  "token": "explorer_token", "a": "explorer_vs_a", "b": "explorer_vs_b"},
                 page="explorer")

st.title("Example explorer")
LINK.apply()

run = choose_run(("sweep", "diagnosis"), key="explorer_run")
try:
    ids, questions, folders = state.run_examples(run)
except WorkbenchError as err:
    st.warning(f"{plain(run.path)} holds no finished example yet ({plain(err)}). Run "
               f"`kvwb run ... --out RUN` again (it resumes), or wait for a run in progress.")
    st.stop()

shown = ids
if run.kind == "sweep" and len(ids) > 1:
    sweep = state.read_sweep(run.path)
    found = find(sweep.examples[sweep.examples["example_id"].astype(str).isin(set(ids))], sweep.outcomes, "explorer")
    shown = [i for i in found if i in folders]
    if not shown:
        st.info("No example matches the search and the filter: change them above.")
        st.stop()
if st.session_state.get("explorer_example") not in shown:
    st.session_state["explorer_example"] = shown[0]
example_id = st.selectbox("Example", shown, key="explorer_example",  # options are plain text, never markdown
                          format_func=lambda i: f"{i}: {questions[i]}" if i in questions else i)
if len(shown) > 1:
    previous_next("explorer_example", shown)
try:
    diagnosis = state.read_diagnosis(folders[example_id])
except (WorkbenchError, OSError) as err:
    report_error(f"Could not read example {example_id} of {run.path}: {err}", once=f"read-{run.path}-{example_id}")
    st.error(f"Could not read this example of {plain(run.path)}: {plain(err)}")
    st.stop()
if st.button("Open in Live (edit the passages and run again)", key="explorer_to_live",
             help="The Live page with this example's passages, question, selectors and budgets in its fields."):
    open_in_live(diagnosis)
shown_view = diagnosis_panel(diagnosis, "explorer", run.manifest)
if shown_view is not None:
    runs_against(diagnosis, "explorer", run.name, *shown_view)

url = LINK.write(skip=() if st.session_state.get("explorer_signal") == DEVIATION else ("layer",))
st.caption("Link to this view (the URL above follows every change; the button at the right of the box copies it):")
st.code(url, language=None)
