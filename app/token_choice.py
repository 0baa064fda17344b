"""Linked selection: the token chosen in the strip (a click on its cell, or the select box beside
it) is outlined in every heatmap and the picks matrix, and its value in every signal is listed.
The choice lives in `st.session_state[KEY_token]` (the explorer's permalink keeps it too)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from readable import count, show_table
from widgets import plain
from workbench.app_api import Diagnosis
from workbench.plots import diagnosis as figures
from workbench.plots.text import visible


def token_key(key: str) -> str:
    return f"{key}_token"


def take_click(key: str) -> None:
    """The strip's selection callback: the clicked cell's position becomes the chosen token."""
    event = st.session_state.get(f"{key}_strip_chart")
    points = event.selection.points if event else []
    clicked = [p["customdata"][0] for p in points if p.get("customdata")]
    if clicked:
        st.session_state[token_key(key)] = int(clicked[0])


def token_picker(d: Diagnosis, key: str, where) -> int | None:
    """The select box of the chosen token (None: no token chosen) in `where`; its position."""
    reused = d.tokens[d.tokens["reused"]]
    options = [None, *(int(p) for p in reused["position"])]
    words = dict(zip(reused["position"].astype(int), reused["token"]))
    if st.session_state.get(token_key(key)) not in options:
        st.session_state[token_key(key)] = None
    return where.selectbox("Chosen token (or click a token in the strip)", options, key=token_key(key),
                           format_func=lambda p: "none" if p is None else f"pos {p}: {visible(words[p])!r}",
                           help="The chosen token is outlined in the strip, in the picks matrix and in every "
                                "heatmap, and its value in every signal is listed below the strip.")


def token_card(d: Diagnosis, key: str, budget: float, chosen: list[str], position: int | None) -> None:
    """The chosen token's value in every signal and the selectors that recompute it."""
    if position is None:
        return
    card = figures.token_values(d, budget, chosen or None)
    if position not in card.index:
        return
    row = card.loc[position]
    st.markdown(f"**Token at position {position}** ({plain(row['segment'])}): picked at b = {budget:g} by "
                f"{plain(row['picked by']) or 'none of the selectors shown'}")
    values = row.drop(["token", "segment", "picked by"])
    ranks = card[values.index].rank(ascending=False, method="min").loc[position]
    rank = f"rank of {len(card)} reused tokens (1 = highest)"
    card_table = pd.DataFrame({"signal": values.index, "value": values.to_numpy(dtype=float),
                               rank: ranks.to_numpy(dtype=float)})
    show_table(card_table, {c: c for c in card_table.columns},
               {"value": lambda v: "" if pd.isna(v) else f"{v:.4g}", rank: count},
               key=f"{key}_token_card")  # a signal without a value here: blank
