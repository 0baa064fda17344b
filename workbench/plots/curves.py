"""Figures across a data set: accuracy and flips against budget, rows against accuracy, flip
matrix. Inputs are the tables of `workbench.experiments.summary` and `.flips`.

Each selector keeps its colour and marker (`plots.colors`). Curves of different selectors
often coincide (same budget, same accuracy), so each selector's points are moved sideways
by a small fixed offset (`colors.dodge`); hover always shows the true values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.plots.colors import dodge, selector_color, selector_style
from workbench.plots.text import escape
from workbench.selectors.registry import reference_selectors

DODGE = 0.3  # share of the smallest gap between budgets that a budget's points spread over
DODGE_ROWS = 0.06  # share of the rows axis's data range the points at one budget spread over
_REFERENCE_NAMES = {"none": ("reuse all", "bottom left"), "full": ("full recompute", "top right")}


def _spread(values, share: float) -> float:
    """`share` of the smallest gap between the distinct values (of their range when one)."""
    distinct = np.unique(np.asarray(values, dtype=float))
    if len(distinct) > 1:
        return share * float(np.diff(distinct).min())
    return share * (abs(float(distinct[0])) if len(distinct) and distinct[0] else 1.0)


METRIC_TITLES = {"em": "exact match", "flip_rate": "flip rate vs dense", "f1_to_dense": "F1 to the dense answer",
                 "first_token_agree": "first token = dense's", "dense_logprob_mean":
                 "dense answer's log-prob per token", "agree_prefix": "leading tokens = dense's",
                 "first_kl": "KL(dense || cell), first token"}
_INTERVALS = {"em": ("em_low", "em_high"), "flip_rate": ("flip_low", "flip_high")}


def budget_curve(summary: pd.DataFrame, metric: str = "em", title: str = "") -> go.Figure:
    """A summary column (`em`, `flip_rate` or a graded outcome such as `f1_to_dense`) against
    budget, per selector, with its 95% interval where the summary has one (`METRIC_LOW/_HIGH`);
    the references (reuse all, full recompute) drawn as dashed horizontal lines."""
    low, high = _INTERVALS.get(metric, (f"{metric}_low", f"{metric}_high"))
    bars = low in summary and high in summary
    references = reference_selectors()
    labels = [s for s in dict.fromkeys(summary["selector"]) if s not in references]
    offsets = dodge(labels, _spread(summary["budget"], DODGE))
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        line = line.sort_values("budget")
        if label in references:
            fig.add_hline(y=float(line[metric].mean()), line={"dash": "dash", "color": selector_color(label)},
                          annotation_text=escape(_REFERENCE_NAMES.get(label, (label,))[0]),
                          annotation_position=_REFERENCE_NAMES.get(label, ("", "top left"))[1])
            continue
        fig.add_trace(go.Scatter(
            x=line["budget"] + offsets[label], y=line[metric], mode="lines+markers", name=escape(label),
            text=[f"b = {b:g}" for b in line["budget"]],
            hovertemplate="%{text}<br>%{y:.3f}<extra>" + escape(label) + "</extra>",
            error_y={"type": "data", "symmetric": False, "array": line[high] - line[metric],
                     "arrayminus": line[metric] - line[low], "thickness": 1} if bars else None,
            **selector_style(label)))
    budgets = sorted(summary["budget"].unique())
    fig.update_xaxes(title="budget b (share of reused rows recomputed; points of each selector slightly apart)",
                     tickvals=budgets, ticktext=[f"{b:g}" for b in budgets])
    fig.update_yaxes(title=METRIC_TITLES.get(metric, metric),
                     rangemode="tozero" if summary[metric].min() >= 0 else "normal")
    fig.update_layout(title=title, height=420)
    return fig


def rows_vs_accuracy(summary: pd.DataFrame, title: str = "") -> go.Figure:
    """Rows recomputed per example against exact match, one line per selector (points dodged)."""
    labels = list(dict.fromkeys(summary["selector"]))
    rows = summary["rows_per_example"].astype(float)
    width = float(rows.max() - rows.min()) if len(rows) else 0.0
    offsets = dodge(labels, DODGE_ROWS * (width or 1.0))
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        line = line.sort_values("rows_per_example")
        fig.add_trace(go.Scatter(
            x=line["rows_per_example"] + offsets[label], y=line["em"], mode="lines+markers", name=escape(label),
            text=[f"b = {b:g}<br>{r:.1f} rows" for b, r in zip(line["budget"], line["rows_per_example"])],
            hovertemplate="%{text}<br>EM %{y:.3f}<extra>" + escape(label) + "</extra>",
            **selector_style(label)))
    fig.update_xaxes(title="rows recomputed per example (points of each selector slightly apart)")
    fig.update_yaxes(title="exact match")
    fig.update_layout(title=title, height=420)
    return fig


def flip_matrix_figure(matrix: pd.DataFrame, title: str = "") -> go.Figure:
    """Examples x selectors: red where the repaired answer flips against dense; a drawn control's
    cell is the share of its draws that flip (a shade between)."""
    fig = go.Figure(go.Heatmap(z=matrix.to_numpy().astype(float), x=[escape(c) for c in matrix.columns],
                               y=[escape(i) for i in matrix.index], zmin=0, zmax=1,
                               colorscale=[[0, "#e8f1e4"], [1, "#c0392b"]], xgap=1, ygap=1,
                               colorbar={"title": {"text": "flips<br>(coin: share<br>of draws)"},
                                         "tickvals": [0, 0.5, 1], "ticktext": ["kept", "½", "flipped"],
                                         "len": 0.5, "y": 1, "yanchor": "top"},
                               hovertemplate="example %{y}<br>%{x}<br>flips in %{z:.0%} of its draws"
                                             "<extra></extra>"))
    # every example labelled while the labels fit (18 px a row); a large study gets a taller
    # figure capped at MAX_MATRIX_HEIGHT, its rows thinner and its labels thinned by plotly
    labelled = len(matrix) <= LABELLED_ROWS
    fig.update_yaxes(title="example", autorange="reversed", type="category", **({"dtick": 1} if labelled else {}))
    fig.update_layout(title=title, height=min(MAX_MATRIX_HEIGHT, max(300, 18 * len(matrix) + 120)))
    return fig


LABELLED_ROWS = 120
MAX_MATRIX_HEIGHT = 2400
