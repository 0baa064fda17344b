"""What each answer's lost exact matches are, at one budget (from `experiments.gap_anatomy.cell_anatomy`):
one horizontal bar per selector, stacked lost the gold / named it only inside a longer word / named it and ran on /
named it and ended otherwise (the lost gold's answers of no token, ended at once, apart where counted). A bar
that is mostly "ran on" is a gap in how answers stop, not in what they found."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.plots.bars import rows_layout
from workbench.plots.text import escape

SILENT_STYLE = ("lost the gold: named nothing (ended at once)", "#E69F00")  # a part of lost_gold, where recorded
KIND_STYLE = {  # kind: (legend name, colour); colour-blind safe (Okabe-Ito)
    "lost_gold": ("lost the gold", "#D55E00"),
    "in_word": ("named it only inside a longer word", "#CC79A7"),
    "ran_on": ("named it, ran on past dense", "#56B4E9"),
    "other": ("named it, ended otherwise", "#999999"),
}


def _at(table: pd.DataFrame, budget: float, selectors=None) -> pd.DataFrame:
    """The rows of `table` the figure draws: at `budget`, `selectors` (default: every one but `full`)."""
    at = table[(table["budget"].astype(float) - budget).abs() < 1e-9]
    return at[at["selector"] != "full"] if selectors is None else at[at["selector"].isin(list(selectors))]


def silent_drawn(table: pd.DataFrame, budget: float, selectors=None) -> bool | None:
    """Whether the figure draws a 'named nothing' segment: None where the table does not count
    `silent` (no token counts), draws no bar at the budget, or counts none but not every bar, False
    where every bar counts none. (A bar not counted beside one that has some is drawn unsplit: all
    lost gold.)"""
    return _silent_in(_at(table, budget, selectors))


def _silent_in(at: pd.DataFrame) -> bool | None:
    """`silent_drawn` of the rows drawn."""
    if "silent" not in at or at.empty:
        return None
    silent = at["silent"]
    if (silent.fillna(0) > 0).any():
        return True
    return None if silent.isna().any() else False


def gap_anatomy_figure(table: pd.DataFrame, budget: float, selectors=None, title: str = "") -> go.Figure:
    """Stacked bars of `table` (selector, budget, lost_gold, in_word, ran_on, other; a drawn control's mean per
    draw) at `budget`, for `selectors` (default: every one but `full`), in the table's order. Where the
    table counts `silent` (lost-gold answers of no token) and some bar has any, they are a segment of
    their own, first, and the lost-gold segment holds the rest."""
    at = _at(table, budget, selectors)
    names = [escape(s) for s in at["selector"]]
    silent = at["silent"].fillna(0) if _silent_in(at) else None
    segments = ([(SILENT_STYLE, silent), (KIND_STYLE["lost_gold"], at["lost_gold"] - silent)] if silent is not None
                else [(KIND_STYLE["lost_gold"], at["lost_gold"])])
    segments += [(KIND_STYLE[kind], at[kind]) for kind in KIND_STYLE if kind != "lost_gold"]
    fig = go.Figure()
    for (label, colour), counts in segments:
        fig.add_trace(go.Bar(y=names, x=counts.to_numpy(), name=label, orientation="h", marker_color=colour,
                             hovertemplate="%{y}: %{x:g} " + label + "<extra></extra>"))
    rows_layout(fig, len(names), 24, 120, "stack", title or f"What each answer's lost exact matches are, b = {budget:g}")
    fig.update_xaxes(title="examples where dense is right and the answer is wrong", rangemode="tozero")
    return fig
