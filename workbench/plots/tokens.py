"""Per-example figures from a Diagnosis's tables: the token strip, selectors' picks, layer x
token heatmaps, deviation left per layer. Every function returns a plotly Figure; `title` is
shown as given, while tokens, segments and selector labels are escaped here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.errors import WorkbenchError

from workbench.plots.colors import selector_style, series_color
from workbench.plots.text import escape, token_text

MAX_CHARS = 8  # a token cell shows at most this many characters (the last an ellipsis); hover shows all
_CHAR_PX, _CELL_PX, _WIDTH_PX = 6.5, 8, 1000  # font-10 character, cell padding, a typical figure width
CHOSEN = "#ff9f00"  # the outline of the token chosen in the strip, in every figure that shows it
EVIDENCE = "#1a9850"  # gold evidence rows (RULER's needles, HotpotQA's supporting sentences), in every figure
MAX_TICKS = 60  # token tick labels on an axis at most (every k-th token beyond that)


def log10_clipped(values: np.ndarray) -> np.ndarray:
    """log10 of the values; zeros and negatives take the smallest positive value (NaN if none)."""
    values = np.asarray(values, dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size == 0:
        return np.full_like(values, np.nan)
    return np.log10(np.where(np.isfinite(values), np.maximum(values, positive.min()), np.nan))


def evidence_of(tokens: pd.DataFrame) -> set[int]:
    """The positions the tokens table marks as gold evidence (empty without an `evidence` column)."""
    if "evidence" not in tokens or not tokens["evidence"].any():
        return set()
    return set(tokens.loc[tokens["evidence"].astype(bool), "position"].astype(int))


def evidence_spans(columns: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive column indices as (first, last)."""
    spans: list[tuple[int, int]] = []
    for c in sorted(columns):
        if spans and c == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], c)
        else:
            spans.append((c, c))
    return spans


