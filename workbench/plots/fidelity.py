"""Figures of a fidelity run (`kvwb fidelity`): transfer against cosine, the layer-corruption
sweep, the bank grid and sender-pool scaling. Inputs are the run's `conditions` table (one
row per condition, with Wilson intervals); floor and reference lines come from its own rows.
Colours come from `plots.colors.series_color` (never a selector's); the floor and the reference
are lines under the data, named in the legend.

    run = workbench.runstore.load_fidelity("runs/fid")
    transfer_vs_cosine(run.tables["conditions"]).show()
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.plots.colors import series_color
from workbench.plots.marks import reference_line

GENUINE_LABELS = {"kv": "genuine mix, keys and values", "k": "genuine mix, keys only",
                  "v": "genuine mix, values only", "fact": "genuine mix, the fact's rows only"}
SUBSPACE_LABELS = {"wk_colspace": "the column space of W_K, W_V", "bank_span": "the span of the bank's keys"}
TRANSFER_RANGE = [-0.05, 1.05]  # room for points at 0 and 1 above the floor and reference lines
SYMBOLS = ("circle", "square-open", "diamond", "x-thin-open", "triangle-up-open", "star")
SIZES = (13, 11, 9, 7, 9, 7)  # nested sizes: a series drawn over another with the same values leaves it visible


def tell_apart(fig: go.Figure) -> go.Figure:
    """Series that sit on each other stay visible: each its own marker, nested sizes, and the title
    says which series coincide (the same x and y at every point)."""
    series = [t for t in fig.data if t.name and "lines" in str(t.mode or "")]
    for k, trace in enumerate(series):
        trace.marker.symbol = SYMBOLS[k % len(SYMBOLS)]
        trace.marker.size = SIZES[k % len(SIZES)]
        trace.marker.line = {"width": 1.5, "color": trace.line.color}
    groups: list[list] = []  # series with the same x and y at every point, together
    for trace in series:
        key = (trace.xaxis, trace.yaxis, tuple(trace.x), tuple(trace.y))
        found = next((g for g in groups if g[0] == key), None)
        if found:
            found.append(trace.name)
        else:
            groups.append([key, trace.name])
    same = [g[1:] for g in groups if len(g) > 2]
    if same:
        lines = "<br>".join(", ".join(names[:-1]) + f" and {names[-1]}" for names in same)
        fig.update_layout(title=f"{fig.layout.title.text or ''}<br><sub>drawn on each other (the same values): "
                                f"{lines}</sub>", margin={"t": 90 + 16 * len(same)})
    return fig


def _anchors(fig: go.Figure, conditions: pd.DataFrame, row=None, col=None) -> None:
    """Floor and native-reference transfer as dashed lines under the data, named in the legend."""
    for name, label in (("floor", "floor (fact masked)"), ("reference", "native reference")):
        found = conditions[conditions["condition"] == name]
        if len(found):
            value = float(found["transfer"].iloc[0])
            reference_line(fig, value, f"{label} {value:.3f}", series_color(name), row=row, col=col)


def _errors(part: pd.DataFrame) -> dict:
    return {"type": "data", "symmetric": False, "array": part["high"] - part["transfer"],
            "arrayminus": part["transfer"] - part["low"], "thickness": 1}


def transfer_vs_cosine(conditions: pd.DataFrame, x: str = "key_cos", title: str = "") -> go.Figure:
    """Transfer against 1 - achieved cosine (log axis): isotropic noise on the native cache vs the
    genuine interpolation from the masked toward the native cache, plus the projected-noise
    conditions; floor and reference as lines. `x` is key_cos, value_cos or key_cos_fact (the
    masked fact's rows only). Points at cosine 1 (no change) sit on the reference line and are left out."""
    fig = go.Figure()
    series = [("noise", "noise", "isotropic noise on the native cache"),
              (("genuine", "kv"), "genuine", "genuine: masked -> native (weight alpha)")]
    series += [(("subspace_noise", v), v, f"calibrated noise in {SUBSPACE_LABELS.get(v, v)}") for v in
               conditions.loc[conditions["condition"] == "subspace_noise", "variant"].unique()]
    for key, color_key, name in series:
        part = (conditions[(conditions["condition"] == key[0]) & (conditions["variant"] == key[1])]
                if isinstance(key, tuple) else conditions[conditions["condition"] == key])
        part = part[(1 - part[x]) > 0].sort_values(x, ascending=False)
        if part.empty:
            continue
        hover = [f"target {t:.5g}" if pd.notna(t) else f"alpha {a:.3g}" for t, a in zip(part["target_cos"], part["alpha"])]
        fig.add_trace(go.Scatter(
            x=1 - part[x], y=part["transfer"], mode="lines+markers", name=name, error_y=_errors(part),
            line={"color": series_color(color_key)}, marker={"color": series_color(color_key)}, text=hover,
            customdata=part[x], hovertemplate="cos %{customdata:.5f}<br>transfer %{y:.3f}<br>%{text}<extra></extra>"))
    _anchors(fig, conditions)
    fig.update_xaxes(type="log", title=f"1 - {x.replace('_', ' ')} (against the native cache)", exponentformat="power")
    fig.update_yaxes(title="transfer (share answered correctly)", range=TRANSFER_RANGE)
    fig.update_layout(title=title or "Cosine similarity vs consumability", height=440)
    return fig


def layer_sweep(conditions: pd.DataFrame, title: str = "") -> go.Figure:
    """Transfer when the first l layers are replaced (the rest bit-exact), off-manifold noise vs
    the genuine interpolation at the same key cosine. On a small model that matched mix is mostly
    the masked cache (alpha far below 1 in the replaced layers), so this arm mostly measures
    erasing the fact, not staying on the manifold."""
    part = conditions[conditions["condition"] == "layers"]
    fig = go.Figure()
    for variant, label in (("noise", "off-manifold (noise)"),
                           ("genuine", "genuine mix at the same cosine (mostly masked rows)")):
        line = part[part["variant"] == variant].sort_values("layers")
        if len(line):
            fig.add_trace(go.Scatter(x=line["layers"], y=line["transfer"], mode="lines+markers", name=label,
                                     error_y=_errors(line), line={"color": series_color(variant)},
                                     customdata=line["key_cos"],
                                     hovertemplate="l = %{x}<br>transfer %{y:.3f}<br>key cos %{customdata:.4f}<extra></extra>"))
    _anchors(fig, conditions)
    target = part["target_cos"].dropna()
    fig.update_xaxes(title="leading layers replaced (l)")
    fig.update_yaxes(title="transfer", range=TRANSFER_RANGE)
    fig.update_layout(title=title or ("Layer corruption" + (f" at key cosine {target.iloc[0]:.4g}" if len(target) else "")),
                      height=420)
    return fig


def transfer_vs_alpha(conditions: pd.DataFrame, title: str = "") -> go.Figure:
    """Transfer against the genuine mix's weight alpha, per variant (keys and values, keys only,
    values only, the fact's rows only): where the step happens and which half carries it."""
    fig = go.Figure()
    part = conditions[conditions["condition"] == "genuine"]
    for variant, label in GENUINE_LABELS.items():
        line = part[part["variant"] == variant].sort_values("alpha")
        if len(line):
            fig.add_trace(go.Scatter(x=line["alpha"], y=line["transfer"], mode="lines+markers", name=label,
                                     error_y=_errors(line), line={"color": series_color(variant)},
                                     customdata=line["key_cos_fact"],
                                     hovertemplate="alpha %{x:.3g}<br>transfer %{y:.3f}<br>key cos on the fact's "
                                                   "rows %{customdata:.4f}<extra></extra>"))
    _anchors(fig, conditions)
    fig.update_xaxes(title="weight alpha from the masked (0) toward the native cache (1)", range=[-0.05, 1.05])
    fig.update_yaxes(title="transfer", range=TRANSFER_RANGE)
    fig.update_layout(title=title or "The genuine mix: where transfer turns", height=420)
    return fig


def bank_heatmap(conditions: pd.DataFrame, title: str = "", variant: str = "floor") -> go.Figure:
    """Transfer over neighbour rank k (rows) x mixing weight alpha toward that neighbour (columns),
    starting from the floor cache (the paper's Table 4) or, with variant="native", the native one."""
    part = conditions[(conditions["condition"] == "bank") & (conditions["variant"] == variant)]
    grid = part.pivot_table(index="rank", columns="alpha", values="transfer")
    cos = part.pivot_table(index="rank", columns="alpha", values="key_cos")
    text = [[f"{v:.3f}<br>cos {c:.3f}" for v, c in zip(rv, rc)] for rv, rc in zip(grid.values, cos.values)]
    fig = go.Figure(go.Heatmap(
        z=grid.values, x=[f"{a:g}" for a in grid.columns], y=[f"k={k}" for k in grid.index],
        zmin=0, zmax=1, colorscale="Viridis", text=text, texttemplate="%{text}",
        colorbar={"title": "transfer"}, hovertemplate="%{y}, alpha %{x}<br>%{text}<extra></extra>"))
    fig.update_xaxes(title="weight alpha toward the k-th nearest genuine key", type="category")
    fig.update_yaxes(title="neighbour rank", type="category", autorange="reversed")
    anchors = {r["condition"]: r["transfer"] for _, r in conditions[conditions["condition"].isin(["floor", "reference"])].iterrows()}
    subtitle = ", ".join(f"{k} {v:.3f}" for k, v in anchors.items())
    fig.update_layout(title=title or f"Retrieval from a bank of genuine keys, from the {variant} cache ({subtitle})",
                      height=420)
    return fig


def pool_scaling(conditions: pd.DataFrame, title: str = "") -> go.Figure:
    """Augmentation: the reader keeps its (floor) cache and attends over N appended sender caches,
    one holding the fact; controls swap that sender for its masked cache or another distractor.
    The lower panel is the control-subtracted lift (sender minus the strongest control): on the
    transfer panel it would lie on the sender's line wherever the controls are at 0."""
    part = conditions[conditions["condition"] == "augment"]
    wide = part.pivot_table(index="pool", columns="variant", values="transfer")
    has_lift = "sender" in wide and len(wide.columns) > 1
    fig = make_subplots(rows=2 if has_lift else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.68, 0.32] if has_lift else None)
    labels = {"sender": "one sender holds the fact", "masked_sender": "control: that sender masked",
              "distractors_only": "control: distractors only"}
    for variant, label in labels.items():
        line = part[part["variant"] == variant].sort_values("pool")
        if len(line):
            fig.add_trace(go.Scatter(x=line["pool"], y=line["transfer"], mode="lines+markers", name=label,
                                     error_y=_errors(line), line={"color": series_color(variant)}), row=1, col=1)
    _anchors(fig, conditions, row=1, col=1)
    if has_lift:
        lift = wide["sender"] - wide.drop(columns="sender").max(axis=1)
        fig.add_trace(go.Scatter(x=lift.index, y=lift.values, mode="lines+markers", name="lift over strongest control",
                                 line={"dash": "dot", "color": series_color("lift")}), row=2, col=1)
        fig.add_hline(y=0, line={"color": "#bdbdbd", "width": 1}, layer="below", row=2, col=1)
        low, high = min(0.0, float(lift.min())), max(0.0, float(lift.max()))
        fig.update_yaxes(title="lift", range=[low - 0.1, high + 0.1], row=2, col=1)
    pools = sorted(part["pool"].unique())
    fig.update_xaxes(type="log", tickvals=pools, ticktext=[f"{p:g}" for p in pools])
    fig.update_xaxes(title="senders N", row=2 if has_lift else 1, col=1)
    fig.update_yaxes(title="transfer", range=TRANSFER_RANGE, row=1, col=1)
    fig.update_layout(title=title or "Augmentation: scaling the sender pool", height=480 if has_lift else 420)
    return fig


def fidelity_figures(conditions: pd.DataFrame) -> dict[str, go.Figure]:
    """Every figure from a fidelity run's `conditions` table."""
    return {"cosine": tell_apart(transfer_vs_cosine(conditions)), "alpha": tell_apart(transfer_vs_alpha(conditions)),
            "layers": tell_apart(layer_sweep(conditions)), "bank": bank_heatmap(conditions),
            "pool": tell_apart(pool_scaling(conditions))}
