"""Figure of the unit-of-choice curve (BCR §4.2, Table 8) from `load_curve(...)[2]`."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.errors import WorkbenchError

_NEEDED = ("unit", "informed_error", "random_error", "unrepaired_error", "budget_share", "budget_matched",
           "prompts_won", "n_prompts", "p_value")


def unit_curve_figure(summary: pd.DataFrame) -> go.Figure:
    """Informed vs random attention-output error against the unit of choice (log x).

    The unrepaired error is a dashed line; units whose achieved budget is not matched to
    the nominal one are drawn with open markers and labelled with their share.
    """
    missing = [c for c in _NEEDED if c not in summary.columns]
    if missing:
        raise WorkbenchError(f"not a unit-curve summary: missing columns {missing}")
    if summary.empty:
        raise WorkbenchError("the unit-curve summary is empty")
    s = summary.sort_values("unit").reset_index(drop=True)
    matched = s["budget_matched"].astype(bool)
    hover = [f"unit {u}<br>budget {b:.1%} ({'matched' if m else 'NOT budget-matched'})"
             f"<br>informed won {w}/{n} (p={'n/a' if pd.isna(p) else f'{p:.2f}'})"
             for u, b, m, w, n, p in zip(s["unit"], s["budget_share"], matched, s["prompts_won"],
                                         s["n_prompts"], s["p_value"])]
    fig = go.Figure()
    for name, col, color, symbol in (("informed (draft attention)", "informed_error", "#1f77b4", "circle"),
                                     ("random (mean over seeds)", "random_error", "#ff7f0e", "square")):
        fig.add_trace(go.Scatter(
            x=s["unit"], y=s[col], name=name, mode="lines+markers", line=dict(color=color),
            marker=dict(size=10, color=color, symbol=[symbol if m else f"{symbol}-open" for m in matched],
                        line=dict(width=2, color=color)),
            text=hover, hovertemplate="%{text}<br>error %{y:.4f}<extra>" + name + "</extra>"))
    unrepaired = float(s["unrepaired_error"].mean())
    fig.add_hline(y=unrepaired, line_dash="dash", line_color="gray",
                  annotation_text=f"unrepaired {unrepaired:.4f}", annotation_position="top left")
    for u, b, y in zip(s["unit"][~matched], s["budget_share"][~matched],
                       s[["informed_error", "random_error"]].max(axis=1)[~matched]):
        fig.add_annotation(x=u, y=y, text=f"{b:.0%} rows<br>not matched", showarrow=True, arrowhead=2,
                           ax=0, ay=-35, font=dict(size=11, color="#b22222"))
    fig.update_xaxes(type="log", title="unit of choice (rows per chunk)", tickvals=list(s["unit"]),
                     ticktext=[str(u) for u in s["unit"]])
    fig.update_yaxes(title="relative L2 error of the attention output", rangemode="tozero")
    fig.update_layout(title="Value of choosing by unit of choice (open markers: not budget-matched)",
                      template="plotly_white", legend=dict(x=0.01, y=0.01, xanchor="left", yanchor="bottom"))
    return fig
