"""The per-example figures, composed once for the app, the reports and the notebooks.

Each builder takes a Diagnosis and the user's choices and returns a plotly Figure; labels
and log scales of signals come from the signal registry, the reference selectors from the
selector registry. Importing this module makes `Diagnosis.show()` and `_repr_html_` draw them.

    figs = diagnosis_figures(d, budget=0.2, selectors=["cacheblend", "cadence-grad"])
    figs["tokens"].show()
    d.show()                     # every figure inline in Jupyter
"""

from __future__ import annotations

import uuid

import pandas as pd
import plotly.graph_objects as go

from workbench.diagnosis import Diagnosis, register_renderer
from workbench.errors import WorkbenchError
from workbench.plots.answer import answer_tokens_figure
from workbench.plots.embed import figure_div, plotly_script
from workbench.plots.layer_effects import layer_effects_figure
from workbench.plots.text import escape
from workbench.plots.tokens import (
    deviation_by_layer_type,
    layer_heatmap,
    picks_matrix,
    residual_by_layer,
    token_strip,
)
from workbench.selectors.registry import reference_selectors
from workbench.signals.registry import is_log, label

KINDS = {"k": "keys (post-RoPE)", "v": "values"}


def table(d: Diagnosis, name: str) -> pd.DataFrame:
    """A table of the diagnosis, empty when it has none (older records lack some)."""
    found = d.tables.get(name)
    return found if found is not None else pd.DataFrame()


def budgets(d: Diagnosis) -> list[float]:
    """The budgets the diagnosis repaired at, ascending."""
    sel = table(d, "selections")
    return sorted(float(b) for b in sel["budget"].unique()) if not sel.empty else []


def chosen_selectors(d: Diagnosis, selectors=None) -> list[str]:
    """`selectors` when given, else the diagnosis's selectors that are not references."""
    if selectors is not None:
        return list(selectors)
    sel = table(d, "selections")
    labels = list(dict.fromkeys(sel["selector"])) if not sel.empty else []
    return [s for s in labels if s not in reference_selectors()]


# shown first when a view has room for a few selectors: one of each family the literature compares
PREFERRED = ("cadence-grad", "cadence", "bcr:grow", "bcr", "bcr:single", "cacheblend", "random")


def default_shown(labels, n: int = 4) -> list[str]:
    """Up to `n` of `labels` to show first: one CADENCE, one BCR, CacheBlend and random where the
    run has them, then the others; in the run's order."""
    labels = list(labels)
    picked, families = [], set()
    for want in PREFERRED:
        family = want.split(":")[0].split("-")[0]
        if want in labels and family not in families:
            picked.append(want)
            families.add(family)
    chosen = set((picked + [label for label in labels if label not in picked])[:n])
    return [label for label in labels if label in chosen]


def _budget(d: Diagnosis, budget: float | None) -> float:
    if budget is not None:
        return float(budget)
    found = budgets(d)
    if not found:
        raise WorkbenchError(f"diagnosis of {d.example_id!r} holds no selections (no budget to show)")
    return found[0]


