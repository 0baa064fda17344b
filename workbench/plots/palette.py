"""Colours far apart to the eye: CIEDE2000 (Sharma, Wu and Dalal 2005) and a palette of any
length whose colours keep a stated distance from each other, the references and the page.

    delta_e2000(hex_to_lab("#8c564b"), hex_to_lab("#843c39"))   # 7.9: too close for two selectors
    distinct_palette(14)                                         # 14 colours, each pair >= MIN_DELTA_E

The palette is built once: Tableau's familiar colours first, then five hues of names they lack
(`SEEDS`), then greedily, from a grid of sRGB colours readable on white (CIELAB L 38-68, chroma
>= 30), each next colour the one farthest (CIEDE2000) from the page, the reference greys and every
colour picked so far. Nothing darker than L 38: a darker colour's hue does not show on a thin line
(the old greedy olive, maroon and navy read as one more dark line beside green, red and blue). It is
deterministic, so a selector's colour is the same in every figure and process.
"""

from __future__ import annotations

import math
from functools import lru_cache

MIN_DELTA_E = 15.0  # every pair of the first PALETTE_SIZE colours (and each against AVOID) at least this far
PALETTE_SIZE = 20
# Tableau's ten less its grey (16.2 apart at the closest), then salmon, royal blue, lavender, crimson
# and teal: of the named hues at L >= 38 the five farthest from Tableau's and each other (20.2), in
# the order that keeps a 16-selector study's (RESULTS 10.4: oracle-patch's blue not among them) apart
SEEDS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
         "#ff8a80", "#0f3cff", "#96a5ff", "#b40069", "#00796b")
LIGHTNESS = (38.0, 68.0)  # CIELAB L of the greedy's candidates: dark enough for white, light enough for a hue
AVOID = ("#ffffff", "#7f7f7f", "#222222")  # the page, and the references `none` and `full`
_GRID = 18  # steps per sRGB channel of the candidate grid


def hex_to_rgb(color: str) -> tuple[float, float, float]:
    """`#rrggbb` -> (r, g, b) in [0, 1]."""
    text = str(color).lstrip("#")
    if len(text) != 6:
        raise ValueError(f"a colour is written #rrggbb, got {color!r}")
    return tuple(int(text[i:i + 2], 16) / 255.0 for i in (0, 2, 4))


def rgb_to_hex(rgb) -> str:
    return "#" + "".join(f"{round(min(max(c, 0.0), 1.0) * 255):02x}" for c in rgb)


def rgb_to_lab(rgb) -> tuple[float, float, float]:
    """sRGB in [0, 1] -> CIELAB (D65 white)."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    r, g, b = linear
    xyz = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b, 0.2126729 * r + 0.7151522 * g + 0.0721750 * b,
           0.0193339 * r + 0.1191920 * g + 0.9503041 * b)
    white = (0.95047, 1.0, 1.08883)

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = (f(v / w) for v, w in zip(xyz, white))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def hex_to_lab(color: str) -> tuple[float, float, float]:
    return rgb_to_lab(hex_to_rgb(color))


def delta_e2000(lab1, lab2) -> float:
    """The CIEDE2000 colour difference of two CIELAB colours (kL = kC = kH = 1), as Sharma et al.
    (2005) write it out, their hue conventions for achromatic colours included."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25.0 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dlp, dcp = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dhp = 0.0
    else:
        dhp = h2p - h1p
        dhp = dhp - 360 if dhp > 180 else dhp + 360 if dhp < -180 else dhp
    dhp_big = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dhp / 2))
    lp, cp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hp = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hp = (h1p + h2p) / 2
    else:
        hp = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(hp - 30)) + 0.24 * math.cos(math.radians(2 * hp))
         + 0.32 * math.cos(math.radians(3 * hp + 6)) - 0.20 * math.cos(math.radians(4 * hp - 63)))
    d_theta = 30 * math.exp(-(((hp - 275) / 25) ** 2))
    rc = 2 * math.sqrt(cp ** 7 / (cp ** 7 + 25.0 ** 7))
    sl = 1 + 0.015 * (lp - 50) ** 2 / math.sqrt(20 + (lp - 50) ** 2)
    sc, sh = 1 + 0.045 * cp, 1 + 0.015 * cp * t
    rt = -math.sin(math.radians(2 * d_theta)) * rc
    return math.sqrt((dlp / sl) ** 2 + (dcp / sc) ** 2 + (dhp_big / sh) ** 2 + rt * (dcp / sc) * (dhp_big / sh))


def color_distance(color1: str, color2: str) -> float:
    """CIEDE2000 between two `#rrggbb` colours."""
    return delta_e2000(hex_to_lab(color1), hex_to_lab(color2))


@lru_cache(maxsize=1)
def _candidates() -> tuple[tuple[str, tuple[float, float, float]], ...]:
    """sRGB grid colours readable on white and unlike grey: (hex, lab)."""
    steps = [i / (_GRID - 1) for i in range(_GRID)]
    out = []
    for r in steps:
        for g in steps:
            for b in steps:
                lab = rgb_to_lab((r, g, b))
                if LIGHTNESS[0] <= lab[0] <= LIGHTNESS[1] and math.hypot(lab[1], lab[2]) >= 30:
                    out.append((rgb_to_hex((r, g, b)), lab))
    return tuple(out)


@lru_cache(maxsize=8)
def distinct_palette(n: int) -> tuple[str, ...]:
    """`n` colours, each the farthest (CIEDE2000) of the candidates from the page, the reference
    greys and the colours before it; the first `PALETTE_SIZE` keep `MIN_DELTA_E` apart."""
    if n < 0:
        raise ValueError(f"a palette has 0 colours or more, got {n}")
    candidates = _candidates()
    nearest = [min(delta_e2000(lab, hex_to_lab(c)) for c in AVOID) for _, lab in candidates]  # [candidate]
    chosen: list[str] = []
    while len(chosen) < n:
        if len(chosen) < len(SEEDS):
            pick, pick_lab = SEEDS[len(chosen)], hex_to_lab(SEEDS[len(chosen)])
        else:
            k = max(range(len(candidates)), key=lambda i: (nearest[i], -i))
            pick, pick_lab = candidates[k]
        chosen.append(pick)
        nearest = [min(d, delta_e2000(lab, pick_lab)) for d, (_, lab) in zip(nearest, candidates)]
    return tuple(chosen)


def closest_pair(colors) -> tuple[float, str, str]:
    """(distance, a, b) of the two colours of `colors` nearest each other (CIEDE2000)."""
    colors = list(colors)
    return min(((color_distance(a, b), a, b) for i, a in enumerate(colors) for b in colors[i + 1:]),
               default=(math.inf, "", ""))
