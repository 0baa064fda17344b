"""The question's attention on the gold evidence, per layer: dense, the splice and each selection
(from `experiments.evidence.evidence_tables`, or one Diagnosis's `evidence_attention` table).

Dense and the splice are dashed and dotted lines in their series colours (`plots.colors.SERIES`); each selector keeps its colour and marker
(`plots.colors`). Where the repaired lines sit between the splice's and dense's, the repair gave the
question back its view of the evidence."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.plots.colors import selector_style, series_color
from workbench.plots.curves import height_for_legend
from workbench.plots.text import escape

_CACHES = {"dense": ("dense", series_color("dense"), "dash"), "spliced": ("splice", series_color("splice"), "dot")}
MASSES = {"mass_mean": "mean over the question's rows and heads", "mass_last": "the question's last row, mean over heads"}


def evidence_attention_figure(attention: pd.DataFrame, budget: float, mass: str = "mass_mean", title: str = "",
                              selectors=None) -> go.Figure:
    """Per layer, `mass` of dense, the splice and every selector (`selectors`: those shown, default all)
    at `budget`. attention: rows of (cell, budget, layer, mass_last, mass_mean[, draw]); a drawn
    control's draws are averaged."""
    if mass not in MASSES:
        raise ValueError(f"mass is one of {', '.join(MASSES)}, got {mass!r}")
    fig = go.Figure()
    table = attention.assign(budget=attention["budget"].astype(float))
    for cell, (name, colour, dash) in _CACHES.items():
        line = table[table["cell"] == cell].groupby("layer")[mass].mean()
        if len(line):
            fig.add_trace(go.Scatter(x=line.index, y=line.to_numpy(), name=name, mode="lines",
                                     line={"color": colour, "dash": dash, "width": 2.5},
                                     hovertemplate="layer %{x}<br>%{y:.4f}<extra>" + name + "</extra>"))
    at = table[(table["budget"] - budget).abs() < 1e-9]
    for label, rows in at.groupby("cell", sort=False):
        if label in _CACHES or (selectors is not None and label not in selectors) or label in ("none", "full"):
            continue
        line = rows.groupby("layer")[mass].mean()
        fig.add_trace(go.Scatter(x=line.index, y=line.to_numpy(), name=escape(label), mode="lines+markers",
                                 hovertemplate="layer %{x}<br>%{y:.4f}<extra>" + escape(label) + "</extra>",
                                 **selector_style(label)))
    fig.update_xaxes(title="layer")
    fig.update_yaxes(title="attention mass on the evidence", rangemode="tozero")
    title = title or f"The question's attention on the gold evidence, b = {budget:g}"
    fig.update_layout(title=f"{title}<br><sub>{MASSES[mass]}</sub>", height=height_for_legend(fig, 440))
    return fig
