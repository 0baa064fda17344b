"""Activation patching on a splice (`diagnosis.patching.Patching`): how much of dense's answer each
patched activation restores, as heatmaps on a diverging scale (0 = the splice, 1 = dense, white
at 0): layer x question row for `hook_resid_post`, layer x head for `attn.hook_z`."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from workbench.plots.text import escape, token_text

SCALE = "RdBu"  # red below 0 (further from dense than the splice), blue toward dense


def _limit(values: np.ndarray) -> float:
    """A symmetric colour range that holds every value and at least [-1, 1]."""
    return max(1.0, float(np.nanmax(np.abs(values))) if values.size else 1.0)


def _heatmap(z: np.ndarray, x: list, layers: list[int], hover: str, custom=None) -> go.Heatmap:
    lim = _limit(z)
    return go.Heatmap(z=z, x=x, y=list(range(len(layers))), zmin=-lim, zmax=lim, zmid=0, colorscale=SCALE,
                      customdata=custom,
                      colorbar={"title": {"text": "restored<br>(0 splice, 1 dense)", "side": "right"}},
                      hovertemplate=hover + "<br>restored %{z:.3f}<extra></extra>")


def _layer_axis(fig: go.Figure, layers: list[int]) -> None:
    step = max(1, len(layers) // 15)
    fig.update_yaxes(title="layer", range=[len(layers) - 0.5, -0.5], tickvals=list(range(0, len(layers), step)),
                     ticktext=[str(layers[i]) for i in range(0, len(layers), step)])


def _title(p, what: str) -> str:
    dense, splice = (escape(token_text(t)) for t in (p.dense_token, p.splice_token))
    return (f"{what}<br><sup>logit difference of dense's first answer token '{dense}' against the splice's "
            f"'{splice}': {p.dense_diff:.2f} over dense, {p.splice_diff:.2f} over the splice</sup>")


def resid_patching_figure(p, title: str = "") -> go.Figure:
    """Layer x question row: dense's `blocks.L.hook_resid_post` at one row patched into the spliced pass."""
    labels = [f"{r} {escape(token_text(t, 12))}" for r, t in zip(p.rows, p.tokens)]
    custom = np.empty(p.resid.shape + (2,), dtype=object)  # [layer, row, (layer, row label)]
    custom[..., 0] = np.array(p.layers)[:, None]
    custom[..., 1] = np.array(labels, dtype=object)[None, :]
    fig = go.Figure(_heatmap(p.resid, list(range(len(p.rows))), p.layers,
                             "layer %{customdata[0]}, row %{customdata[1]}", custom))
    _layer_axis(fig, p.layers)
    fig.update_xaxes(title="question row patched (position and token)", tickvals=list(range(len(p.rows))),
                     ticktext=labels, range=[-0.5, len(p.rows) - 0.5], tickangle=-45)
    fig.update_layout(title=title or _title(p, "Dense's residual stream (hook_resid_post) patched into the splice, per layer and row"),
                      height=max(360, 140 + 16 * len(p.layers)), width=max(760, 260 + 40 * len(p.rows)))
    return fig


def head_patching_figure(p, title: str = "") -> go.Figure:
    """Layer x head: dense's `blocks.L.attn.hook_z` of one head, at `p.z_rows`, patched into the spliced pass."""
    n_heads = p.z.shape[1]
    custom = np.broadcast_to(np.array([[layer] for layer in p.layers]), p.z.shape)
    fig = go.Figure(_heatmap(p.z, list(range(n_heads)), p.layers, "layer %{customdata}, head %{x}", custom))
    _layer_axis(fig, p.layers)
    rows = f"rows {p.z_rows[0]}-{p.z_rows[-1]}" if len(p.z_rows) > 1 else f"row {p.z_rows[0]}"
    fig.update_xaxes(title=f"head (hook_z patched at the question's {rows})", range=[-0.5, n_heads - 0.5],
                     tickvals=list(range(0, n_heads, max(1, n_heads // 16))))
    fig.update_layout(title=title or _title(p, "Dense's head outputs (attn.hook_z) patched into the splice, per layer and head"),
                      height=max(360, 140 + 16 * len(p.layers)), width=max(760, 300 + 28 * n_heads))
    return fig