def strip_figure(d: Diagnosis, budget: float | None = None, signal: str = "deviation", outline: str | None = None,
                 layer: int | None = None, kind: str = "v", metric: str = "rel_l2", log: bool | None = None,
                 reused_only: bool = False, segments: list[str] | None = None, highlight: int | None = None,
                 selectors=None) -> go.Figure:
    """The token strip coloured by a token signal, or by the splice's deviation at one layer
    (`signal="deviation"`: `layer` defaults to the last, `kind` k or v, `metric` l2/rel_l2/cosine);
    `outline` a selector whose picks at `budget` are outlined; `segments` the segments shown
    (default all); `highlight` the chosen token's position. Each token's hover lists every signal's
    value there and which of `selectors` (default: the non-reference ones) pick it at `budget`."""
    if signal == "deviation":
        dev = table(d, "deviation")
        if dev.empty:
            raise WorkbenchError(f"diagnosis of {d.example_id!r} holds no deviation table")
        layer = int(dev["layer"].max()) if layer is None else int(layer)
        rows = dev[(dev["layer"] == layer) & (dev["kind"] == kind) & (dev["metric"] == metric)]
        values, log = rows.set_index("position")["value"], bool(log)
        what = f"{escape(metric)} deviation of {escape(kind.upper())} at layer {layer}"
        short = f"{escape(metric)} of {escape(kind.upper())}, layer\u00a0{layer}"  # "layer 29" never broken
    else:
        log = is_log(signal, "token") if log is None else log
        values, what = d.signal(signal), escape(label(signal, "token"))
        short = what
    picks = None
    if outline is not None:
        budget = _budget(d, budget)
        picks = d.picks(outline, budget)
        what += f" · outlined: {escape(outline)} at b = {budget:g}"
    if segments is not None:
        what += f" · {escape(', '.join(segments))}"
    found = budgets(d)
    shown_at = _budget(d, budget) if found else None
    details = None
    if shown_at is not None:
        card = token_values(d, shown_at, selectors, layer=layer)
        details = card.drop(columns=["token", "segment"]).apply(_hover_lines, axis=1)
    return token_strip(table(d, "tokens"), values, title=what, picks=picks, log=log, reused_only=reused_only,
                       value_label=_wrapped(short), segments=segments, highlight=highlight, details=details)


def token_values(d: Diagnosis, budget: float, selectors=None, layer: int | None = None) -> pd.DataFrame:
    """One row per reused token (indexed by position): its token and segment, every token signal's
    value there (columns named by the registry's labels), the splice's relative L2 deviation of the
    values at `layer` (default the last), and "picked by": which of `selectors` (default the
    non-reference ones; a drawn control's first draw) recompute it at `budget`."""
    tokens = table(d, "tokens")
    card = tokens[tokens["reused"]].set_index("position")[["token", "segment"]].copy()
    signals = table(d, "token_signals")
    for name in (dict.fromkeys(signals["signal"]) if not signals.empty else ()):
        card[label(name, "token")] = d.signal(name)
    dev = table(d, "deviation")
    if not dev.empty:
        layer = int(dev["layer"].max()) if layer is None else int(layer)
        rows = dev[(dev["layer"] == layer) & (dev["kind"] == "v") & (dev["metric"] == "rel_l2")]
        card[f"value deviation (rel. L2), layer {layer}"] = rows.set_index("position")["value"]
    picked = {s: set(d.picks(s, budget)) for s in chosen_selectors(d, selectors)}
    card["picked by"] = [", ".join(s for s, rows in picked.items() if p in rows) for p in card.index]
    return card


def _hover_lines(row: pd.Series) -> str:
    """A token's signals and pickers as hover lines (escaped)."""
    lines = [f"{escape(name)}: {value:.4g}" for name, value in row.items()  # no row.drop: it was most of a long strip's time
             if name != "picked by" and pd.notna(value)]
    return "<br>".join(lines + [f"picked by: {escape(row['picked by']) or 'none shown'}"])


def _wrapped(text: str, width: int = 18) -> str:
    """A colour-bar title broken into short lines (it stands beside a narrow bar) at its spaces;
    a no-break space (U+00A0) keeps its two words on one line."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])


def picks_figure(d: Diagnosis, budget: float | None = None, selectors=None, highlight: int | None = None) -> go.Figure:
    """Which reused rows each selector recomputes at `budget` (default: the non-reference ones);
    `highlight` the chosen token's position."""
    budget = _budget(d, budget)
    picks = {s: d.picks(s, budget) for s in chosen_selectors(d, selectors)}
    outcomes = table(d, "outcomes")
    recall = {}
    if "evidence_recall" in outcomes:  # a drawn control's: the mean over its draws
        at = outcomes[(outcomes["budget"] - budget).abs() < 1e-9]
        recall = at.groupby("selector")["evidence_recall"].mean().to_dict()
    return picks_matrix(table(d, "tokens"), picks, highlight=highlight, recall={s: recall.get(s) for s in picks},
                        title=f"rows each selector recomputes at b = {budget:g} (last line: share that agree)")


