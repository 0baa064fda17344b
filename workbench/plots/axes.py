"""`axis_problems(fig)`: does every axis show its data? `annotation_problems(fig)`: does any text
sit on the plotting area, where it can land on data? `figure_problems` is both. Checks for tests
of figures (the browser test measures the drawn boxes too).

An axis with an explicit `range` shows exactly that range; a log axis without one shows what
plotly's autorange makes of the traces and of the annotations and shapes on it, whose
positions plotly reads as log10 (an annotation at x = 256 stretches the axis to 10^256 and
squeezes the data into its left edge). For each such axis, the trace data and the positions
of annotations and shapes on it must lie inside the range it will show; log axes are
compared in log10. Anything else is a problem, in words.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import plotly.graph_objects as go

PAD = 0.5  # decades an annotation may stand beyond a log axis's data (labels next to points)


def _decoded(values):
    """Plotly's typed-array form ({"dtype", "bdata", "shape"} in a figure's JSON) as an array."""
    if isinstance(values, dict) and "bdata" in values:
        array = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]).newbyteorder("<"))
        shape = values.get("shape")
        return array.reshape([int(n) for n in str(shape).split(",")]) if shape else array
    return values


def _numbers(values) -> list[float]:
    """The finite numbers among `values` (categories, dates and missing values dropped)."""
    values = _decoded(values)
    if values is None:
        return []
    out = []
    for v in np.asarray(values, dtype=object).ravel():
        if v is None or isinstance(v, (bool, np.bool_, str)):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def _trace_values(trace, letter: str) -> list[float]:
    """The trace's coordinates along `letter` ("x" or "y"); a heatmap without them uses indices."""
    values = trace[letter] if letter in trace else None  # noqa: SIM401 - plotly objects have no .get
    if values is None and trace.type == "heatmap" and trace.z is not None:
        z = np.asarray(_decoded(trace.z), dtype=object)
        if z.ndim == 2:
            values = range(z.shape[1] if letter == "x" else z.shape[0])
    return _numbers(values)


def _on(obj, letter: str, ref: str, attr: str) -> bool:
    """Whether a trace (attr "xaxis") or annotation/shape (attr "xref") is drawn against axis `ref`."""
    return attr in obj and (obj[attr] or letter) == ref


def _inside(value: float, low: float | None, high: float | None) -> bool:
    tol = 1e-9 * max(abs(high - low) if low is not None and high is not None else 1.0, 1.0)
    return (low is None or value >= low - tol) and (high is None or value <= high + tol)


def _g(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def _check(fig: go.Figure, name: str) -> list[str]:
    axis, letter = fig.layout[name], name[0]
    ref = letter + name[5:]  # xaxis -> x, yaxis2 -> y2
    log = axis.type == "log"
    data = [v for t in fig.data if _on(t, letter, ref, f"{letter}axis") for v in _trace_values(t, letter)]
    marks = [(float(a[letter]), f"annotation {a.text!r}") for a in fig.layout.annotations
             if _on(a, letter, ref, f"{letter}ref") and _numbers([a[letter]])]
    marks += [(v, "a shape") for s in fig.layout.shapes if _on(s, letter, ref, f"{letter}ref")
              for v in sorted(set(_numbers([s[f"{letter}0"], s[f"{letter}1"]])))]
    problems = []
    if log:
        if any(v <= 0 for v in data):
            problems.append(f"{name} is a log axis but {sum(v <= 0 for v in data)} data values are <= 0 "
                            f"(they are not drawn)")
        data = [math.log10(v) for v in data if v > 0]
    if axis.range is not None:
        low, high = (None if r is None else float(r) for r in axis.range)
        if low is not None and high is not None and low > high:  # a reversed axis
            low, high = high, low
        shown = f"[{_g(low)}, {_g(high)}]" + (" (log10)" if log else "")
        outside = [v for v in data if not _inside(v, low, high)]
        if outside:
            problems.append(f"{name} shows {shown} but {len(outside)} of {len(data)} data values lie outside it "
                            f"({_g(min(outside))} to {_g(max(outside))}{' in log10' if log else ''})")
        problems += [f"{what} at {letter} = {_g(v)} lies outside {name}'s range {shown}"
                     for v, what in marks if not _inside(v, low, high)]
    elif log and data:  # autorange: plotly stretches the axis to every annotation and shape
        low, high = min(data) - PAD, max(data) + PAD
        problems += [f"{what} at {letter} = {_g(v)} on log axis {name} is read as 10^{_g(v)}: the axis "
                     f"stretches to it while the data span 10^{_g(min(data))} to 10^{_g(max(data))}"
                     for v, what in marks if not _inside(v, low, high)]
    return problems


def axis_problems(fig) -> list[str]:
    """Problems, in words, of every x/y axis with an explicit range or a log type; empty when
    every such axis shows all its data. `fig`: a plotly Figure or its dict form."""
    fig = fig if isinstance(fig, go.Figure) else go.Figure(fig, skip_invalid=True)
    names = sorted(k for k in fig.layout.to_plotly_json() if k.startswith(("xaxis", "yaxis")))
    return [p for name in names if fig.layout[name].range is not None or fig.layout[name].type == "log"
            for p in _check(fig, name)]


def _on_plot_area(ref: str, value) -> bool:
    """Whether an annotation coordinate against `ref` ("x", "x2 domain", "paper") lies on a plot area."""
    if ref.endswith("domain") or ref == "paper":
        numbers = _numbers([value])
        return bool(numbers) and 0.0 <= numbers[0] <= 1.0
    return True  # data coordinates: always on the plotting area


def annotation_problems(fig) -> list[str]:
    """Text annotations placed on a plotting area (data coordinates, or inside an axis's domain):
    there they land on data points, lines or tick labels as the data change. Labels belong in the
    legend, the title, tick text or the margins (paper coordinates). Arrows without text pass."""
    fig = fig if isinstance(fig, go.Figure) else go.Figure(fig, skip_invalid=True)
    out = []
    for a in fig.layout.annotations:
        text = str(a.text or "").strip()
        if not text:
            continue
        xref, yref = str(a.xref or "x"), str(a.yref or "y")
        if _on_plot_area(xref, a.x) and _on_plot_area(yref, a.y):
            out.append(f"annotation {text!r} sits on the plotting area ({xref} = {a.x}, {yref} = {a.y}): "
                       f"put it in the legend, the title or the margin")
    return out


def figure_problems(fig) -> list[str]:
    """`axis_problems` and `annotation_problems` together."""
    return axis_problems(fig) + annotation_problems(fig)
