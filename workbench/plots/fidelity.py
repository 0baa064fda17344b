"""Figures of a fidelity run (`kvwb fidelity`): transfer against cosine, the layer-corruption
sweep, the bank grid and sender-pool scaling. Inputs are the run's `conditions` table (one
row per condition, with Wilson intervals); floor and reference lines come from its own rows.

    run = workbench.runstore.load_fidelity("runs/fid")
    transfer_vs_cosine(run.tables["conditions"]).show()
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

_COLORS = {"noise": "#d62728", "genuine": "#1f77b4", "wk_colspace": "#ff7f0e", "bank_span": "#9467bd",
           "sender": "#2ca02c", "masked_sender": "#7f7f7f", "distractors_only": "#8c564b",
           "floor_noise": "#e377c2", "kv": "#1f77b4", "k": "#17becf", "v": "#bcbd22", "fact": "#9467bd"}
GENUINE_LABELS = {"kv": "genuine mix, keys and values", "k": "genuine mix, keys only",
                  "v": "genuine mix, values only", "fact": "genuine mix, the fact's rows only"}


def _anchors(fig: go.Figure, conditions: pd.DataFrame) -> None:
    """Floor and native-reference transfer as dashed horizontal lines."""
    for name, label, color, where in (("floor", "floor (fact masked)", "grey", "bottom left"),
                                      ("reference", "native reference", "black", "top left")):
        row = conditions[conditions["condition"] == name]
        if len(row):
            fig.add_hline(y=float(row["transfer"].iloc[0]), line={"dash": "dash", "color": color, "width": 1},
                          annotation_text=f"{label} {float(row['transfer'].iloc[0]):.3f}",
                          annotation_position=where)


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
    series += [(("subspace_noise", v), v, f"calibrated noise in {v}") for v in
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
            line={"color": _COLORS.get(color_key)}, text=hover,
            customdata=part[x], hovertemplate="cos %{customdata:.5f}<br>transfer %{y:.3f}<br>%{text}<extra></extra>"))
    _anchors(fig, conditions)
    fig.update_xaxes(type="log", title=f"1 - {x.replace('_', ' ')} (against the native cache)")
    fig.update_yaxes(title="transfer (share answered correctly)", range=[-0.02, 1.02])
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
                                     error_y=_errors(line), line={"color": _COLORS[variant]},
                                     customdata=line["key_cos"],
                                     hovertemplate="l = %{x}<br>transfer %{y:.3f}<br>key cos %{customdata:.4f}<extra></extra>"))
    _anchors(fig, conditions)
    target = part["target_cos"].dropna()
    fig.update_xaxes(title="leading layers replaced (l)")
    fig.update_yaxes(title="transfer", range=[-0.02, 1.02])
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
                                     error_y=_errors(line), line={"color": _COLORS[variant]},
                                     customdata=line["key_cos_fact"],
                                     hovertemplate="alpha %{x:.3g}<br>transfer %{y:.3f}<br>key cos on the fact's "
                                                   "rows %{customdata:.4f}<extra></extra>"))
    _anchors(fig, conditions)
    fig.update_xaxes(title="weight alpha from the masked (0) toward the native cache (1)", range=[-0.02, 1.02])
    fig.update_yaxes(title="transfer", range=[-0.02, 1.02])
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
    The dotted line is the control-subtracted lift (sender minus the strongest control)."""
    part = conditions[conditions["condition"] == "augment"]
    fig = go.Figure()
    labels = {"sender": "one sender holds the fact", "masked_sender": "control: that sender masked",
              "distractors_only": "control: distractors only"}
    for variant, label in labels.items():
        line = part[part["variant"] == variant].sort_values("pool")
        if len(line):
            fig.add_trace(go.Scatter(x=line["pool"], y=line["transfer"], mode="lines+markers", name=label,
                                     error_y=_errors(line), line={"color": _COLORS[variant]}))
    wide = part.pivot_table(index="pool", columns="variant", values="transfer")
    if "sender" in wide and len(wide.columns) > 1:
        lift = wide["sender"] - wide.drop(columns="sender").max(axis=1)
        fig.add_trace(go.Scatter(x=lift.index, y=lift.values, mode="lines+markers", name="lift over strongest control",
                                 line={"dash": "dot", "color": "black"}))
    _anchors(fig, conditions)
    fig.update_xaxes(title="senders N", type="log", tickvals=sorted(part["pool"].unique()))
    fig.update_yaxes(title="transfer")
    fig.update_layout(title=title or "Augmentation: scaling the sender pool", height=420)
    return fig


def fidelity_figures(conditions: pd.DataFrame) -> dict[str, go.Figure]:
    """Every figure from a fidelity run's `conditions` table."""
    return {"cosine": transfer_vs_cosine(conditions), "alpha": transfer_vs_alpha(conditions),
            "layers": layer_sweep(conditions), "bank": bank_heatmap(conditions), "pool": pool_scaling(conditions)}