def deviation_figure(d: Diagnosis, kind: str = "v", metric: str = "rel_l2", highlight: int | None = None) -> go.Figure:
    """Splice vs dense deviation per layer and reused token, before any repair (`highlight`: the
    chosen token's position, its column outlined)."""
    dev = table(d, "deviation")
    rows = dev[(dev["kind"] == kind) & (dev["metric"] == metric)] if not dev.empty else dev
    if rows.empty:
        raise WorkbenchError(f"diagnosis of {d.example_id!r} holds no {kind}/{metric} deviation")
    return layer_heatmap(rows, table(d, "tokens"), title=f"splice vs dense: {escape(metric)} of {KINDS.get(kind, kind)}"
                         + _types_note(d), value_label=escape(metric), layer_names=_layer_names(d),
                         highlight=highlight)


def has_layer_types(d: Diagnosis) -> bool:
    """Whether the diagnosed model mixes sliding-window (local) and global layers (Gemma 3)."""
    windows = d.model.get("layer_windows") or []
    return any(w is not None for w in windows) and any(w is None for w in windows)


def layer_type_figure(d: Diagnosis, kind: str = "v", metric: str = "rel_l2") -> go.Figure:
    """Splice vs dense deviation per layer, local and global layers marked apart."""
    if not has_layer_types(d):
        raise WorkbenchError(f"the model of {d.example_id!r} does not mix local and global layers")
    dev = table(d, "deviation")
    rows = dev[(dev["kind"] == kind) & (dev["metric"] == metric)] if not dev.empty else dev
    if rows.empty:
        raise WorkbenchError(f"diagnosis of {d.example_id!r} holds no {kind}/{metric} deviation")
    return deviation_by_layer_type(rows, d.model["layer_windows"], value_label=escape(metric),
                                   title=f"splice vs dense by layer type: {escape(metric)} of {KINDS.get(kind, kind)}")


def layer_signal_figure(d: Diagnosis, name: str, log: bool | None = None, highlight: int | None = None) -> go.Figure:
    """A per-layer signal as a layer x token heatmap (log10 when the registry says so; `highlight`:
    the chosen token's position)."""
    rows = table(d, "layer_signals")
    rows = rows[rows["signal"] == name] if not rows.empty else rows
    if rows.empty:
        raise WorkbenchError(f"diagnosis of {d.example_id!r} holds no layer signal {name!r}")
    log = is_log(name, "layer") if log is None else log
    return layer_heatmap(rows, table(d, "tokens"), log=log, value_label=escape(label(name, "layer")),
                         title=f"{escape(label(name, 'layer'))}, per layer and reused token" + _types_note(d),
                         layer_names=_layer_names(d), highlight=highlight)


def _layer_names(d: Diagnosis) -> dict[int, str] | None:
    """Layer axis labels "5 G" / "4 L" for models with global and local layers (else None)."""
    if not has_layer_types(d):
        return None
    return {l: f"{l} {'G' if w is None else 'L'}" for l, w in enumerate(d.model["layer_windows"])}


def _types_note(d: Diagnosis) -> str:
    return " (layers: L local, G global)" if has_layer_types(d) else ""


def residual_figure(d: Diagnosis, budget: float | None = None, kind: str = "v", selectors=None) -> go.Figure:
    """Deviation left per layer after each selector's repair at `budget` (all selectors by default)."""
    budget = _budget(d, budget)
    return residual_by_layer(table(d, "residual"), budget, kind=kind,
                             selectors=None if selectors is None else list(selectors))


