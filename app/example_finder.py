"""The explorer's example list: search over questions, filters by outcome, sorting, and previous /
next buttons (keys P and N). The finding itself is `workbench.experiments.find`."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from widgets import ensure_choice, plain
from workbench.app_api import FILTERS, WorkbenchError, find_examples, reference_selectors

RUN_ORDER = "(the run's order)"


def find(examples: pd.DataFrame, outcomes: pd.DataFrame, key: str) -> list[str]:
    """The example ids the user's search, filter and sort keep, in order (widgets keyed `key_*`)."""
    active = any(st.session_state.get(f"{key}_{k}") not in (None, "", "all", RUN_ORDER)
                 for k in ("search", "filter", "sort"))
    with st.expander("Find examples: search, filter, sort", expanded=active):
        c1, c2, c3 = st.columns([2, 2, 2])
        text = c1.text_input("Search the questions", key=f"{key}_search")
        keep = c2.selectbox("Keep", list(FILTERS), key=f"{key}_filter", format_func=FILTERS.get)
        columns = [RUN_ORDER, *[c for c in examples.columns if c not in ("folder", "question", "gold")]]
        ensure_choice(f"{key}_sort", columns, RUN_ORDER)
        sort = c3.selectbox("Sort by", columns, key=f"{key}_sort")
        descending = c3.toggle("Descending", key=f"{key}_descending")
        a = b = budget = None
        if keep == "a_not_b":
            selectors = [s for s in dict.fromkeys(outcomes["selector"]) if s not in reference_selectors()]
            budgets = sorted(float(v) for v in outcomes["budget"].unique())
            d1, d2, d3 = st.columns(3)
            ensure_choice(f"{key}_a", selectors, selectors[0])
            a = d1.selectbox("A", selectors, key=f"{key}_a")
            ensure_choice(f"{key}_b", selectors, selectors[-1])
            b = d2.selectbox("B", selectors, key=f"{key}_b")
            ensure_choice(f"{key}_find_budget", budgets, budgets[0])
            budget = d3.selectbox("at budget", budgets, key=f"{key}_find_budget", format_func=lambda v: f"{v:g}")
        try:
            found = find_examples(examples, outcomes, text=text, keep=keep, a=a, b=b, budget=budget,
                                  sort=None if sort == RUN_ORDER else sort, descending=descending)
        except WorkbenchError as err:
            st.warning(plain(err))
            found = [str(i) for i in examples["example_id"]]
        st.caption(f"{len(found)} of {len(examples)} examples")
    return found


def step(key: str, ids: list[str], by: int) -> None:
    """A button callback: the previous (-1) or next (+1) example of the list."""
    current = st.session_state.get(key)
    at = ids.index(current) if current in ids else -1
    st.session_state[key] = ids[min(len(ids) - 1, max(0, at + by))]


def previous_next(key: str, ids: list[str]) -> None:
    """Previous / next buttons over `ids` (keyboard: P and N) for the select box keyed `key`."""
    at = ids.index(st.session_state[key]) if st.session_state.get(key) in ids else 0
    row = st.container(horizontal=True, vertical_alignment="center")
    row.button("← Previous", key=f"{key}_previous", on_click=step, args=(key, ids, -1), disabled=at <= 0,
               shortcut="p", help="Keyboard: P")
    row.button("Next →", key=f"{key}_next", on_click=step, args=(key, ids, 1), disabled=at >= len(ids) - 1,
               shortcut="n", help="Keyboard: N")
    row.caption(f"example {at + 1} of {len(ids)}")