def cells_per_line(tokens: pd.Series, max_chars: int = MAX_CHARS) -> int:
    """How many token cells fit a line of a ~1000 px figure without overprinting (12 to 32)."""
    longest = max((min(len(str(t)), max_chars) for t in tokens), default=1)
    return int(np.clip(_WIDTH_PX // (_CHAR_PX * longest + _CELL_PX), 12, 32))


def token_strip(tokens: pd.DataFrame, values: pd.Series | None = None, *, title: str = "",
                picks: list[int] | None = None, per_line: int | None = None, reused_only: bool = False,
                log: bool = False, value_label: str = "", segments: list[str] | None = None,
                highlight: int | None = None, details: pd.Series | None = None) -> go.Figure:
    """The context as wrapped lines of token cells, coloured by `values` (indexed by position).

    Segment boundaries start a new line; `picks` (positions) are outlined as "recomputed".
    Cells show at most MAX_CHARS characters; hover shows the whole token, its position,
    segment and value. `log` colours by log10 of the values. tokens: a Diagnosis `tokens` table.
    The legend sits above the strip, under the title, and the colour bar beside it, so neither
    meets the other nor the tool bar. `segments` (names, e.g. "passage 2") shows only those: a
    long context (MuSiQue's 500-word passages) stays readable one passage at a time.
    `highlight` (a position) outlines the chosen token; `details` (html by position) is added to
    each token's hover (every signal's value there, who picked it). An invisible marker per cell
    ("tokens", customdata [position]) carries the hover and makes a cell clickable. Gold evidence
    rows (the table's `evidence` column) are underlined (the trace "gold evidence").
    """
    rows = tokens[tokens["reused"]] if reused_only else tokens
    if segments is not None:
        unknown = sorted(set(segments) - set(rows["segment"].astype(str)))
        if unknown:
            raise WorkbenchError(f"no segments {unknown} in this context; it has {list(dict.fromkeys(rows['segment']))}")
        rows = rows[rows["segment"].astype(str).isin(set(segments))]
    per_line = per_line or cells_per_line(rows["token"])
    cells, y = [], 0
    for _, seg in rows.groupby("segment", sort=False):
        for start in range(0, len(seg), per_line):
            for x, (_, tok) in enumerate(seg.iloc[start:start + per_line].iterrows()):
                cells.append((x, y, int(tok["position"]), tok["token"], str(tok["segment"])))
            y += 1
    frame = pd.DataFrame(cells, columns=["x", "y", "position", "token", "segment"])
    evidence = evidence_of(tokens)
    raw = frame["position"].map(values).to_numpy(dtype=float) if values is not None else np.full(len(frame), np.nan)
    shown = log10_clipped(raw) if log else raw
    grid = np.full((y, per_line), np.nan)
    text = np.full((y, per_line), "", dtype=object)
    hover = np.full((y, per_line), "", dtype=object)
    for row, value, color in zip(frame.itertuples(), raw, shown):
        grid[row.y, row.x] = color
        text[row.y, row.x] = token_text(row.token, MAX_CHARS)
        hover[row.y, row.x] = (f"pos {row.position} · {escape(row.segment)}<br>{token_text(row.token)}"
                               + ("" if np.isnan(value) else f"<br>value {value:.4g}")
                               + ("<br>gold evidence" if row.position in evidence else "")
                               + (f"<br>{details[row.position]}" if details is not None and row.position in details
                                  else ""))
    colorbar = {"title": {"text": value_label + (" (log10)" if log else ""), "side": "right"},
                "x": 1.01, "xanchor": "left", "y": 0.5, "yanchor": "middle", "len": 1.0, "lenmode": "fraction",
                "thickness": 14}
    fig = go.Figure(go.Heatmap(z=grid, text=text, texttemplate="%{text}", textfont={"size": 10}, hoverinfo="skip",
                               colorscale="Viridis", showscale=values is not None, colorbar=colorbar,
                               xgap=1, ygap=2))
    fig.add_trace(go.Scatter(x=frame["x"], y=frame["y"], mode="markers", name="tokens", showlegend=False,
                             customdata=[[int(p)] for p in frame["position"]],
                             text=[hover[r.y, r.x] for r in frame.itertuples()],
                             hovertemplate="%{text}<extra></extra>",
                             marker={"size": 18, "symbol": "square", "opacity": 0}))
    marked = frame[frame["position"].isin(evidence)]
    if not marked.empty:  # an underline along the bottom of each evidence cell
        fig.add_trace(go.Scatter(x=marked["x"], y=marked["y"] + 0.36, mode="markers", name="gold evidence",
                                 hoverinfo="skip", marker={"symbol": "line-ew", "size": 22,
                                                           "line": {"color": EVIDENCE, "width": 4}}))
    chosen = frame[frame["position"].isin(set(picks or ()))]
    shapes = []  # set once: plotly's add_shape copies every shape so far (a long strip's picks took minutes)
    for i, cell in enumerate(chosen.itertuples()):  # a two-tone outline: seen on dark and on light cells
        box = {"type": "rect", "x0": cell.x - 0.5, "x1": cell.x + 0.5, "y0": cell.y - 0.5, "y1": cell.y + 0.5,
               "legendgroup": "recomputed"}
        shapes += [{**box, "line": {"color": "white", "width": 5}, "name": "recomputed (halo)", "showlegend": False},
                   {**box, "line": {"color": "crimson", "width": 2}, "name": "recomputed", "showlegend": i == 0}]
    shapes += [{"type": "rect", "x0": cell.x - 0.5, "x1": cell.x + 0.5, "y0": cell.y - 0.5, "y1": cell.y + 0.5,
                "line": {"color": CHOSEN, "width": 4}, "name": "chosen token", "showlegend": True}
               for cell in frame[frame["position"] == highlight].itertuples()]
    fig.update_layout(shapes=shapes)
    starts = frame.groupby("segment", sort=False)["y"].min()
    fig.update_yaxes(autorange="reversed", tickvals=list(starts), ticktext=[escape(s) for s in starts.index],
                     showgrid=False, zeroline=False)
    fig.update_xaxes(visible=False, range=[-0.5, per_line - 0.5])
    fig.update_layout(title={"text": title, "x": 0, "xanchor": "left", "y": 1, "yanchor": "top", "pad": {"t": 8}},
                      height=max(240, 26 * y + 100), margin={"l": 90, "r": 20, "t": 60, "b": 10},
                      plot_bgcolor="white",
                      showlegend=not chosen.empty or not marked.empty or highlight in set(frame["position"]),
                      legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1, "yanchor": "bottom"})
    return fig


def segment_starts(segments: pd.Series) -> list[int]:
    """Indices (0-based, in order) where a new segment begins, the first left out."""
    values = segments.reset_index(drop=True)
    return values.index[values != values.shift()].tolist()[1:]


def token_axis(fig: go.Figure, tokens: pd.Series, highlight_column: int | None = None) -> None:
    """Name the x axis's columns by their tokens (every k-th beyond MAX_TICKS), and outline the
    column of the chosen token (`highlight_column`, an index into `tokens`) over the whole height."""
    step = max(1, -(-len(tokens) // MAX_TICKS))
    ticks = list(range(0, len(tokens), step))
    fig.update_xaxes(tickvals=ticks, ticktext=[token_text(tokens.iloc[i], MAX_CHARS) for i in ticks], tickangle=-90,
                     tickfont={"size": 9})
    if highlight_column is not None:
        fig.add_shape(type="rect", x0=highlight_column - 0.5, x1=highlight_column + 0.5, y0=0, y1=1, yref="y domain",
                      line={"color": CHOSEN, "width": 3}, name="chosen token")


def mark_evidence(fig: go.Figure, positions: list[int], evidence: set[int]) -> None:
    """Outline each run of evidence columns (columns named by `positions`) over the whole height,
    dotted, in EVIDENCE; one legend entry "gold evidence"."""
    columns = [i for i, p in enumerate(positions) if p in evidence]
    for i, (first, last) in enumerate(evidence_spans(columns)):
        fig.add_shape(type="rect", x0=first - 0.5, x1=last + 0.5, y0=0, y1=1, yref="y domain",
                      line={"color": EVIDENCE, "width": 2, "dash": "dot"}, name="gold evidence", showlegend=i == 0)
    if columns:  # the entry above the plot's right corner, off the colour bar that the right edge holds
        fig.update_layout(legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"})


def _column(positions: list[int], highlight: int | None) -> int | None:
    return positions.index(highlight) if highlight in positions else None


def picks_matrix(tokens: pd.DataFrame, picks: dict[str, list[int]], title: str = "",
                 highlight: int | None = None, recall: dict[str, float] | None = None) -> go.Figure:
    """Selectors x reused tokens: which rows each selector recomputes, and how many agree; the
    columns named by their tokens, the chosen token's (`highlight`, a position) outlined. Where the
    tokens table marks gold evidence, a first row "gold evidence" shows it; `recall` (selector ->
    its evidence recall, e.g. from `outcomes`) is written beside each selector's name."""
    reused = tokens[tokens["reused"]].reset_index(drop=True)
    positions = reused["position"].tolist()
    labels = list(picks)
    z = np.array([[p in set(picks[label]) for p in positions] for label in labels], dtype=float).reshape(
        len(labels), len(positions))  # [selector, reused token]
    agree = z.sum(0, keepdims=True)  # [1, reused token]
    hover = [f"pos {p} · {escape(s)} · {token_text(t)}" for p, s, t in
             zip(positions, reused["segment"], reused["token"])]
    evidence = evidence_of(tokens)
    names = [escape(label) + _recall_text((recall or {}).get(label)) for label in labels] + ["agreement"]
    fig = go.Figure()
    # Rows on a numeric axis named by ticks: two heatmaps on one category axis make plotly.js fail
    # while drawing (the figure stays blank), which is what the evidence row did before.
    first = 0
    if evidence & set(positions):
        names = ["gold evidence", *names]
        fig.add_trace(go.Heatmap(z=[[float(p in evidence) for p in positions]], y=[0],
                                 x=list(range(len(positions))), customdata=[hover], name="gold evidence",
                                 hovertemplate="gold evidence<br>%{customdata}<extra></extra>",
                                 colorscale=[[0, "#f4f4f4"], [1, EVIDENCE]], zmin=0, zmax=1, showscale=False,
                                 ygap=2))
        first = 1
    rows = list(range(first, len(names)))
    fig.add_trace(go.Heatmap(z=np.vstack([z, agree / max(1, len(labels))]), y=rows,
                             x=list(range(len(positions))), customdata=[[name] * len(positions) for name in names[first:]],
                             text=[hover] * (len(labels) + 1),
                             hovertemplate="%{customdata}<br>%{text}<br>%{z:.2f}<extra></extra>",
                             colorscale=[[0, "#f4f4f4"], [1, "#b2182b"]], showscale=False, ygap=2))
    for b in segment_starts(reused["segment"]):
        fig.add_vline(x=b - 0.5, line={"color": "#333", "width": 1})
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(len(names))), ticktext=names,
                     showgrid=False, zeroline=False)
    fig.update_xaxes(title="reused token (context order; lines mark passage boundaries)")
    token_axis(fig, reused["token"], _column(positions, highlight))
    fig.update_layout(title=title, height=150 + 28 * len(names),  # selectors, agreement, the evidence row
                      margin={"l": 110, "r": 20, "t": 40, "b": 100})
    return fig


def _recall_text(value: float | None) -> str:
    """" · evidence recall 0.40" (nothing when unknown)."""
    return "" if value is None or not np.isfinite(value) else f" · evidence recall {value:.2f}"


def layer_heatmap(table: pd.DataFrame, tokens: pd.DataFrame, title: str = "", log: bool = False,
                  value_label: str = "", layer_names: dict[int, str] | None = None,
                  highlight: int | None = None) -> go.Figure:
    """Layer x token heatmap of one per-layer signal. table: layer, position, value rows;
    `layer_names` labels the layer axis (e.g. local and global layers); columns are named by their
    tokens and the chosen token's (`highlight`, a position) is outlined, gold evidence columns dotted."""
    wide = table.pivot_table(index="layer", columns="position", values="value", aggfunc="mean")
    z = wide.to_numpy()  # [layer, reused token]
    if log:
        z = log10_clipped(z)
    text = tokens.set_index("position").reindex(wide.columns)["token"].map(token_text)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(wide.columns))), y=list(wide.index),
                               customdata=np.tile(np.array([f"pos {p} · {t}" for p, t in zip(wide.columns, text)],
                                                           dtype=object), (len(wide.index), 1)),
                               hovertemplate="layer %{y}<br>%{customdata}<br>%{z:.4g}<extra></extra>",
                               colorscale="Magma",
                               colorbar={"title": {"text": value_label + (" (log10)" if log else ""),
                                                   "side": "right"}}))
    for b in segment_starts(tokens.set_index("position").reindex(wide.columns)["segment"]):
        fig.add_vline(x=b - 0.5, line={"color": "#4dd0e1", "width": 1.5})
    fig.update_xaxes(title="reused token (context order; lines mark passage boundaries)")
    token_axis(fig, tokens.set_index("position").reindex(wide.columns)["token"].reset_index(drop=True),
               _column([int(p) for p in wide.columns], highlight))
    mark_evidence(fig, [int(p) for p in wide.columns], evidence_of(tokens))
    if layer_names:
        layers = list(wide.index)
        fig.update_yaxes(title="layer", tickvals=layers, ticktext=[layer_names.get(l, str(l)) for l in layers])
    else:
        fig.update_yaxes(title="layer", dtick=max(1, len(wide.index) // 12))
    fig.update_layout(title=title, height=480, margin={"l": 60, "r": 20, "t": 40, "b": 100})
    return fig


def residual_by_layer(residual: pd.DataFrame, budget: float, kind: str = "v", selectors=None,
                      title: str = "") -> go.Figure:
    """Deviation left per layer after each selector's repair at a budget (relative L2 vs dense),
    one line per selector in its colour (`plots.colors`)."""
    rows = residual[((residual["budget"] - budget).abs() < 1e-9) & (residual["kind"] == kind)]
    fig = go.Figure()
    for label, line in rows.groupby("selector", sort=False):
        if selectors is not None and label not in selectors:
            continue
        line = line.groupby("layer", as_index=False)["value"].mean()  # a drawn control: the mean over draws
        fig.add_trace(go.Scatter(x=line["layer"], y=line["value"], mode="lines+markers", name=escape(label),
                                 **selector_style(label)))
    what = "values" if kind == "v" else "keys (post-RoPE)"
    fig.update_xaxes(title="layer", dtick=max(1, int(rows["layer"].nunique()) // 12) if len(rows) else 1)
    fig.update_yaxes(title=f"relative L2 of {what} vs dense")
    fig.update_layout(title=title or f"deviation of the {what} left after repair, b = {budget:g}", height=380)
    return fig


def deviation_by_layer_type(table: pd.DataFrame, windows: list, title: str = "", value_label: str = "") -> go.Figure:
    """Mean deviation over reused tokens per layer, local (sliding-window) layers and global ones
    as two marker traces on one grey line. table: layer, position, value rows; windows: [layer]."""
    mean = table.groupby("layer")["value"].mean()  # [layer]
    fig = go.Figure(go.Scatter(x=list(mean.index), y=mean.to_numpy(), mode="lines", showlegend=False,
                               line={"color": "#bbbbbb"}, hoverinfo="skip"))
    kinds = {"local": [l for l in mean.index if windows[l] is not None],
             "global": [l for l in mean.index if windows[l] is None]}
    sizes = sorted({w for w in windows if w is not None})
    names = {"local": f"local layers (window {', '.join(map(str, sizes))})", "global": "global layers"}
    for kind, symbol in (("local", "circle"), ("global", "diamond")):
        layers = kinds[kind]
        if layers:
            fig.add_trace(go.Scatter(x=layers, y=mean[layers].to_numpy(), mode="markers", name=names[kind],
                                     marker={"symbol": symbol, "size": 10 if kind == "global" else 8,
                                             "color": series_color(f"{kind} layers")},
                                     hovertemplate="layer %{x}<br>%{y:.4g}<extra>" + kind + "</extra>"))
    fig.update_xaxes(title="layer", dtick=max(1, len(mean) // 12),
                     range=[float(min(mean.index)) - 0.5, float(max(mean.index)) + 0.5])
    fig.update_yaxes(title=f"mean {value_label} over reused tokens")
    fig.update_layout(title=title, height=360, legend={"orientation": "h", "y": -0.25})
    return fig


def layer_profile(lines: dict[str, list[float]], title: str = "", ytitle: str = "") -> go.Figure:
    """One line per named per-layer sequence (e.g. the splice's relative K and V error)."""
    fig = go.Figure()
    for name, values in lines.items():
        values = [float(v) for v in values]
        fig.add_trace(go.Scatter(x=list(range(len(values))), y=values, mode="lines+markers", name=escape(name)))
    fig.update_xaxes(title="layer", dtick=max(1, max((len(v) for v in lines.values()), default=1) // 12))
    fig.update_yaxes(title=ytitle)
    fig.update_layout(title=title, height=360)
    return fig
