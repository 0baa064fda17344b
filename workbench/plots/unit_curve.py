"""Figure of the unit-of-choice curve (BCR §4.2, Table 8) from a curve run's `summary` table."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from workbench.errors import WorkbenchError
from workbench.plots.colors import selector_color, selector_symbol, series_color
from workbench.plots.marks import reference_line

_NEEDED = ("unit", "informed_error", "random_error", "unrepaired_error", "budget_share", "budget_matched",
           "prompts_won", "n_prompts", "p_value")
# the informed arm chooses by BCR's draft attention, the other at random: those selectors' colours
_METHODS = (("informed (draft attention)", "informed_error", "bcr"),
            ("random (mean over seeds)", "random_error", "random"))
PAD = 0.15  # decades of room left and right of the smallest and largest unit


def unit_curve_figure(summary: pd.DataFrame) -> go.Figure:
    """Informed vs random attention-output error against the unit of choice (log x).

    The unrepaired error is a dashed line named in the legend; units whose achieved budget is not
    matched to the nominal one are drawn with open markers, and their share of rows is written
    under the unit's tick label (no note on the plotting area, where lines would cross it).
    """
    missing = [c for c in _NEEDED if c not in summary.columns]
    if missing:
        raise WorkbenchError(f"not a unit-curve summary: missing columns {missing}")
    if summary.empty:
        raise WorkbenchError("the unit-curve summary is empty")
    s = summary.sort_values("unit").reset_index(drop=True)
    if (s["unit"] <= 0).any():
        raise WorkbenchError(f"units must be positive for a log axis, got {sorted(s['unit'])}")
    matched = s["budget_matched"].astype(bool)
    hover = [f"unit {u}<br>budget {b:.1%} ({'matched' if m else 'NOT budget-matched'})"
             f"<br>informed won {w}/{n} (p={'n/a' if pd.isna(p) else f'{p:.2f}'})"
             for u, b, m, w, n, p in zip(s["unit"], s["budget_share"], matched, s["prompts_won"],
                                         s["n_prompts"], s["p_value"])]
    fig = go.Figure()
    unrepaired = float(s["unrepaired_error"].mean())
    reference_line(fig, unrepaired, f"unrepaired {unrepaired:.4f}", series_color("unrepaired"))
    for name, col, selector in _METHODS:
        color, symbol = selector_color(selector), selector_symbol(selector)
        fig.add_trace(go.Scatter(
            x=s["unit"], y=s[col], name=name, mode="lines+markers", line={"color": color},
            marker={"size": 10, "color": color, "symbol": [symbol if m else f"{symbol}-open" for m in matched],
                    "line": {"width": 2, "color": color}},
            text=hover, hovertemplate="%{text}<br>error %{y:.4f}<extra>" + name + "</extra>"))
    low, high = math.log10(s["unit"].min()), math.log10(s["unit"].max())
    ticks = [str(u) if m else f"{u}<br><i>{b:.0%} rows</i>"
             for u, b, m in zip(s["unit"], s["budget_share"], matched)]
    fig.update_xaxes(type="log", title="unit of choice (rows per chunk)", tickvals=list(s["unit"]),
                     ticktext=ticks, range=[low - PAD, high + PAD])
    top = max(float(s[["informed_error", "random_error"]].max(axis=1).max()), unrepaired)
    fig.update_yaxes(title="relative L2 error of the attention output", range=[0, top * 1.15 or 1.0])
    fig.update_layout(title="Value of choosing by unit of choice (open markers: not budget-matched, their share of rows under the unit)",
                      template="plotly_white", legend={"orientation": "h", "x": 0, "y": -0.3, "yanchor": "top"},
                      margin={"b": 120})
    return fig
