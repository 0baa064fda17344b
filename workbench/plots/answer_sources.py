"""Where the answers' words come from, at one budget (from `experiments.answer_sources.answer_sources_table`):
left, per selector under dense and the splice, a bar stacked by the share of answer words traced to
the evidence, the prompt, the passages around the evidence, the passages without any, and nowhere;
right, the share of answers that recite the passages outside the evidence. A repair whose bar turns
from the evidence's colour to the passages' is reading back the haystack or a distractor."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.bars import rows_at, rows_layout
from workbench.plots.text import escape

SOURCE_STYLE = {  # column: (legend name, colour); colour-blind safe (Okabe-Ito)
    "evidence": ("the evidence", "#009E73"),
    "prompt": ("the prompt", "#999999"),
    "same_passage": ("its passages' other text", "#E69F00"),
    "other_passages": ("passages without evidence", "#D55E00"),
    "new": ("nowhere", "#56B4E9"),
}
RECITES_COLOUR = "#CC79A7"


def answer_sources_figure(table: pd.DataFrame, budget: float, selectors=None, title: str = "") -> go.Figure:
    """Stacked word shares and the reciting share of `table` at `budget` for `selectors` (default: every
    one but `full` and `none`, which are dense's and the splice's caches again), under dense and the splice."""
    rows = rows_at(table, budget, selectors)
    names = [escape(s) for s in rows["selector"]]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[0.72, 0.28], horizontal_spacing=0.04)
    for column, (label, colour) in SOURCE_STYLE.items():
        fig.add_trace(go.Bar(y=names, x=rows[column].astype(float).to_numpy(), name=label, orientation="h",
                             marker_color=colour, customdata=rows[["answered", "cells"]].astype(float).to_numpy(),
                             hovertemplate="%{y}: %{x:.1%} of the words from " + label + " (mean over the "
                                           "%{customdata[0]:.0f} of %{customdata[1]:.0f} answers with words)"
                                           "<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(y=names, x=rows["recites_context"].astype(float).to_numpy(), orientation="h",
                         name="answers reciting the passages", marker_color=RECITES_COLOUR,
                         texttemplate="%{x:.2f}", textposition="outside", cliponaxis=False,
                         hovertemplate="%{y}: %{x:.1%} of answers recite the passages outside the evidence"
                                       "<extra></extra>"), row=1, col=2)
    rows_layout(fig, len(names), 26, 140, "stack",
                title or f"Where the answers' words come from, b = {budget:g}")
    fig.update_xaxes(title="share of answer words", range=[0, 1], row=1, col=1)
    fig.update_xaxes(title="share of answers reciting", range=[0, 1.2], tickvals=[0, 0.5, 1], row=1, col=2)
    return fig
