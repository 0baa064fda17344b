"""KV Repair Workbench: the browser face (`make app`, or `streamlit run app/Home.py`).

This entry point sets the page up, imports the user's plugins ($KVWB_PLUGINS), draws the
shared sidebar and registers the pages with `st.navigation`; each view is its own module
under `app/views/`. (Not `app/pages/`: with a folder of that name next to the entry point,
Streamlit starts in its old pages-folder mode.) The app binds localhost by default
(`.streamlit/config.toml`); the explorer takes deep links: /explorer?run=NAME&example=ID&budget=0.2.
"""

from __future__ import annotations

import streamlit as st

import demo
import state
import status
import widgets
from navigation import PAGES
from workbench.app_api import model_choices

st.set_page_config(page_title="KV Repair Workbench", page_icon=":material/memory:", layout="wide")

plugin_problems = state.load_plugins()
navigation = st.navigation([st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url, default=(name == "runs"))
                            for name, p in PAGES.items()])

with st.sidebar:
    status.status_area()  # pending work and kept errors; errors the page reports join it
state.runs_root()
st.sidebar.text_input("Runs directory", key="runs_dir",
                      help=f"Folder holding run folders (from ${state.RUNS_ENV}, default `runs`).")
state.model_spec()
st.sidebar.text_input("Model for Live and the demo run", key="model_spec",
                      help=f"An embedded model ({', '.join(model_choices())}), a local Hugging Face folder, or "
                           f"hub:ORG/NAME (first taken from ${state.MODEL_ENV}). Each model loads once per process.")
for problem in plugin_problems:
    st.sidebar.error(widgets.plain(problem))
if not widgets.has_kaleido():
    st.sidebar.caption("Figures export as HTML; PNG export needs kaleido (`pip install kaleido`).")
job = demo.demo_job()
if job.running:
    st.sidebar.caption(f"Demo run in progress: {job.done()} of {job.n} examples")
navigation.run()
