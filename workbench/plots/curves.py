"""Figures across a data set: accuracy, the share of the EM gap closed and flips against budget,
rows against accuracy, flip matrix. Inputs are the tables of `workbench.experiments.summary` and `.flips`.

Each selector keeps its colour and marker (`plots.colors`). Budgets sit evenly spaced, one slot
each, and the selectors' points at a budget side by side within its slot (`marks.dodge`), so
coinciding values and their intervals stay apart; hover always shows the true values. The
references (reuse all, full recompute) are lines named in the legend. A point whose selector
recomputed other rows than its budget buys (BCR's chunks) is hollow, its rows in hover.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.plots.colors import selector_color, selector_style
from workbench.plots.marks import dodge, reference_line
from workbench.plots.text import escape
from workbench.selectors.registry import reference_selectors

SLOT = 0.6  # share of a budget's slot that its selectors' points spread over
LABELLED_SELECTORS = 4  # rows against EM: each point names its budget while at most this many selectors are shown
DODGE_ROWS = 0.06  # share of the rows axis's data range the points at one budget spread over
LEGEND_ENTRY = 20  # px a legend entry takes beside the plot (plotly's default font, a marker and a line)
LEGEND_FRAME = 200  # px of a figure outside its plot area: title, x-axis ticks and title, margins
SPEND_TOLERANCE = 0.1  # a point whose rows lie further than this share from its budget's is drawn hollow
RANGE_PAD = 0.06  # share of a budget curve's y span left beyond its data and references
REFERENCE_NAMES = {"none": "reuse all (none)", "full": "full recompute (full)"}

METRIC_TITLES = {"em": "exact match", "flip_rate": "flip rate vs dense", "f1_to_dense": "F1 to the dense answer",
                 "first_token_agree": "first token = dense's", "dense_logprob_mean":
                 "dense answer's log-prob per token", "agree_prefix": "leading tokens = dense's",
                 "first_kl": "KL(dense || cell), first token", "retrieved": "retrieved (the task's string match)",
                 "ran_on": "answer ran on past dense's", "answer_tokens": "answer length (tokens)",
                 "evidence_recall": "evidence rows recomputed (recall)",
                 "evidence_precision": "recomputed rows that are evidence (precision)"}
_INTERVALS = {"em": ("em_low", "em_high"), "flip_rate": ("flip_low", "flip_high")}


def _shown(summary: pd.DataFrame, selectors) -> pd.DataFrame:
    """The rows of `selectors` (None: all), the references always kept."""
    if selectors is None:
        return summary
    keep = set(selectors) | set(reference_selectors())
    return summary[summary["selector"].isin(keep)]


def budget_curve(summary: pd.DataFrame, metric: str = "em", title: str = "", selectors=None) -> go.Figure:
    """A summary column (`em`, `flip_rate` or a graded outcome such as `f1_to_dense`) against
    budget, per selector (`selectors`: those shown, default all), with its 95% interval where the
    summary has one (`METRIC_LOW/_HIGH`); the references drawn as dashed lines in the legend."""
    low, high = _INTERVALS.get(metric, (f"{metric}_low", f"{metric}_high"))
    bars = low in summary and high in summary
    references = reference_selectors()
    budgets = sorted(float(b) for b in summary["budget"].unique())
    slot = {b: i for i, b in enumerate(budgets)}  # [budget] -> its slot on the axis
    spent = off_budget(summary)  # over every selector, before any is left out
    summary = _shown(summary, selectors)
    labels = [s for s in dict.fromkeys(summary["selector"]) if s not in references]
    offsets = dodge(labels, SLOT if len(labels) > 1 else 0.0)
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        line = line.sort_values("budget")
        if label in references:
            value = float(line[metric].mean())
            reference_line(fig, value, f"{REFERENCE_NAMES.get(label, escape(label))} {value:.3g}",
                           selector_color(label))
            continue
        notes, style = spent[line.index], selector_style(label)
        hollow = bool((notes != "").any())
        if hollow:  # the legend's entry filled, from a trace of its own: plotly draws it from the first point
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name=escape(label), legendgroup=label,
                                     hoverinfo="skip", **style))
            symbol = style["marker"]["symbol"]
            style["marker"] = {**style["marker"], "symbol": [_hollow(symbol) if n else symbol for n in notes]}
        fig.add_trace(go.Scatter(
            x=[slot[float(b)] + offsets[label] for b in line["budget"]], y=line[metric], mode="lines+markers",
            name=escape(label), text=[f"b = {b:g}" + (f"<br>{n}" if n else "") for b, n in zip(line["budget"], notes)],
            hovertemplate="%{text}<br>%{y:.3f}<extra>" + escape(label) + "</extra>", legendgroup=label,
            showlegend=not hollow,
            error_y={"type": "data", "symmetric": False, "array": line[high] - line[metric],
                     "arrayminus": line[metric] - line[low], "thickness": 1.2, "width": 3} if bars else None,
            **style))
    fig.update_xaxes(title="budget b (share of the candidate pool, by default the changed rows; selectors side by side)",
                     tickvals=list(range(len(budgets))), ticktext=[f"{b:g}" for b in budgets],
                     range=[-0.5, len(budgets) - 0.5], showgrid=False, zeroline=False)
    for i in range(1, len(budgets)):  # a light line between budgets' slots
        fig.add_vline(x=i - 0.5, line={"color": "#d0d0d0", "width": 1}, layer="below")
    fig.update_yaxes(title=METRIC_TITLES.get(metric, metric), **_padded(summary, metric, (low, high) if bars else ()))
    # each selector a legend group (its line and, where hollow, its entry): no gap between groups,
    # which would push the last entries past the height `height_for_legend` gives
    fig.update_layout(title=title, height=height_for_legend(fig, 440), legend={"tracegroupgap": 0})
    return fig


def off_budget(summary: pd.DataFrame) -> pd.Series:
    """Per row of a summary, "spent X rows (a budget-matched selector: Y)" where the selector's mean
    rows recomputed lie more than SPEND_TOLERANCE from Y, the rows its budget buys (a chunked
    selector that fits no whole chunk spends none), else "". Y: the mean rows of the selectors whose
    share recomputed is within SPEND_TOLERANCE of the budget, else the budget times the pool (rows
    over share). A summary without rows and shares: "" throughout."""
    notes = pd.Series("", index=summary.index, dtype=object)
    if not {"rows_per_example", "share_recomputed"} <= set(summary.columns):
        return notes
    rows, share, budget = (summary[c].astype(float) for c in ("rows_per_example", "share_recomputed", "budget"))
    chosen = ~summary["selector"].isin(reference_selectors()) & rows.notna()
    matched = chosen & ((share - budget).abs() <= SPEND_TOLERANCE * budget)
    pool = (rows / share)[share > 0].median()  # rows over share: the pool, whichever selector spent
    for b in budget[chosen].unique():
        at = chosen & (budget == b)
        bought = rows[matched & at].mean() if (matched & at).any() else b * pool
        if not bought > 0:  # no budget, or no pool known
            continue
        far = at & ((rows - bought).abs() > SPEND_TOLERANCE * bought)
        what = "a budget-matched selector" if (matched & at).any() else "the budget buys"
        notes[far] = [f"spent {r:.3g} rows ({what}: {bought:.3g})" for r in rows[far]]
    return notes


@lru_cache(maxsize=None)
def _hollow(symbol: str) -> str:
    """A marker's hollow form; a coin's, already hollow, with a dot where plotly has one."""
    hollow = f"{symbol}-dot" if symbol.endswith("-open") else f"{symbol}-open"
    try:
        go.scatter.Marker(symbol=hollow)
    except ValueError:  # hourglass and bowtie have no dotted form
        return symbol
    return hollow


def _padded(summary: pd.DataFrame, metric: str, bounds) -> dict:
    """The y axis of a budget curve: its data, intervals and reference lines (0 too, where every
    value is positive) with a margin, so a reference at the edge is not on the plot's border; no
    zero line where a reference is drawn at 0 (it would lie over it)."""
    values = pd.concat([summary[c] for c in (metric, *bounds)]).astype(float).dropna()
    if values.empty:
        return {}
    low, high = min(float(values.min()), 0.0), float(values.max())
    pad = RANGE_PAD * max(high - low, 0.05)
    references = summary[summary["selector"].isin(reference_selectors())].groupby("selector")[metric].mean()
    return {"range": [low - pad, high + pad], "zeroline": not bool((references == 0).any())}


def gap_curve(summary: pd.DataFrame, title: str = "", selectors=None) -> go.Figure:
    """The share of the dense-vs-splice gap each selector closes, (x - splice) / (dense - splice) of
    the summary's measure (`attrs["measure"]`: EM by default, or retrieved), against budget with its
    paired bootstrap 95% interval: the papers' headline quantity. The references sit at 0 (reuse
    all) and 1 (full recompute). Where dense and splice score alike there is no gap, and the figure
    says so instead of drawing one."""
    measure = {"em": "EM"}.get(summary.attrs.get("measure", "em"), summary.attrs.get("measure", "em"))
    if summary["gap_recovered"].isna().all():
        fig = go.Figure()
        note = f"no {measure} gap: dense and the splice score alike, so no share of it exists"
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.update_layout(title=f"{title}<br><sub>{note}</sub>" if title else note, height=160)
        return fig
    fig = budget_curve(summary, "gap_recovered", title, selectors)
    fig.update_yaxes(title=f"share of the {measure} gap closed<br>(0: reuse all, 1: full; above 1: above dense's {measure})")
    return fig


def height_for_legend(fig: go.Figure, least: int) -> int:
    """`least`, or more where the legend beside the plot needs it: every entry shown without
    scrolling (plotly scrolls a legend taller than the plot area and hides the rest)."""
    entries = (sum(1 for t in fig.data if t.showlegend is not False and t.name)
               + sum(1 for s in fig.layout.shapes if s.showlegend and s.name))  # reference lines
    return max(least, LEGEND_FRAME + LEGEND_ENTRY * entries)


def rows_vs_accuracy(summary: pd.DataFrame, title: str = "", selectors=None) -> go.Figure:
    """Rows recomputed per example against exact match, one line per selector (points dodged,
    never left of 0 rows). The references are lines at their EM, their rows in the legend (full
    recompute's rows would stretch the axis past every selector's); the budgets are named on a
    top axis at their median rows, and beside each point while few selectors are shown."""
    summary = _shown(summary, selectors)
    references = reference_selectors()
    shown = summary[~summary["selector"].isin(references)]
    labels = list(dict.fromkeys(shown["selector"]))
    rows = shown["rows_per_example"].astype(float)
    width = float(rows.max() - rows.min()) if len(rows) else 0.0
    offsets = dodge(labels, DODGE_ROWS * (width or 1.0))
    fig = go.Figure()
    for label, line in summary.groupby("selector", sort=False):
        if label in references:
            value, spent = float(line["em"].mean()), float(line["rows_per_example"].mean())
            reference_line(fig, value, f"{REFERENCE_NAMES.get(label, escape(label))}: EM {value:.3g} at "
                                       f"{spent:.0f} rows", selector_color(label))
            continue
        line = line.sort_values("rows_per_example")
        x = np.maximum(line["rows_per_example"].to_numpy(float) + offsets.get(label, 0.0), 0.0)
        fig.add_trace(go.Scatter(
            x=x, y=line["em"], mode="lines+markers+text" if len(labels) <= LABELLED_SELECTORS else "lines+markers",
            name=escape(label), text=[f"b={b:g}" for b in line["budget"]], textposition="top center",
            textfont={"size": 10, "color": selector_color(label)},
            customdata=[f"b = {b:g}<br>{r:.1f} rows" for b, r in zip(line["budget"], line["rows_per_example"])],
            hovertemplate="%{customdata}<br>EM %{y:.3f}<extra>" + escape(label) + "</extra>",
            **selector_style(label)))
    fig.update_xaxes(title="rows recomputed per example (points of each selector slightly apart)")
    if len(shown):
        at = shown.groupby("budget")["rows_per_example"].median().sort_index()  # [budget] -> its median rows
        fig.add_trace(go.Scatter(x=list(at.values), y=[None] * len(at), xaxis="x2", showlegend=False,
                                 hoverinfo="skip", mode="markers"))
        fig.update_layout(xaxis2={"overlaying": "x", "side": "top", "matches": "x", "tickvals": list(at.values),
                                  "ticktext": [f"b={b:g}" for b in at.index], "showgrid": False,
                                  "title": {"text": "budget (at its median rows)", "standoff": 4}})
    values = summary["em"].astype(float).dropna()
    pad = 0.06 * max(float(values.max() - values.min()), 0.05) if len(values) else 0.05
    # the references' lines inside the plot, not on its edges
    fig.update_yaxes(title="exact match", range=[float(values.min()) - pad, float(values.max()) + pad] if len(values) else None)
    fig.update_layout(title=title, height=height_for_legend(fig, 460), margin={"t": 110})
    return fig


def _cell_text(share: float, draws: int) -> str:
    """What a flip-matrix cell shows: a selector's flip, or a coin's flips out of its draws."""
    if share != share:  # NaN: no outcome
        return "no outcome"
    if draws <= 1:
        return "flips against dense" if share > 0.5 else "kept dense's answer"
    flips = int(round(share * draws))
    return f"flips in {flips} of its {draws} draws" if flips else f"kept dense's answer in all {draws} draws"


def flip_matrix_figure(matrix: pd.DataFrame, title: str = "", questions: dict | None = None,
                       draws: dict | None = None) -> go.Figure:
    """Examples x selectors: red where the repaired answer flips against dense; a drawn control's
    cell is the share of its draws that flip (a shade between; `draws`: draws per selector).
    Hover names the example, its question (`questions` by id) and the cell's flips; an invisible
    marker on each cell lets a click select it (the app opens that example)."""
    z = matrix.to_numpy().astype(float)  # [example, selector]
    questions, draws = questions or {}, draws or {}
    ids = [str(i) for i in matrix.index]
    hover = [[f"example {escape(i)}: {escape(questions.get(i, ''))}<br>{escape(c)}: "
              f"{_cell_text(z[r, k], int(draws.get(c, 1)))}" for k, c in enumerate(matrix.columns)]
             for r, i in enumerate(ids)]
    x, y = [escape(c) for c in matrix.columns], [escape(i) for i in ids]
    # the colour bar's title in two lines: a matrix of a few examples leaves it ~130 px of bar
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, zmin=0, zmax=1, colorscale=[[0, "#e8f1e4"], [1, "#c0392b"]],
                               xgap=2, ygap=2, hoverinfo="skip",
                               colorbar={"title": {"text": "flips (a coin:<br>share of its draws)", "side": "right"},
                                         "tickvals": [0, 0.5, 1], "ticktext": ["kept", "½", "flipped"],
                                         "len": 1, "lenmode": "fraction", "thickness": 14}))
    cells = [(c, i, hover[r][k], ids[r], str(matrix.columns[k])) for r, i in enumerate(y) for k, c in enumerate(x)]
    fig.add_trace(go.Scatter(x=[c[0] for c in cells], y=[c[1] for c in cells], mode="markers", showlegend=False,
                             name="cells", marker={"size": 14, "opacity": 0, "symbol": "square"},
                             customdata=[[c[3], c[4]] for c in cells], text=[c[2] for c in cells],
                             hovertemplate="%{text}<extra>click: open in the explorer</extra>"))
    # every example labelled while the labels fit (18 px a row); a large study gets a taller
    # figure capped at MAX_MATRIX_HEIGHT, its rows thinner and its labels thinned by plotly
    labelled = len(matrix) <= LABELLED_ROWS
    fig.update_yaxes(title="example", range=[len(ids) - 0.5, -0.5], type="category", showgrid=False,
                     **({"dtick": 1} if labelled else {}))  # the first example on top
    # the selectors named at the top (where a tall matrix starts) and, on a tall one, at the bottom too
    fig.update_xaxes(type="category", showgrid=False, range=[-0.5, len(x) - 0.5], side="top", tickangle=-35)
    if len(matrix) > BOTTOM_LABELS_FROM:
        fig.add_trace(go.Scatter(x=x, y=[None] * len(x), xaxis="x2", showlegend=False, hoverinfo="skip",
                                 mode="markers"))
        fig.update_layout(xaxis2={"overlaying": "x", "side": "bottom", "matches": "x", "type": "category",
                                  "showgrid": False, "tickangle": -35})
    fig.update_layout(title=title, height=min(MAX_MATRIX_HEIGHT, max(360, 18 * len(matrix) + 220)),
                      plot_bgcolor="#8a8a8a", margin={"t": 150})  # the gaps between cells: a grid
    return fig


LABELLED_ROWS = 120
BOTTOM_LABELS_FROM = 25  # rows from which the selectors are named under the matrix as well
MAX_MATRIX_HEIGHT = 2400
