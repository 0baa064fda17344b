"""Figures of a `kvwb pipeline` run (BCR §2–§4): the agent graph of one request coloured by each
call's decision, the gate's entropy against its threshold, and reuse rate against accuracy with
the allocation line. Built from the run's tables (`calls`, the summary's `methods`)."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from workbench.errors import WorkbenchError
from workbench.plots.colors import method_style, series_color
from workbench.plots.marks import dodge
from workbench.plots.text import escape

REUSED, DENSE = "#2ca02c", series_color("dense")  # dense: the one grey-black of every "dense" series
DODGE = 0.02  # reuse-rate distance between methods that sit at one point
# each reason's marker: the rule's plain cases filled (reused green, dense dark), the surprising ones
# (under the threshold yet dense, over it yet reused) open, each its own colour and symbol
SURPRISES = (("#e66100", "x-thin-open"), ("#5d3a9b", "square-open"), ("#1a85ff", "star-open"),
             ("#b8860b", "triangle-up-open"), (REUSED, "diamond-open"))
LEGEND_COLUMNS = 5  # legend entries per line under the reuse-accuracy figure (150 px each)


def agent_graph(calls: pd.DataFrame, edges: list, title: str = "") -> go.Figure:
    """One request's agents (x: depth, y: order within a depth) with their edges; each node is
    coloured by its call's decision (reused or dense). calls: the rows of one (method, request)."""
    if calls.empty:
        raise WorkbenchError("no calls to draw")
    rows = calls.sort_values("agent")
    place: dict[int, tuple[float, float]] = {}
    for depth, group in rows.groupby("depth"):
        zigzag = 0.5 if depth % 2 else -0.5  # so an edge that skips a depth does not run through a node
        for k, agent in enumerate(group["agent"]):
            place[int(agent)] = (float(depth), zigzag - (k - (len(group) - 1) / 2))
    fig = go.Figure()
    for a, b in edges:
        if a in place and b in place:
            (x0, y0), (x1, y1) = place[a], place[b]
            fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                               showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.2, arrowcolor="#999999",
                               standoff=18, startstandoff=18)
    for reused, color, name in ((True, REUSED, "reused (no dense prefill)"), (False, DENSE, "dense prefill")):
        part = rows[rows["reused"] == reused]
        if part.empty:
            continue
        fig.add_trace(go.Scatter(
            x=[place[int(a)][0] for a in part["agent"]], y=[place[int(a)][1] for a in part["agent"]],
            mode="markers+text", name=name, text=[escape(r) for r in part["role"]], textposition="top center",
            marker={"size": 28, "color": color, "line": {"width": 1, "color": "#333333"}}, showlegend=True,
            customdata=[escape(o) for o in part["output"]],
            hovertemplate="%{text}<br>said: %{customdata}<extra>" + name + "</extra>"))
    depth = int(rows["depth"].max())
    fig.update_xaxes(title="depth in the pipeline", range=[-0.5, depth + 0.5], dtick=1, zeroline=False)
    spread = max(place[a][1] for a in place) - min(place[a][1] for a in place)
    fig.update_yaxes(visible=False, range=[-1.2 - spread / 2, 1.2 + spread / 2])
    fig.update_layout(title=title, height=340, template="plotly_white", showlegend=True,
                      legend={"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top", "title": {"text": "call:"}},
                      margin={"b": 80})
    return fig


def _reason_styles(reasons) -> dict:
    """(colour, symbol) per reason: "reused: ..." and "dense: ..." (the gate's rule) filled, every
    other reason open, in a colour and symbol of its own (sorted, so the same reason keeps its look)."""
    styles, others = {}, iter(SURPRISES)
    for reason in sorted(set(reasons)):
        if reason.startswith(("reused:", "dense:")) or reason in ("reused", "dense"):
            styles[reason] = (REUSED if reason.startswith("reused") else DENSE, "circle")
        else:
            styles[reason] = next(others, ("#777777", "circle-open"))
    return styles


