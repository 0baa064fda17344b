"""Two selectors on one example: the rows only A recomputes, those both do, those only B does.

    picks_compared(d, "cadence-grad", "cacheblend", 0.2)   # position, segment, token, picked
    compare_figure(d, "cadence-grad", "cacheblend", 0.2)   # three rows over the reused tokens
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.diagnosis import Diagnosis
from workbench.plots.colors import selector_color
from workbench.plots.text import escape, token_text
from workbench.plots.tokens import segment_starts, token_axis

BOTH = "#5b4a8b"  # rows both selectors recompute
NEITHER = "#f4f4f4"


def picks_compared(d: Diagnosis, a: str, b: str, budget: float) -> pd.DataFrame:
    """The reused rows A or B recomputes at `budget` (a drawn control: its first draw): position,
    segment, token and "picked" ("only A", "both" or "only B", with the selectors' labels)."""
    tokens = d.tokens[d.tokens["reused"]][["position", "segment", "token"]].reset_index(drop=True)
    in_a, in_b = tokens["position"].isin(set(d.picks(a, budget))), tokens["position"].isin(set(d.picks(b, budget)))
    picked = np.select([in_a & in_b, in_a, in_b], ["both", f"only {a}", f"only {b}"], default="")
    return tokens.assign(picked=picked)[picked != ""].reset_index(drop=True)


def compare_figure(d: Diagnosis, a: str, b: str, budget: float, highlight: int | None = None) -> go.Figure:
    """Reused tokens x {only A, both, only B} at `budget`: A's colour, a shared violet, B's colour;
    columns named by their tokens, the chosen token's (`highlight`, a position) outlined."""
    tokens = d.tokens[d.tokens["reused"]].reset_index(drop=True)
    positions = tokens["position"].astype(int).tolist()
    in_a = np.isin(positions, d.picks(a, budget))
    in_b = np.isin(positions, d.picks(b, budget))
    rows = [(in_a & ~in_b, 1), (in_a & in_b, 2), (in_b & ~in_a, 3)]
    z = np.array([np.where(mask, code, 0) for mask, code in rows], dtype=float)  # [3, reused token]
    stops = [NEITHER, selector_color(a), BOTH, selector_color(b)]
    scale = [[edge, color] for i, color in enumerate(stops) for edge in (i / 4, (i + 1) / 4)]
    labels = [f"only {escape(a)} ({int(rows[0][0].sum())})", f"both ({int(rows[1][0].sum())})",
              f"only {escape(b)} ({int(rows[2][0].sum())})"]
    hover = [f"pos {p} · {escape(s)} · {token_text(t)}" for p, s, t in
             zip(positions, tokens["segment"], tokens["token"])]
    fig = go.Figure(go.Heatmap(z=z, y=labels, x=list(range(len(positions))), zmin=-0.5, zmax=3.5,
                               colorscale=scale, showscale=False, ygap=2, customdata=[hover] * 3,
                               hovertemplate="%{y}<br>%{customdata}<extra></extra>"))
    for start in segment_starts(tokens["segment"]):
        fig.add_vline(x=start - 0.5, line={"color": "#333", "width": 1})
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title="reused token (context order; lines mark passage boundaries)")
    token_axis(fig, tokens["token"], positions.index(highlight) if highlight in positions else None)
    fig.update_layout(title=f"rows {escape(a)} and {escape(b)} recompute at b = {budget:g}", height=260,
                      margin={"l": 160, "r": 20, "t": 40, "b": 100})
    return fig
