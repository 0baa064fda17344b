"""The answer token by token: dense's answer teacher-forced under each cell, the probability of
each of its tokens there (Inseq's step scores). Where a repair loses the answer, the token it
loses it at stands out.

    answer_tokens_figure(d, budget=0.2, selectors=["cadence-grad", "cacheblend"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError
from workbench.plots.text import escape, token_text

FIXED = ("dense", "spliced")  # the cells every figure shows first


def answer_probabilities(d: Diagnosis, budget: float, selectors) -> pd.DataFrame:
    """Cells x the dense answer's tokens: the probability of each token under each cell ("dense",
    "spliced", then each of `selectors` at `budget`; a drawn control: the mean over its draws).
    Columns are the token indices; `attrs["tokens"]` holds the tokens."""
    rows = d.tables.get("answer_tokens")
    if rows is None or rows.empty:
        raise WorkbenchError(f"diagnosis of {d.example_id!r} keeps no per-token log-probabilities of the dense "
                             f"answer (made before 2026-12-02): diagnose it again to see them")
    at = rows[rows["cell"].isin(FIXED) | ((rows["budget"] - budget).abs() < 1e-9)]
    at = at[at["cell"].isin([*FIXED, *selectors])]
    wide = (at.assign(p=np.exp(at["logprob"].astype(float)))
            .pivot_table(index="cell", columns="index", values="p", aggfunc="mean"))  # [cell, token]
    wide = wide.reindex([c for c in [*FIXED, *selectors] if c in wide.index])
    tokens = rows.drop_duplicates("index").set_index("index")["token"]
    wide.attrs["tokens"] = tokens.reindex(wide.columns).tolist()
    return wide


def answer_tokens_figure(d: Diagnosis, budget: float, selectors) -> go.Figure:
    """The dense answer's tokens (columns) under each cell (rows): p of each token, 0 to 1."""
    wide = answer_probabilities(d, budget, list(selectors))
    tokens = [token_text(t) for t in wide.attrs["tokens"]]
    z = wide.to_numpy()  # [cell, token]
    text = np.vectorize(lambda v: "" if np.isnan(v) else f"{v:.2f}")(z)
    hover = [[f"{escape(cell)}<br>token {i + 1}: {tok}" for i, tok in enumerate(tokens)] for cell in wide.index]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(tokens))), y=[escape(c) for c in wide.index], zmin=0, zmax=1,
                               colorscale="Blues", text=text, texttemplate="%{text}", customdata=hover,
                               hovertemplate="%{customdata}<br>p = %{z:.4f}<extra></extra>", xgap=2, ygap=2,
                               colorbar={"title": {"text": "p of dense's<br>token", "side": "right"}}))
    fig.update_xaxes(title="the dense answer, token by token (teacher-forced)", tickvals=list(range(len(tokens))),
                     ticktext=tokens)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title=f"probability of each token of the dense answer under each cell, b = {budget:g}",
                      height=140 + 30 * len(wide.index), margin={"l": 140, "r": 20, "t": 40, "b": 60})
    return fig
