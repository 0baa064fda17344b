"""Figure of the unit-of-choice curve (BCR §4.2, Table 8) from a curve run's `summary` table."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from workbench.errors import WorkbenchError

_NEEDED = ("unit", "informed_error", "random_error", "unrepaired_error", "budget_share", "budget_matched",
           "prompts_won", "n_prompts", "p_value")
_METHODS = (("informed (draft attention)", "informed_error", "#1f77b4", "circle"),
            ("random (mean over seeds)", "random_error", "#ff7f0e", "square"))
PAD = 0.15  # decades of room left and right of the smallest and largest unit


def unit_curve_figure(summary: pd.DataFrame) -> go.Figure:
    """Informed vs random attention-output error against the unit of choice (log x).

    The unrepaired error is a dashed line; units whose achieved budget is not matched to the
    nominal one are drawn with open markers and labelled with their share. On a log axis
    plotly reads annotation positions as log10, so the notes sit at x = log10(unit) and the
    axis range is set from the units.
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
    for name, col, color, symbol in _METHODS:
        fig.add_trace(go.Scatter(
            x=s["unit"], y=s[col], name=name, mode="lines+markers", line={"color": color},
            marker={"size": 10, "color": color, "symbol": [symbol if m else f"{symbol}-open" for m in matched],
                    "line": {"width": 2, "color": color}},
            text=hover, hovertemplate="%{text}<br>error %{y:.4f}<extra>" + name + "</extra>"))
    unrepaired = float(s["unrepaired_error"].mean())
    fig.add_hline(y=unrepaired, line_dash="dash", line_color="gray",
                  annotation_text=f"unrepaired {unrepaired:.4f}", annotation_position="top left")
    highest = s[["informed_error", "random_error"]].max(axis=1)
    for u, b, y in zip(s["unit"][~matched], s["budget_share"][~matched], highest[~matched]):
        fig.add_annotation(x=math.log10(u), y=y, text=f"{b:.0%} rows<br>not matched", showarrow=True,
                           arrowhead=2, ax=0, ay=-35, font={"size": 11, "color": "#b22222"})
    low, high = math.log10(s["unit"].min()), math.log10(s["unit"].max())
    fig.update_xaxes(type="log", title="unit of choice (rows per chunk)", tickvals=list(s["unit"]),
                     ticktext=[str(u) for u in s["unit"]], range=[low - PAD, high + PAD])
    top = max(float(highest.max()), unrepaired)
    fig.update_yaxes(title="relative L2 error of the attention output", range=[0, top * 1.25 or 1.0])
    fig.update_layout(title="Value of choosing by unit of choice (open markers: not budget-matched)",
                      template="plotly_white")
    return fig
