"""Attention by head: one query row's pattern at one layer, heads x context, under dense, the splice
and a repaired cell (`diagnosis.heads.HeadPatterns`), one panel per cache stacked on one key axis so
that a column is the same token in every panel. Segments are named on the key axis and bounded by
dashed lines, the gold evidence rows outlined in green, the query in orange; the colour is log10 of
the attention weight (an attention sink would leave every other key one colour on a linear scale)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.text import escape, token_text
from workbench.plots.tokens import CHOSEN, EVIDENCE, evidence_spans

RECOMPUTED = "#d62728"  # the repaired cell's recomputed rows, as ticks above its panel
FLOOR = 1e-4  # weights below this share the lowest colour
TITLES = {"dense": "dense", "splice": "splice", "repaired": "repaired cell"}


def head_pattern_figure(found, layer: int, title: str = "") -> go.Figure:
    """The heads x keys pattern of `found.query` at `layer`, one panel per cache that has one.
    found: a `HeadPatterns` (patterns [layer, head, key]; tokens, segments, evidence)."""
    caches = [c for c, p in found.patterns.items() if p is not None]
    if not caches:
        raise ValueError("no cache has a pattern for this query: nothing to draw")
    n_heads, n_keys = found.patterns[caches[0]].shape[1:]
    keys = np.arange(n_keys)
    fig = make_subplots(rows=len(caches), cols=1, shared_xaxes=True, vertical_spacing=0.04)
    tokens = [token_text(t, 16) for t in found.tokens]
    segment_of = np.empty(n_keys, dtype=object)
    for name, start, end in found.segments:
        segment_of[start:min(end, n_keys)] = escape(name)
    for row, cache in enumerate(caches, start=1):
        z = found.patterns[cache][layer].numpy()  # [head, key]
        custom = np.stack([np.broadcast_to(tokens, z.shape), np.broadcast_to(segment_of, z.shape), z], -1)
        fig.add_trace(go.Heatmap(
            z=np.log10(np.maximum(z, FLOOR)), x=keys, y=list(range(n_heads)), zmin=np.log10(FLOOR), zmax=0,
            colorscale="Viridis", name=TITLES.get(cache, cache), customdata=custom,
            colorbar={"title": {"text": "log10 attention", "side": "right"}, "len": 0.9}, showscale=row == 1,
            hovertemplate=f"{TITLES.get(cache, cache)}, head %{{y}}<br>key %{{x}} %{{customdata[0]}} "
                          "(%{customdata[1]})<br>attention %{customdata[2]:.4g}<extra></extra>"), row=row, col=1)
        top = -0.5
        if cache == "repaired" and found.cell:  # the rows this cell recomputes, as ticks above its heads
            top = -1.3
            cell = [p for p in found.cell if p < n_keys]
            fig.add_trace(go.Scatter(x=cell, y=[-0.9] * len(cell), mode="markers", name="rows the cell recomputes",
                                     marker={"symbol": "line-ns-open", "size": 7, "color": RECOMPUTED},
                                     hovertemplate="recomputed: key %{x}<extra></extra>", showlegend=False),
                          row=row, col=1)
        fig.update_yaxes(title=f"{TITLES.get(cache, cache)}<br>head", range=[n_heads - 0.5, top], row=row, col=1,
                         tickvals=list(range(0, n_heads, max(1, n_heads // 8))))
    for name, start, end in found.segments:
        if 0 < start < n_keys:
            fig.add_vline(x=start - 0.5, line={"color": "white", "dash": "dash", "width": 1})
    for first, last in evidence_spans([p for p in found.evidence if p < n_keys]):
        fig.add_vrect(x0=first - 0.5, x1=last + 0.5, line={"color": EVIDENCE, "width": 2}, fillcolor="rgba(0,0,0,0)")
    fig.add_vline(x=found.query, line={"color": CHOSEN, "width": 2})
    shown = [(name, start, min(end, n_keys)) for name, start, end in found.segments if start < n_keys]
    fig.update_xaxes(tickvals=[(s + e - 1) / 2 for _, s, e in shown], ticktext=[escape(n) for n, _, _ in shown],
                     range=[-0.5, n_keys - 0.5], row=len(caches), col=1,
                     title="key (token position). Dashed: segment bounds; " + (
                         "green: gold evidence" if found.evidence else "no gold evidence recorded for this example")
                     + "; orange: the query" + ("; red ticks: the rows the cell recomputes" if found.cell else ""))
    query = token_text(found.tokens[found.query], 16) if found.query < len(found.tokens) else ""
    fig.update_layout(title=title or f"What token {found.query} ({query}) attends to at layer {layer}, by head",
                      height=170 + max(12, min(20, 240 // n_heads)) * n_heads * len(caches) + 30 * len(caches))
    return fig
