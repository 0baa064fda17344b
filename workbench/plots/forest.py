"""A forest plot of a contrast family: each contrast's paired difference A - B with its 95%
interval, one row each, families apart, no difference at 0. Input: the table of
`experiments.families.family_table` (the interval drawn is exactly its `low` / `high`).

    forest_figure(family_table(run, pre.families, "em"), "Pre-registered contrasts (RESULTS 10.4)")
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from workbench.plots.colors import selector_color
from workbench.plots.text import escape

ROW = 34  # px per contrast
FRAME = 170  # px of title, axis and margins
SIGNIFICANT = 0.05


def _p(value) -> str:
    return "–" if value is None or value != value else f"{value:.2g}"


def contrast_label(row) -> str:
    """`A1 cadence-grad − cacheblend @ 0.2`: a contrast as the forest plot and the table name it."""
    name = f"{row['name']} " if str(row.get("name", "") or "") else ""
    return f"{name}{row['a']} − {row['b']} @ {row['at']}"


def forest_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """Each contrast's difference (A - B, the mean over examples of what its test reads) with its
    paired bootstrap 95% interval; a filled marker where the Holm-adjusted p is below 0.05, open
    otherwise; the tick text names the contrast, its b / c and Holm p. Colour: A's selector."""
    fig = go.Figure()
    labels, families = [], list(dict.fromkeys(table["family"])) if len(table) else []
    for _, row in table.iterrows():
        counts = (f"b/c {row['b_count']}/{row['c_count']}" if not pd.isna(row["b_count"])
                  else f"{int(row['draws_separating'])} of {len(str(row['draws']).split(','))} draws separate"
                  if str(row.get("draws") or "") else row["test"])
        labels.append(f"{escape(contrast_label(row))}  ({escape(counts)}, Holm p {_p(row['p_holm'])})")
    for (_, row), label in zip(table.iterrows(), labels):
        significant = row["p_holm"] < SIGNIFICANT
        color = selector_color(row["a"])
        fig.add_trace(go.Scatter(
            x=[row["difference"]], y=[label], mode="markers", showlegend=False, name=escape(contrast_label(row)),
            error_x={"type": "data", "symmetric": False, "array": [row["high"] - row["difference"]],
                     "arrayminus": [row["difference"] - row["low"]], "color": color, "thickness": 2, "width": 6},
            marker={"color": color, "size": 11, "symbol": "diamond" if significant else "diamond-open",
                    "line": {"color": color, "width": 2}},
            hovertemplate=(f"{escape(contrast_label(row))}<br>A − B %{{x:+.3f}} [{row['low']:+.3f}, {row['high']:+.3f}]"
                           f"<br>{escape(row['test'])}, n = {row['n']}<br>p {_p(row['p_value'])}, Holm p "
                           f"{_p(row['p_holm'])}<extra>family {escape(row['family'])}</extra>")))
    for legend, symbol in (("Holm p < 0.05", "diamond"), ("Holm p ≥ 0.05", "diamond-open")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=legend,
                                 marker={"color": "#555555", "size": 11, "symbol": symbol}))
    ends = [v for v in (*table["low"], *table["high"], *table["difference"]) if v == v and math.isfinite(v)]
    width = max([abs(v) for v in ends] + [0.05])
    fig.add_vline(x=0, line={"color": "#555555", "width": 1}, layer="below")
    for k in range(1, len(families)):  # a line between families
        first = next(i for i, f in enumerate(table["family"]) if f == families[k])
        fig.add_hline(y=first - 0.5, line={"color": "#bbbbbb", "width": 1, "dash": "dot"}, layer="below")
    measure = table.attrs.get("measure", "")
    fig.update_xaxes(title=f"A − B, paired difference in {escape(measure)} (bootstrap 95%; right of 0: A higher)",
                     range=[-1.1 * width, 1.1 * width], zeroline=False)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels,
                     range=[len(labels) - 0.5, -0.5], automargin=True)
    fig.update_layout(title=title, height=FRAME + ROW * max(len(labels), 1), template="plotly_white",
                      legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"},
                      margin={"l": 20, "t": 90})
    return fig
