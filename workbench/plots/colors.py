"""Every series' colour, in one place, the same in every figure (app, reports, notebooks).

Three families, each with stable colours that never borrow another family's:

- **selectors**: every registered one (`registered_specs()`, in registration order, a plugin's
  included) gets the next colour of `palette.distinct_palette`, whose colours keep at least
  `palette.MIN_DELTA_E` (CIEDE2000) from each other, the page and the references; the references
  are grey (`none`) and black (`full`); a matched control (`coin:bcr`) takes its selector's
  colour, dotted, with open markers; any other label (`random:chunk`) gets a colour and marker
  from a hash of the label.
- **reuse methods** of `kvwb pipeline`: fixed colours (the KVComm family in blues by γ, the
  dense references in greys); `bcr` is BCR's selector colour and `bcr-coin` its coin style.
- **series** that are neither (the fidelity probe's conditions, the unit curve's informed and
  random arms map to selectors): `series_color`.

    fig.add_trace(go.Scatter(..., **selector_style("cadence-grad")))
    fig.add_trace(go.Scatter(..., **method_style("kvcomm-0.5")))
"""

from __future__ import annotations

import colorsys
import hashlib

from workbench.errors import WorkbenchError
from workbench.plots.palette import AVOID, PALETTE_SIZE, distinct_palette
from workbench.selectors.registry import get_selector, reference_selectors, registered_specs

REFERENCE_COLORS = {"none": AVOID[1], "full": AVOID[2]}
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "triangle-down", "cross", "pentagon",
           "star", "hexagon", "triangle-left", "triangle-right", "hourglass", "bowtie")


def registered_labels() -> tuple[str, ...]:
    """The registered selectors that are not references, in registration order (plugins' last):
    the order the palette's colours are handed out in."""
    return tuple(label for label in registered_specs() if label not in reference_selectors())


_BUILTIN = registered_labels()  # the built-in ones (plugins register later): reuse methods borrow them

# reuse methods: (colour, marker); none of these is a selector colour
METHODS = {
    "chat-template": ("#595959", "square"), "token-matched": ("#1a1a1a", "square-open"),
    "kvcomm": ("#08306b", "circle"), "kvcomm-0.5": ("#2b65a8", "circle"), "kvcomm-0.7": ("#5a9bd5", "circle"),
    "kvcomm-always": ("#9cc6e8", "circle"), "opengate": ("#00897b", "triangle-up"),
    "protect-root": ("#b8860b", "diamond"), "protect-leaf": ("#6a1b9a", "diamond"),
    "coin-alloc": ("#a1887f", "diamond-open"),
}
# series that are neither selectors nor methods (the fidelity probe's conditions and lines, layer types)
SERIES = {
    "noise": "#c62828", "genuine": "#3949ab", "kv": "#3949ab", "k": "#00838f", "v": "#9e9d24",
    "fact": "#ad1457", "wk_colspace": "#ef6c00", "bank_span": "#5e35b1", "sender": "#2e7d32",
    "masked_sender": "#757575", "distractors_only": "#6d4c41", "floor_noise": "#f06292", "lift": "#263238",
    "floor": "#9e9e9e", "reference": "#424242", "unrepaired": "#9e9e9e",
    "local layers": "#e64a19", "global layers": "#455a64",  # Gemma 3's sliding-window and global layers
    "splice": "#bdbdbd", "repaired": "#0277bd", "dense": "#212121",  # the per-layer recompute effects
}


def _digest(label: str) -> int:
    return int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:8], "big")


def _hashed_color(label: str) -> str:
    digest = _digest(label)
    hue = (digest % 360) / 360.0
    lightness = 0.38 + ((digest >> 9) % 15) / 100.0  # 0.38 .. 0.52: readable on white
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.65)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


def matched_to(label: str) -> str | None:
    """The selector a matched control copies (`coin:bcr` -> `bcr`), else None."""
    name, _, rest = str(label).partition(":")
    try:
        return rest if rest and get_selector(name).matched else None
    except WorkbenchError:
        return None


def selector_color(label: str) -> str:
    """The hex colour of a selector label (a matched coin: its selector's)."""
    label = str(label)
    base = matched_to(label)
    if base is not None:
        return selector_color(base)
    if label in REFERENCE_COLORS:
        return REFERENCE_COLORS[label]
    labels = registered_labels()
    if label in labels:
        return distinct_palette(max(PALETTE_SIZE, len(labels)))[labels.index(label)]
    return _hashed_color(label)


def selector_symbol(label: str) -> str:
    """The marker symbol of a selector label (so coinciding curves stay tellable apart); a matched
    coin: its selector's symbol, open."""
    label = str(label)
    base = matched_to(label)
    if base is not None:
        return selector_symbol(base).removesuffix("-open") + "-open"
    labels = registered_labels()
    if label in labels:
        return SYMBOLS[labels.index(label) % len(SYMBOLS)]
    return SYMBOLS[_digest(label) % len(SYMBOLS)]


def selector_style(label: str) -> dict:
    """Scatter keywords (line and marker) for a selector's trace; references dashed, a matched coin
    dotted with open markers, in its selector's colour."""
    color = selector_color(label)
    dash = ({"dash": "dash"} if str(label) in reference_selectors() else
            {"dash": "dot"} if matched_to(label) is not None else {})
    return {"line": {"color": color, **dash}, "marker": {"color": color, "symbol": selector_symbol(label), "size": 8}}


def method_style(name: str) -> dict:
    """Scatter keywords for a reuse method's trace: its fixed colour and marker; `bcr` and its coin
    as the selector BCR; any other method a hashed colour."""
    name = str(name)
    if name in METHODS:
        color, symbol = METHODS[name]
        return {"line": {"color": color}, "marker": {"color": color, "symbol": symbol, "size": 11}}
    base = name.removesuffix("-coin")
    if base in _BUILTIN:
        style = selector_style(f"coin:{base}" if base != name else base)
        return {**style, "marker": {**style["marker"], "size": 11}}
    return {"line": {"color": _hashed_color(name)},
            "marker": {"color": _hashed_color(name), "symbol": SYMBOLS[_digest(name) % len(SYMBOLS)], "size": 11}}


def method_color(name: str) -> str:
    return method_style(name)["marker"]["color"]


def series_color(name: str) -> str:
    """The colour of a series that is neither a selector nor a method (fidelity conditions)."""
    return SERIES.get(str(name)) or _hashed_color(f"series:{name}")
