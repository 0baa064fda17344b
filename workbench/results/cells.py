"""A table cell as text and numbers, and the comparison of a printed cell with a regenerated one.

A cell is split into text and numbers (`tokens`). A printed number sets the precision it is read
at: `0.43` matches a regenerated 0.4312 (two decimals), `1.2e-14` is compared in scientific
notation at two significant digits, `1 / 53` compares both integers; `+`, `-` and `−` (U+2212)
are signs, and -0 equals 0. Text is compared after whitespace is normalised. A regenerated cell
built with `fmt` carries its numbers at full precision, so a printed value is never compared
with an already rounded one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# A number standing on its own: not inside a word (A1, gemma3) and not a version's middle (5.24.0 is
# text); a sign only where it is not a hyphen inside a word.
NUMBER = re.compile(r"(?<![\w.])[+\-−]?(?:\d+\.\d+|\d+)(?:[eE][+\-−]?\d+)?(?![\w])(?!\.\d)")
MINUS = "−"


@dataclass(frozen=True)
class Num:
    """A number as printed and its value (a regenerated one: at full precision)."""

    text: str
    value: float


class Cell(str):
    """A formatted cell (a `str`) that keeps its numbers at full precision (`fmt`), in order."""

    values: tuple[Num, ...] = ()


def fmt(template: str, *values, minus: bool = True) -> Cell:
    """`template.format(*values)` as a `Cell` that keeps `values` at full precision (None or NaN:
    printed as `–`). A leading `-` of a number becomes `−` unless `minus` is False."""
    parts, kept = [], []
    pieces = re.split(r"(\{[^{}]*\})", template)
    values = iter(values)
    for piece in pieces:
        if not (piece.startswith("{") and piece.endswith("}")):
            parts.append(piece)
            kept.extend(t for t in tokens(piece) if isinstance(t, Num))
            continue
        v = next(values)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            parts.append("–")
            continue
        text = piece.format(v)
        if minus and text.startswith("-"):
            text = MINUS + text[1:]
        parts.append(text)
        kept.append(Num(text, float(v)))
    cell = Cell("".join(parts))
    cell.values = tuple(kept)
    return cell


def p_text(p: float) -> str:
    """A p value as RESULTS prints it: three significant digits from 0.001, else two in scientific
    notation without the exponent's padding (8.1e-28)."""
    if p >= 0.001:
        return f"{p:.3g}"
    mantissa, exponent = f"{p:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


class PValue(float):
    """A p value that formats itself as `p_text` prints it (`fmt("{}", PValue(p))`)."""

    def __format__(self, spec: str) -> str:
        return p_text(float(self))


def tokens(text: str) -> list[str | Num]:
    """`text` as text pieces (whitespace-normalised, empty ones dropped) and numbers."""
    out: list[str | Num] = []
    pos = 0
    for m in NUMBER.finditer(text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        out.append(Num(m.group(), float(m.group().replace(MINUS, "-"))))
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return [t if isinstance(t, Num) else " ".join(t.split()) for t in out
            if isinstance(t, Num) or " ".join(t.split())]


def regenerated_tokens(cell) -> list[str | Num]:
    """The tokens of a regenerated cell; a `Cell`'s numbers carry the values it was formatted from."""
    found = tokens(str(cell))
    kept = iter(getattr(cell, "values", ()))
    return [next(kept, t) if isinstance(t, Num) else t for t in found]


def same_number(printed: str, value: float) -> bool:
    """`value` read at the precision of `printed` equals it (scientific: as many significant digits;
    else as many decimals; -0 equals 0)."""
    text = printed.replace(MINUS, "-").lstrip("+")
    target = float(text)
    if not math.isfinite(value):
        return False
    if "e" in text.lower():
        mantissa = text.lower().split("e")[0].lstrip("-")
        digits = len(mantissa.replace(".", "")) - 1
        return float(f"{value:.{digits}e}") == target
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(f"{value:.{decimals}f}") == target


def cell_difference(printed: str, regenerated) -> str | None:
    """None when the printed cell says what the regenerated one holds, else why not (one phrase)."""
    a, b = tokens(printed), regenerated_tokens(regenerated)
    if len(a) != len(b) or any(isinstance(x, Num) != isinstance(y, Num) for x, y in zip(a, b)):
        return "text differs"
    for x, y in zip(a, b):
        if isinstance(x, Num):
            if not same_number(x.text, y.value):
                return f"{x.text} is not {y.text}"
        elif x != y:
            return "text differs"
    return None
