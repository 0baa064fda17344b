"""Figures across a data set: accuracy and flips against budget, rows against accuracy, flip
matrix. Inputs are the tables of `workbench.experiments.summary` and `.flips`."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

_REFERENCE = ("none", "full")


def budget_curve(summary: pd.DataFrame, metric: str = "em", title: str = "") -> go.Figure:
    """Accuracy (`em`) or flip rate (`flip_rate`) against budget, per selector, with Wilson 95%
    intervals; reuse-all and full recompute drawn as dashed reference lines."""
    low, high = {"em": ("em_low", "em_high"), "flip_rate": ("flip_low", "flip_high")}[metric]
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        line = line.sort_values("budget")
        if label in _REFERENCE:
            fig.add_hline(y=float(line[metric].mean()), line={"dash": "dash", "color": "grey"},
                          annotation_text={"none": "reuse all", "full": "full recompute"}[label])
            continue
        fig.add_trace(go.Scatter(
            x=line["budget"], y=line[metric], mode="lines+markers", name=label,
            error_y={"type": "data", "symmetric": False, "array": line[high] - line[metric],
                     "arrayminus": line[metric] - line[low], "thickness": 1}))
    fig.update_xaxes(title="budget b (share of reused rows recomputed)")
    fig.update_yaxes(title={"em": "exact match", "flip_rate": "flip rate vs dense"}[metric], rangemode="tozero")
    fig.update_layout(title=title, height=420)
    return fig


def rows_vs_accuracy(summary: pd.DataFrame, title: str = "") -> go.Figure:
    """Rows recomputed per example against exact match, one line per selector."""
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        line = line.sort_values("rows_per_example")
        fig.add_trace(go.Scatter(x=line["rows_per_example"], y=line["em"], mode="lines+markers", name=label,
                                 text=[f"b = {b:g}" for b in line["budget"]],
                                 hovertemplate="%{text}<br>%{x:.1f} rows<br>EM %{y:.3f}<extra>" + label + "</extra>"))
    fig.update_xaxes(title="rows recomputed per example")
    fig.update_yaxes(title="exact match")
    fig.update_layout(title=title, height=420)
    return fig


def flip_matrix_figure(matrix: pd.DataFrame, title: str = "") -> go.Figure:
    """Examples x selectors: red where the repaired answer flips against dense."""
    fig = go.Figure(go.Heatmap(z=matrix.to_numpy().astype(float), x=[html.escape(c) for c in matrix.columns],
                               y=[html.escape(str(i)) for i in matrix.index],
                               colorscale=[[0, "#e8f1e4"], [1, "#c0392b"]], showscale=False, xgap=1, ygap=1,
                               hovertemplate="example %{y}<br>%{x}<br>flip %{z}<extra></extra>"))
    fig.update_yaxes(title="example", autorange="reversed", type="category")
    fig.update_layout(title=title, height=max(300, 18 * len(matrix) + 120))
    return fig
