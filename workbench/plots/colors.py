"""One colour and one marker per selector, the same in every figure (app, reports, notebooks).

The built-in selectors (`registered_specs()` at import, in registration order) get fixed
colours; the references are grey (`none`) and black (`full`). Any other label, e.g. a
selector registered later or a spec in a unit other than its default (`random:chunk`), gets
a colour and marker derived from a hash of the label: stable across runs and processes.

    color = selector_color("cadence-grad")          # the same hex colour everywhere
    fig.add_trace(go.Scatter(..., **selector_style("cadence-grad")))
"""

from __future__ import annotations

import colorsys
import hashlib

from workbench.selectors.registry import reference_selectors, registered_specs

REFERENCE_COLORS = {"none": "#7f7f7f", "full": "#222222"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#ad494a", "#637939", "#843c39", "#5254a3")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "triangle-down", "cross", "pentagon",
           "star", "hexagon", "triangle-left", "triangle-right", "hourglass", "bowtie")
_BUILTIN = tuple(label for label in registered_specs() if label not in reference_selectors())


def _digest(label: str) -> int:
    return int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:8], "big")


def selector_color(label: str) -> str:
    """The hex colour of a selector label."""
    label = str(label)
    if label in REFERENCE_COLORS:
        return REFERENCE_COLORS[label]
    if label in _BUILTIN:
        return PALETTE[_BUILTIN.index(label) % len(PALETTE)]
    digest = _digest(label)
    hue = (digest % 360) / 360.0
    lightness = 0.38 + ((digest >> 9) % 15) / 100.0  # 0.38 .. 0.52: readable on white
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.65)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


def selector_symbol(label: str) -> str:
    """The marker symbol of a selector label (so coinciding curves stay tellable apart)."""
    label = str(label)
    if label in _BUILTIN:
        return SYMBOLS[_BUILTIN.index(label) % len(SYMBOLS)]
    return SYMBOLS[_digest(label) % len(SYMBOLS)]


def selector_style(label: str) -> dict:
    """Scatter keywords (line and marker) for a selector's trace; references are dashed."""
    color = selector_color(label)
    dash = {"dash": "dash"} if str(label) in reference_selectors() else {}
    return {"line": {"color": color, **dash}, "marker": {"color": color, "symbol": selector_symbol(label), "size": 8}}


def dodge(labels, spread: float) -> dict[str, float]:
    """An x offset per label, evenly spaced over `spread` and centred on 0, in the order given:
    points of different selectors at the same x no longer hide each other."""
    labels = list(dict.fromkeys(labels))
    if len(labels) < 2:
        return {label: 0.0 for label in labels}
    step = spread / (len(labels) - 1)
    return {label: (i - (len(labels) - 1) / 2) * step for i, label in enumerate(labels)}
