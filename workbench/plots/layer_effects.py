"""At which layer does the repair recover the answer: the per-layer recompute effects
(`diagnosis.layer_effects`) of the splice, the repaired cell and dense, side by side."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.colors import series_color
from workbench.plots.text import escape

PANELS = (("residual_distance", "suffix residual distance from dense<br>(relative L2)"),
          ("logprob", "logit lens: log p of dense's<br>first answer token"))


def layer_effects_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """Two panels over the layers: the suffix rows' residual distance from dense, and the logit
    lens of the first answer token on the last suffix row; one line per cache (splice, repaired,
    dense). table: cache, layer, residual_distance, logprob, rank, top_token rows."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14)
    for cache, line in table.groupby("cache", sort=False):
        line = line.sort_values("layer")
        for col, (column, _) in enumerate(PANELS, start=1):
            fig.add_trace(go.Scatter(
                x=line["layer"], y=line[column], mode="lines+markers", name=escape(str(cache)),
                legendgroup=str(cache), showlegend=col == 1, line={"color": series_color(str(cache))},
                customdata=list(zip(line["rank"], line["top_token"].map(escape))),
                hovertemplate="layer %{x}<br>%{y:.4g}<br>rank %{customdata[0]}, top %{customdata[1]}"
                              f"<extra>{escape(str(cache))}</extra>"), row=1, col=col)
    n_layers = int(table["layer"].max()) + 1 if len(table) else 1
    fig.update_xaxes(title="layer", dtick=max(1, n_layers // 12), range=[-0.5, n_layers - 0.5])
    for col, (_, axis_title) in enumerate(PANELS, start=1):
        fig.update_yaxes(title=axis_title, row=1, col=col)
    fig.update_layout(title=title or "where the repair recovers the answer, layer by layer", height=380,
                      legend={"orientation": "h", "y": -0.25})
    return fig
