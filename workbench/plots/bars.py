"""The layout of a figure of horizontal bars, one row (or group) per selector: rows from the top in
the table's order, a plot area that grows with the rows, and the legend a fixed distance under the
plot, below the x axis title, however many rows there are (`plots.anatomy`, `plots.answer_lines`)."""

from __future__ import annotations

import plotly.graph_objects as go

TOP, BOTTOM = 70, 120  # px above the plot (the title) and below it (axis title, then the legend)
LEGEND_GAP = 75  # px from the plot's bottom edge to the legend's top


def rows_layout(fig: go.Figure, rows: int, row_px: int, least_px: int, barmode: str, title: str) -> go.Figure:
    """Lay `fig` out for `rows` rows of `row_px` each (at least `least_px` of plot), bars `barmode`."""
    plot_px = max(least_px, row_px * rows)
    fig.update_layout(barmode=barmode, title=title, height=plot_px + TOP + BOTTOM,
                      margin={"l": 110, "t": TOP, "b": BOTTOM},
                      legend={"orientation": "h", "y": -LEGEND_GAP / plot_px, "yanchor": "top", "traceorder": "normal"})
    fig.update_yaxes(autorange="reversed", title="")
    return fig