def diagnosis_figures(d: Diagnosis, budget: float | None = None, selectors=None) -> dict[str, go.Figure]:
    """The per-example figures with sensible defaults (first budget, non-reference selectors):
    "tokens", "picks", "deviation", "layer_types" (models with local and global layers), one
    "layer:NAME" per layer signal, "residual", "answer_tokens" (the dense answer token by token),
    "layer_effects" (of the first selector); a figure
    whose table is empty is left out."""
    found = budgets(d)
    budget = float(budget) if budget is not None else (found[0] if found else None)
    chosen = chosen_selectors(d, selectors)
    figures = {}
    signals = table(d, "token_signals")
    if not table(d, "deviation").empty or not signals.empty:
        signal = "deviation" if not table(d, "deviation").empty else str(signals["signal"].iloc[0])
        figures["tokens"] = strip_figure(d, budget, signal, outline=chosen[0] if chosen and budget is not None else None)
    if chosen and budget is not None:
        figures["picks"] = picks_figure(d, budget, chosen)
    if not table(d, "deviation").empty:
        figures["deviation"] = deviation_figure(d)
        if has_layer_types(d):
            figures["layer_types"] = layer_type_figure(d)
    layer = table(d, "layer_signals")
    for name in (dict.fromkeys(layer["signal"]) if not layer.empty else ()):
        figures[f"layer:{name}"] = layer_signal_figure(d, name)
    if not table(d, "residual").empty and budget is not None:
        references = [s for s in dict.fromkeys(table(d, "residual")["selector"]) if s in reference_selectors()]
        figures["residual"] = residual_figure(d, budget, selectors=references + chosen)
    if not table(d, "answer_tokens").empty and budget is not None:
        figures["answer_tokens"] = answer_tokens_figure(d, budget, chosen)
    effects = layer_effects_view(d, budget, chosen[0]) if chosen and budget is not None else None
    if effects is not None:
        figures["layer_effects"] = effects
    return figures


def layer_effects_view(d: Diagnosis, budget: float, selector: str) -> go.Figure | None:
    """The per-layer recompute effects of `selector`'s repair at `budget` (the "layer_effects"
    table, `diagnose(..., layer_effects=True)`), or None when the diagnosis has none."""
    effects = table(d, "layer_effects")
    if effects.empty:
        return None
    rows = effects[(effects["selector"] == selector) & ((effects["budget"] - budget).abs() < 1e-9)]
    if rows.empty:
        return None
    return layer_effects_figure(rows, f"where {escape(selector)}'s repair (b = {budget:g}) recovers the answer, "
                                      "layer by layer")


def _header(d: Diagnosis) -> str:
    ex, answers = d.example, d.answers
    flip, strict = answers.spliced.flips(answers.dense)
    verdict = "flips against dense" if flip else ("same answer, other tokens" if strict else "matches dense")
    rows = [("question", ex.question), ("gold", " | ".join(ex.gold) or "(none)"),
            ("dense answer", answers.dense.text), ("spliced answer", f"{answers.spliced.text}  ({verdict})"),
            ("context", f"{d.context.n_tokens} tokens, {d.context.n_reused} reused · model {d.model.get('name', '?')}")]
    body = "".join(f'<tr><th style="text-align:left;padding-right:1em">{k}</th>'
                   f'<td style="white-space:pre-wrap">{escape(v)}</td></tr>' for k, v in rows)
    return f"<h3>Diagnosis of example {escape(ex.id)}</h3><table>{body}</table>"


def diagnosis_html(d: Diagnosis, budget: float | None = None, selectors=None) -> str:
    """A compact HTML view (header, then every figure) for Jupyter; plotly.js is included once."""
    prefix = uuid.uuid4().hex[:8]
    figures = diagnosis_figures(d, budget, selectors)
    divs = "".join(figure_div(fig, f"kvwb-{prefix}-{i}") for i, fig in enumerate(figures.values()))
    return f"<div>{_header(d)}{plotly_script() if figures else ''}{divs}</div>"


def show_diagnosis(d: Diagnosis, budget: float | None = None, selectors=None) -> None:
    """Display every per-example figure (`fig.show()`, inline in Jupyter)."""
    for fig in diagnosis_figures(d, budget, selectors).values():
        fig.show()


register_renderer(diagnosis_html, show_diagnosis)
