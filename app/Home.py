"""KV Repair Workbench: the browser face (`make app`, or `streamlit run app/Home.py`).

This entry point only sets the page up, draws the shared sidebar and registers the pages with
`st.navigation`; each view is its own module under `app/views/`. (Not `app/pages/`: with a
folder of that name next to the entry point, Streamlit starts in its old pages-folder mode
and runs a deep link such as /explorer without this entry point until someone opens the
root.) Runs are read from the runs directory ($KVWB_RUNS, default `runs`; changeable in the
sidebar); Live and the demo run use the model $KVWB_MODEL (default the embedded
`smollm2-135m`), loaded once per process. The explorer takes deep links:
/explorer?run=NAME&example=ID&budget=0.2.
"""

from __future__ import annotations

import streamlit as st

import common

st.set_page_config(page_title="KV Repair Workbench", page_icon=":material/memory:", layout="wide")

pages = [st.Page(path, title=title, icon=icon, url_path=url, default=(name == "runs"))
         for name, (path, title, icon, url) in common.PAGES.items()]
navigation = st.navigation(pages)
common.sidebar()
navigation.run()
