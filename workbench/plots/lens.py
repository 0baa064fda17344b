"""The logit lens on every answer token (`diagnosis.lens.logit_lens`): per cache, layers x dense's
answer tokens, coloured by the probability the lens gives dense's token there; the hover lists
the lens's top tokens. Panels side by side share the colour scale (0 to 1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.text import escape, token_text

TITLES = {"dense": "dense", "splice": "splice", "repaired": "repaired cell"}
TEXT_STEPS = 8  # up to this many answer tokens, each cell shows the lens's top token


def logit_lens_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """One panel per cache (dense, splice, repaired): layer (rows) x answer token (columns).
    table: `diagnosis.lens.COLUMNS` rows."""
    caches = [c for c in TITLES if c in set(table["cache"])]
    if not caches:
        raise ValueError("the lens table has no dense, splice or repaired rows")
    steps = sorted(set(table["step"]))
    targets = table.drop_duplicates("step").set_index("step")["target_token"]
    ticks = [f"{s}: {token_text(targets[s], 10)}" for s in steps]
    fig = make_subplots(rows=1, cols=len(caches), shared_yaxes=True, horizontal_spacing=0.03)
    for col, cache in enumerate(caches, start=1):
        t = table[table["cache"] == cache]
        z = t.pivot(index="layer", columns="step", values="p_target").reindex(columns=steps)
        top = t.assign(top=[", ".join(f"{token_text(tok, 12)} {p:.2f}" for tok, p in zip(toks, ps))
                            for toks, ps in zip(t["top_tokens"], t["top_probs"])],
                       first=[token_text(toks[0], 8) for toks in t["top_tokens"]])
        hover = top.pivot(index="layer", columns="step", values="top").reindex(columns=steps).to_numpy()
        first = top.pivot(index="layer", columns="step", values="first").reindex(columns=steps).to_numpy()
        rank = t.pivot(index="layer", columns="step", values="rank").reindex(columns=steps).to_numpy()
        fig.add_trace(go.Heatmap(
            z=z.to_numpy(), x=ticks, y=z.index.tolist(), zmin=0, zmax=1, colorscale="Viridis",
            name=TITLES[cache], customdata=np.stack([hover, rank], -1), showscale=col == len(caches),
            colorbar={"title": {"text": "p(dense's token)", "side": "right"}},
            text=first if len(steps) <= TEXT_STEPS else None,
            texttemplate="%{text}" if len(steps) <= TEXT_STEPS else None, textfont={"size": 9},
            hovertemplate=f"{TITLES[cache]}, layer %{{y}}, answer token %{{x}}<br>p = %{{z:.3f}}, rank "
                          "%{customdata[1]}<br>top: %{customdata[0]}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title=f"{TITLES[cache]}: dense's answer token", tickangle=-45, row=1, col=col)
    fig.update_yaxes(title="layer (lens after it)", row=1, col=1)
    n_layers = int(table["layer"].max()) + 1
    shown = "cell text: the lens's top token" if len(steps) <= TEXT_STEPS else "hover: the lens's top tokens"
    fig.update_layout(title=title or f"Logit lens: the probability of dense's answer token at every layer ({shown})",
                      height=max(360, 160 + 16 * n_layers))
    return fig
