"""The layout of a figure of horizontal bars, one row (or group) per selector: rows from the top in
the table's order, a plot area that grows with the rows, and the legend a fixed distance under the
plot, below the x axis title, however many rows there are (`plots.anatomy`, `plots.answer_lines`,
`plots.answer_sources`); `rows_at`: the rows such a figure draws at one budget, dense and the splice first."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

TOP, BOTTOM = 70, 120  # px above the plot (the title) and below it (axis title, then the legend)
LEGEND_GAP = 75  # px from the plot's bottom edge to the legend's top
REFERENCES = ("dense", "splice")  # a table's references (budget NaN), drawn first at every budget


def rows_layout(fig: go.Figure, rows: int, row_px: int, least_px: int, barmode: str, title: str) -> go.Figure:
    """Lay `fig` out for `rows` rows of `row_px` each (at least `least_px` of plot), bars `barmode`."""
    plot_px = max(least_px, row_px * rows)
    fig.update_layout(barmode=barmode, title=title, height=plot_px + TOP + BOTTOM,
                      margin={"l": 110, "t": TOP, "b": BOTTOM},
                      legend={"orientation": "h", "y": -LEGEND_GAP / plot_px, "yanchor": "top", "traceorder": "normal"})
    fig.update_yaxes(autorange="reversed", title="")
    return fig



def rows_at(table: pd.DataFrame, budget: float, selectors=None) -> pd.DataFrame:
    """Dense's and the splice's rows of `table` (those it has), then its rows at `budget` for `selectors`
    (default: every one but `full` and `none`, which are dense's and the splice's caches again)."""
    refs = table[table["selector"].isin(REFERENCES)].set_index("selector").reindex(list(REFERENCES)).dropna(
        subset=["cells"]).reset_index()
    at = table[~table["selector"].isin(REFERENCES) & ((table["budget"].astype(float) - budget).abs() < 1e-9)]
    at = at[~at["selector"].isin(["full", "none"])] if selectors is None else at[at["selector"].isin(list(selectors))]
    return pd.concat([refs, at], ignore_index=True)
