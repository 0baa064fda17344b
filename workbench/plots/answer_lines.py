"""What a whole answer names beyond its first line, at one budget (from
`experiments.answer_lines.first_line_table`, a run made with `--no-stop-at-newline`): per selector two
bars, `retrieved` of the first line (what the default rule scores) and of the whole answer, with the
splice and dense above them. A selector whose bars part far has its evidence past a line break."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.plots.bars import rows_at, rows_layout
from workbench.plots.text import escape

SERIES = {  # column: (legend name, colour); colour-blind safe (Okabe-Ito)
    "retrieved_first_line": ("first line (the default rule)", "#999999"),
    "retrieved_whole": ("whole answer", "#0072B2"),
}


def first_line_figure(table: pd.DataFrame, budget: float, selectors=None, title: str = "") -> go.Figure:
    """Grouped horizontal bars of `table` (selector, budget, cells, retrieved_first_line, retrieved_whole,
    share_more) at `budget` for `selectors` (default: every one but `full` and `none`, which are dense's
    and the splice's caches again), under dense and the splice."""
    rows = rows_at(table, budget, selectors)
    names = [escape(s) for s in rows["selector"]]
    fig = go.Figure()
    for column, (label, colour) in SERIES.items():
        fig.add_trace(go.Bar(y=names, x=rows[column].astype(float).to_numpy(), name=label, orientation="h",
                             marker_color=colour, customdata=rows[["share_more", "cells"]].astype(float).to_numpy(),
                             texttemplate="%{x:.2f}", textposition="outside", cliponaxis=False,  # a zero reads "0.00"
                             hovertemplate="%{y}: %{x:.3f} " + label + "<br>whole answer names more in "
                                           "%{customdata[0]:.0%} of %{customdata[1]:.0f} cells<extra></extra>"))
    rows_layout(fig, len(names), 40, 140, "group",
                title or f"What the whole answer names beyond its first line, b = {budget:g}")
    fig.update_xaxes(title="retrieved (the task's rule), mean over cells", range=[0, 1.02])
    return fig
