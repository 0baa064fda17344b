"""Per-example figures: the token strip, selectors' picks, layer x token heatmaps, residual
deviation per layer. Inputs are a Diagnosis's tables; every function returns a plotly Figure.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

SEGMENT_COLORS = ("#f2f2f2", "#dbe9f6", "#fde2cf", "#dff0d8", "#eadcf0", "#fff3c4", "#d9f2f2")


def _label(token: str) -> str:
    """A token as display text: escaped, whitespace made visible, never empty."""
    shown = token.replace("\n", "⏎").replace("\t", "⇥")
    return html.escape(shown if shown.strip() else "␣" * max(1, len(shown)), quote=False)


def token_strip(tokens: pd.DataFrame, values: pd.Series | None = None, *, title: str = "",
                picks: list[int] | None = None, per_line: int = 24, reused_only: bool = False) -> go.Figure:
    """The context as wrapped lines of token cells, coloured by `values` (indexed by position).

    Segment boundaries start a new line; `picks` (positions) are outlined. Hover shows the
    position, segment and value. tokens: a Diagnosis `tokens` table.
    """
    rows = tokens[tokens["reused"]] if reused_only else tokens
    cells, y = [], 0
    for _, seg in rows.groupby("segment", sort=False):
        for start in range(0, len(seg), per_line):
            for x, (_, tok) in enumerate(seg.iloc[start:start + per_line].iterrows()):
                cells.append((x, y, int(tok["position"]), tok["token"], tok["segment"]))
            y += 1
    frame = pd.DataFrame(cells, columns=["x", "y", "position", "token", "segment"])
    z = frame["position"].map(values) if values is not None else pd.Series(np.nan, index=frame.index)
    grid = np.full((y, per_line), np.nan)
    text = np.full((y, per_line), "", dtype=object)
    hover = np.full((y, per_line), "", dtype=object)
    for row, value in zip(frame.itertuples(), z):
        grid[row.y, row.x] = value
        text[row.y, row.x] = _label(row.token)
        hover[row.y, row.x] = (f"pos {row.position} · {html.escape(row.segment)}<br>{_label(row.token)}"
                               + ("" if pd.isna(value) else f"<br>value {value:.4g}"))
    fig = go.Figure(go.Heatmap(z=grid, text=text, texttemplate="%{text}", textfont={"size": 10},
                               customdata=hover, hovertemplate="%{customdata}<extra></extra>",
                               colorscale="Viridis", showscale=values is not None, xgap=1, ygap=2))
    if picks:
        chosen = frame[frame["position"].isin(set(picks))]
        fig.add_trace(go.Scatter(x=chosen["x"], y=chosen["y"], mode="markers", name="recomputed",
                                 marker={"symbol": "square-open", "size": 18, "color": "crimson",
                                         "line": {"width": 2}}, hoverinfo="skip"))
    starts = frame.groupby("segment", sort=False)["y"].min()
    fig.update_yaxes(autorange="reversed", tickvals=list(starts), ticktext=[html.escape(s) for s in starts.index],
                     showgrid=False)
    fig.update_xaxes(visible=False)
    fig.update_layout(title=title, height=max(240, 26 * y + 90), margin={"l": 90, "r": 20, "t": 40, "b": 10},
                      plot_bgcolor="white", showlegend=bool(picks))
    return fig


def picks_matrix(tokens: pd.DataFrame, picks: dict[str, list[int]], title: str = "") -> go.Figure:
    """Selectors x reused tokens: which rows each selector recomputes, and how many agree."""
    reused = tokens[tokens["reused"]].reset_index(drop=True)
    positions = reused["position"].tolist()
    labels = list(picks)
    z = np.array([[p in set(picks[label]) for p in positions] for label in labels], dtype=float)
    agree = z.sum(0, keepdims=True)
    hover = [f"pos {p} · {html.escape(s)} · {_label(t)}" for p, s, t in
             zip(positions, reused["segment"], reused["token"])]
    fig = go.Figure()
    fig.add_trace(go.Heatmap(z=np.vstack([z, agree / max(1, len(labels))]), y=labels + ["agreement"],
                             x=list(range(len(positions))), customdata=[hover] * (len(labels) + 1),
                             hovertemplate="%{y}<br>%{customdata}<br>%{z:.2f}<extra></extra>",
                             colorscale=[[0, "#f4f4f4"], [1, "#b2182b"]], showscale=False, ygap=2))
    bounds = reused.index[reused["segment"] != reused["segment"].shift()].tolist()[1:]
    for b in bounds:
        fig.add_vline(x=b - 0.5, line={"color": "#333", "width": 1})
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="reused token (context order; lines mark passage boundaries)")
    fig.update_layout(title=title, height=90 + 28 * (len(labels) + 1), margin={"l": 110, "r": 20, "t": 40, "b": 40})
    return fig


def layer_heatmap(table: pd.DataFrame, tokens: pd.DataFrame, title: str = "", log: bool = False) -> go.Figure:
    """Layer x token heatmap of one per-layer signal. table: layer, position, value rows."""
    wide = table.pivot_table(index="layer", columns="position", values="value", aggfunc="mean")
    z = wide.to_numpy()
    if log:
        z = np.log10(np.abs(z) + 1e-12)
    text = tokens.set_index("position").reindex(wide.columns)["token"].map(_label)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(wide.columns))), y=list(wide.index),
                               customdata=np.tile(np.array([f"pos {p} · {t}" for p, t in zip(wide.columns, text)],
                                                           dtype=object), (len(wide.index), 1)),
                               hovertemplate="layer %{y}<br>%{customdata}<br>%{z:.4g}<extra></extra>",
                               colorscale="Magma", colorbar={"title": "log10" if log else ""}))
    fig.update_xaxes(title="reused token (context order)")
    fig.update_yaxes(title="layer")
    fig.update_layout(title=title, height=420, margin={"l": 60, "r": 20, "t": 40, "b": 40})
    return fig


def residual_by_layer(residual: pd.DataFrame, budget: float, kind: str = "v", selectors=None,
                      title: str = "") -> go.Figure:
    """Deviation left per layer after each selector's repair at a budget (relative L2 vs dense)."""
    rows = residual[((residual["budget"] - budget).abs() < 1e-9) & (residual["kind"] == kind)]
    fig = go.Figure()
    for label, line in rows.groupby("selector", sort=False):
        if selectors is not None and label not in selectors:
            continue
        fig.add_trace(go.Scatter(x=line["layer"], y=line["value"], mode="lines+markers", name=label))
    fig.update_xaxes(title="layer")
    fig.update_yaxes(title=f"relative L2 of {'values' if kind == 'v' else 'keys (post-RoPE)'} vs dense")
    fig.update_layout(title=title or f"deviation left after repair, b = {budget:g}", height=380)
    return fig


def layer_profile(lines: dict[str, list[float]], title: str = "", ytitle: str = "") -> go.Figure:
    """One line per named per-layer sequence (e.g. the splice's relative K and V error)."""
    fig = go.Figure()
    for name, values in lines.items():
        values = [float(v) for v in values]
        fig.add_trace(go.Scatter(x=list(range(len(values))), y=values, mode="lines+markers", name=name))
    fig.update_xaxes(title="layer")
    fig.update_yaxes(title=ytitle)
    fig.update_layout(title=title, height=360)
    return fig