def gate_entropy(calls: pd.DataFrame, title: str = "") -> go.Figure:
    """Per call in run order, the gate's entropy (the highest over the call's slots) against its
    threshold γ·log2 n; with a `reason` column (`pipeline_summary.gate_reasons`), each call's marker
    says why it was reused or prefilled densely, else only which; a call with a slot that had fewer
    than 2 anchors has no entropy."""
    gated = calls.dropna(subset=["max_entropy"]).sort_values(["index", "agent"]).reset_index(drop=True)
    if gated.empty:
        raise WorkbenchError("no call of this method ran the entropy gate with 2 or more anchors")
    if "reason" not in gated:
        gated["reason"] = gated["reused"].map({True: "reused", False: "dense"})
    x = list(range(len(gated)))
    fig = go.Figure(go.Scatter(x=x, y=gated["threshold"], mode="lines", name="threshold γ·log2 n",
                               line={"color": "#d62728", "dash": "dash", "shape": "hv"}))
    styles = _reason_styles(gated["reason"])
    for reason, (color, symbol) in styles.items():
        part = gated[gated["reason"] == reason]
        fig.add_trace(go.Scatter(x=[x[i] for i in part.index], y=part["max_entropy"], mode="markers",
                                 name=escape(reason), marker={"color": color, "size": 9, "symbol": symbol,
                                                              "line": {"width": 1.5, "color": color}},
                                 customdata=list(zip(part["index"] + 1, part["role"], part["min_anchors"])),
                                 hovertemplate="request %{customdata[0]}, %{customdata[1]}<br>H = %{y:.3f}, fewest "
                                               "anchors %{customdata[2]}<extra>" + escape(reason) + "</extra>"))
    fig.update_xaxes(title="gated call, in run order", tickmode="linear", tick0=0,
                     dtick=max(1, math.ceil(len(gated) / 20)), tickformat="d")
    fig.update_yaxes(title="gate entropy H(s), bits", rangemode="tozero")
    fig.update_layout(title=title or "The entropy gate per call: why each was reused or prefilled densely",
                      height=380 + 22 * (len(styles) + 1), template="plotly_white",
                      margin={"b": 90 + 22 * (len(styles) + 1)},
                      legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top", "entrywidth": 0})
    return fig


def reuse_vs_accuracy(methods: pd.DataFrame, title: str = "") -> go.Figure:
    """Each method at (reuse rate, accuracy) with its Wilson interval, and Eq. 3's line through
    the reference and KVComm (its `line_pred` column) where the run has one."""
    if methods.empty:
        raise WorkbenchError("no method to plot")
    fig = go.Figure()
    line = methods.dropna(subset=["line_pred"])
    if line["reuse"].nunique() >= 2:  # every line_pred lies on the line: two of them draw it
        lo, hi = line.loc[line["reuse"].idxmin()], line.loc[line["reuse"].idxmax()]
        slope = (hi["line_pred"] - lo["line_pred"]) / (hi["reuse"] - lo["reuse"])
        fig.add_trace(go.Scatter(x=[0.0, 1.0], y=[lo["line_pred"] + slope * (x - lo["reuse"]) for x in (0.0, 1.0)],
                                 mode="lines", name="allocation line (Eq. 3)", hoverinfo="skip",
                                 line={"color": "#999999", "dash": "dot"}))
    # methods at the same (reuse, accuracy) sit side by side, so that none hides another
    place = methods.assign(at=list(zip(methods["reuse"].round(3), methods["acc"].round(3))))
    offsets = {}
    for (reuse, _), group in place.groupby("at", sort=False):
        spread = dodge(list(group["method"]), DODGE * (len(group) - 1))
        low, high = reuse + min(spread.values()), reuse + max(spread.values())
        shift = -low if low < 0 else (1 - high if high > 1 else 0.0)  # never left of 0 or right of 1
        offsets.update({m: o + shift for m, o in spread.items()})
    for row in methods.itertuples(index=False):
        fig.add_trace(go.Scatter(
            x=[row.reuse + offsets[row.method]], y=[row.acc], mode="markers", name=escape(row.method),
            error_y={"type": "data", "symmetric": False, "array": [row.acc_high - row.acc],
                     "arrayminus": [row.acc - row.acc_low], "thickness": 1.2, "width": 3},
            hovertemplate=f"{escape(row.method)}<br>reuse {row.reuse:.3f}<br>accuracy %{{y:.3f}}"
                          + ("" if math.isnan(getattr(row, "line_resid", math.nan)) else
                             f"<br>residual {row.line_resid:+.3f}") + "<extra></extra>",
            **method_style(row.method)))
    fig.update_xaxes(title="reuse rate (calls served without a dense prefill; methods at one point side by side)",
                     range=[-0.05, 1.05])
    fig.update_yaxes(title="accuracy", range=[-0.05, 1.1])
    rows = math.ceil(len(methods) / LEGEND_COLUMNS)  # the legend below the plot, every method in it
    fig.update_layout(title=title or "Reuse against accuracy (bars: Wilson 95%)", height=440 + 22 * rows,
                      template="plotly_white", margin={"b": 90 + 22 * rows},
                      legend={"title": {"text": "method"}, "orientation": "h", "x": 0, "y": -0.2, "yanchor": "top",
                              "entrywidth": 150})
    return fig
