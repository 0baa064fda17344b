"""Where an answer looks while it is written (`diagnosis.answer_attention.answer_attention`): one panel
per cache (dense, the splice, the repaired cell; its y axis names it) stacked over each other, a bar per answer token stacked
by the attention mass on the evidence, the prompt, the passages around the evidence, the passages
without any and the answer so far, mean over heads and over the chosen layers. The region colours are
those of `plots.answer_sources` (where the answer's words come from), the answer so far in blue."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.answer_sources import SOURCE_STYLE
from workbench.plots.text import token_text

TITLES = {"dense": "dense", "splice": "splice", "repaired": "repaired cell"}
REGION_STYLE = {**{k: v for k, v in SOURCE_STYLE.items() if k != "new"}, "answer": ("the answer so far", "#0072B2")}


def answer_attention_figure(table: pd.DataFrame, layers: tuple[int, int] | None = None,
                            title: str = "") -> go.Figure:
    """Stacked bars of `table` (`diagnosis.answer_attention.COLUMNS` rows), mean over layers
    `layers` = (first, last), both included (default: every layer); one row of panels per cache."""
    caches = [c for c in TITLES if c in set(table["cache"])]
    if not caches:
        raise ValueError("the table has no dense, splice or repaired rows")
    lo, hi = layers if layers is not None else (int(table["layer"].min()), int(table["layer"].max()))
    at = table[(table["layer"] >= lo) & (table["layer"] <= hi)]
    steps = sorted(set(at["step"]))
    tokens = at.drop_duplicates("step").set_index("step")["token"]
    ticks = [f"{s}: {token_text(tokens[s], 10)}" for s in steps]
    fig = make_subplots(rows=len(caches), cols=1, shared_xaxes=True, vertical_spacing=0.05)
    for row, cache in enumerate(caches, start=1):
        mean = at[at["cache"] == cache].groupby("step")[list(REGION_STYLE)].mean().reindex(steps)
        for region, (label, colour) in REGION_STYLE.items():
            fig.add_trace(go.Bar(x=ticks, y=mean[region].to_numpy(), name=label, marker_color=colour,
                                 legendgroup=region, showlegend=row == 1,
                                 hovertemplate=f"{TITLES[cache]}, %{{x}}: %{{y:.3f}} on {label}<extra></extra>"),
                          row=row, col=1)
        fig.update_yaxes(title=f"{TITLES[cache]}: attention", range=[0, 1], row=row, col=1)
    span = f"layer {lo}" if lo == hi else f"layers {lo}-{hi}"
    fig.update_layout(barmode="stack", height=170 * len(caches) + 190,
                      title=title or f"Where the answer looks while it is written, {span} (mean over heads)",
                      legend={"orientation": "h", "y": -0.22 if len(caches) > 1 else -0.5, "yanchor": "top"},
                      margin={"t": 80, "b": 150})
    fig.update_xaxes(tickangle=-60)
    return fig
