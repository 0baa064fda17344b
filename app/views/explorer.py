"""Example explorer: one example of a run, its tokens coloured by a signal, which rows each
selector picks at a budget, layer x token heatmaps, the answers and the deviation left."""

from __future__ import annotations

import streamlit as st

import common
from workbench.errors import WorkbenchError

st.title("Example explorer")

run = common.choose_run(("sweep", "diagnosis"), key="explorer_run")
examples = common.run_examples(run)
if not examples:
    st.warning(f"`{run.path}` holds no finished example yet (no diagnoses/*/diagnosis.json). "
               f"Run `kvwb run ... --out {run.path}` (it resumes), or wait for a run in progress.")
    st.stop()

questions = {}
if (run.path / "examples.parquet").is_file():
    try:
        table = common.read_table(run.path / "examples.parquet")
        questions = dict(zip(table["example_id"].astype(str), table["question"]))
    except Exception:  # noqa: BLE001 - the ids alone still work
        questions = {}
ids = [i for i, _ in examples]
folders = dict(examples)
asked = st.query_params.get("example")  # deep link: ?run=NAME&example=ID&budget=B
if "explorer_example" not in st.session_state and asked in ids:
    st.session_state["explorer_example"] = asked
    try:
        st.session_state.setdefault("explorer_budget", float(st.query_params.get("budget", "nan")))
    except ValueError:
        pass
if st.session_state.get("explorer_example") not in ids:
    st.session_state["explorer_example"] = ids[0]
example_id = st.selectbox("Example", ids, key="explorer_example",
                          format_func=lambda i: f"{i}: {questions[i]}" if i in questions else i)
try:
    diagnosis = common.load_diagnosis(folders[example_id])
except (WorkbenchError, OSError, ValueError, KeyError) as err:
    st.error(f"Could not read example {example_id} of `{run.path}`: {err}")
    st.stop()
missing = [t for t in ("tokens", "selections", "outcomes", "deviation", "residual", "token_signals", "layer_signals")
           if t not in diagnosis.tables]
if missing:
    st.error(f"`{folders[example_id]}` lacks the tables {', '.join(missing)} (made by an older version?); "
             f"re-run it with `kvwb run` or `kvwb diagnose`.")
    st.stop()
common.diagnosis_view(diagnosis, "explorer", run.manifest)
