"""Tables as a reader wants them: readable headers, numbers formatted by what they are, and a
blank where a value is missing (never "None" or NaN). A column without missing values stays a
number under its format (it sorts as one); Streamlit draws a missing cell as "None" whatever the
format says, so a column with missing values is shown as its formatted text."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st


def _missing(v) -> bool:
    return v is None or (pd.api.types.is_scalar(v) and not isinstance(v, str) and bool(pd.isna(v)))


def p_value(v) -> str:
    return "" if _missing(v) else v if isinstance(v, str) else f"{v:.2g}"


def rate(v) -> str:
    return "" if _missing(v) else v if isinstance(v, str) else f"{v:.3f}"


def signed(v) -> str:
    return "" if _missing(v) else v if isinstance(v, str) else f"{v:+.3f}"


def count(v) -> str:
    return "" if _missing(v) else v if isinstance(v, str) else f"{int(round(float(v)))}"


def general(v) -> str:
    """Six significant digits: cosines near 1 keep what tells them apart."""
    return "" if _missing(v) else v if isinstance(v, str) else f"{v:.6g}"


def compact(v) -> str:
    """A budget, a row count: as short as it reads (0.05, 81, 12.5)."""
    if _missing(v):
        return ""
    return f"{v:g}" if isinstance(v, (int, float)) and math.isfinite(v) else str(v)


ROW_PX, MOST_ROWS = 35, 20  # a table shows up to MOST_ROWS rows before it scrolls
WRAPPED_PX = 70  # a row this tall wraps its text (Streamlit wraps from 64 px), two to three lines


def show_table(table: pd.DataFrame, headers: dict, formats: dict | None = None, key: str | None = None,
               pinned: tuple = (), widths: dict | None = None, wrap: bool = False) -> None:
    """`table`'s columns named by `headers` (its order; columns it lacks are left out), each
    formatted by `formats` (a column -> function of one value; floats default to 3 decimals), and
    every missing value blank; `pinned` columns stay in view while the table scrolls sideways;
    `widths` (a column -> "small" / "medium" / "large" / pixels) widens a column of long text and
    `wrap` makes rows tall enough to wrap it; up to MOST_ROWS rows before it scrolls."""
    columns = [c for c in headers if c in table.columns]
    shown = table[columns].reset_index(drop=True)
    formats, widths = formats or {}, widths or {}
    chosen = {c: formats.get(c, rate if pd.api.types.is_float_dtype(shown[c]) else compact) for c in columns}
    as_text = [c for c in columns if shown[c].isna().any()]
    for c in as_text:
        shown[c] = shown[c].map(chosen[c]).astype(object)
    styler = shown.style.format({c: f for c, f in chosen.items() if c not in as_text}, na_rep="")
    config = {c: st.column_config.Column(headers[c], pinned=c in pinned, width=widths.get(c)) for c in columns}
    row = WRAPPED_PX if wrap else ROW_PX
    st.dataframe(styler, hide_index=True, width="stretch", column_config=config, key=key,
                 row_height=row if wrap else None, height=ROW_PX + row * min(len(shown), MOST_ROWS) + 3)
