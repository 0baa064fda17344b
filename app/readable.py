"""Tables as a reader wants them: readable headers, numbers formatted by what they are, and a
blank where a value is missing (never "None" or NaN). A column of numbers stays numbers, missing
values included (a click on its header sorts it as numbers: 9 before 10): its cells show the
format's text (a pandas Styler's display values) and a missing cell the table's empty placeholder."""

from __future__ import annotations

import math

import numpy as np
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
    """A whole number; an integer keeps every digit (a 19-digit seed)."""
    if _missing(v) or isinstance(v, str):
        return "" if _missing(v) else v
    return f"{int(v)}" if isinstance(v, (int, np.integer)) else f"{int(round(float(v)))}"


def general(v) -> str:
    """Six significant digits: cosines near 1 keep what tells them apart."""
    return "" if _missing(v) else v if isinstance(v, str) else f"{v:.6g}"


def compact(v) -> str:
    """A budget, a row count: as short as it reads (0.05, 81, 12.5)."""
    if _missing(v):
        return ""
    number = isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
    return f"{v:g}" if number and math.isfinite(v) else str(v)


def short(v) -> str:
    """A score in three significant digits and no trailing zeros (1, 0.5, 0.467): narrow, and
    nothing a 3-decimal rate shows is lost (0.000 is 0, 1.000 is 1)."""
    if _missing(v) or isinstance(v, str):
        return "" if _missing(v) else v
    return "0" if v == 0 else f"{v:.3g}" if abs(v) >= 0.001 else f"{v:.2e}"


def against_itself_blank(summary: pd.DataFrame, reference: str | None) -> pd.DataFrame:
    """A summary whose reference's own rows leave its tests against the reference blank (b / c 0 / 0
    against itself says nothing)."""
    columns = [c for c in ("ref_b", "ref_c", "ref_p", "ref_p_holm") if c in summary]
    if reference is None or not columns:
        return summary
    mask = summary["selector"] == reference
    return summary.assign(**{c: summary[c].astype(object).where(~mask, None) for c in columns})


def fitting(column: pd.Series):
    """A format for a column of a table shown whole (every column of a run's file), by its name
    and values: a p-value's two significant digits, a budget as it reads, whole numbers as
    counts, floats in 3 decimals unless a value needs more (a cosine gap of 1e-7, a sum of
    10**5): then 4 significant digits; anything else as it reads."""
    name, present = str(column.name), column.dropna()
    if name == "p" or name.endswith(("_p", "p_holm", "p_value")) or name.startswith("p_"):
        return p_value
    if name == "budget" or column.dtype.kind == "b" or present.empty:
        return compact
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in present):
        return count
    values = pd.to_numeric(present, errors="coerce")
    if column.dtype.kind not in "fiuO" or values.isna().any():
        return compact
    if bool((values == values.round()).all() and values.abs().max() >= 2):
        return count
    tiny = ((values != 0) & (values.abs() < 0.001)).any() or (values.abs() >= 1e4).any()
    return (lambda v: "" if _missing(v) else f"{v:.4g}") if tiny else rate


def fitted(table: pd.DataFrame) -> dict:
    """`fitting`'s format for every column of `table`."""
    return {c: fitting(table[c]) for c in table.columns}


WORDS = {"em": "EM", "f1": "F1", "kl": "KL", "l2": "L2", "sd": "SD", "acc": "accuracy", "holm": "Holm", "cos": "cosine",
         "logprob": "log-prob", "rel": "relative", "num": "number", "pred": "predicted", "resid": "residual"}
NAMES = {"n_recomputed": "rows recomputed", "f1_to_dense": "F1 to dense", "first_token_agree": "1st token = dense's",
         "first_kl": "KL 1st token", "agree_prefix": "leading tokens = dense's", "dense_logprob": "dense log-prob",
         "dense_logprob_mean": "dense log-prob / token", "flip_rate": "flip rate", "flip_low": "flip low",
         "flip_high": "flip high", "flip_strict": "flip (token-exact)", "flip_strict_rate": "token-exact flip rate",
         "example_id": "example", "n_tokens": "tokens", "n_reused": "reused tokens", "budget": "budget b",
         "rows_per_example": "rows / example", "gap_recovered": "gap closed", "gap_recovered_low": "gap low",
         "gap_recovered_high": "gap high", "ran_on": "ran on", "em_low": "EM low", "em_high": "EM high",
         "ref_b": "b vs ref", "ref_c": "c vs ref", "ref_p": "p vs ref", "ref_p_holm": "Holm p vs ref",
         "dense_b": "b vs dense", "dense_c": "c vs dense", "dense_p": "p vs dense", "dense_p_holm": "Holm p vs dense"}


def header(name) -> str:
    """A raw column name as a reader wants it: known names by `NAMES`, others word by word
    ("dense_em" -> "dense EM", "acc_kvcomm" -> "accuracy kvcomm")."""
    text = str(name)
    return NAMES.get(text) or " ".join(WORDS.get(w, w) for w in text.split("_") if w)


def readable_headers(table: pd.DataFrame) -> dict:
    """Every column of `table`, in its order, under `header(column)`."""
    return {c: header(c) for c in table.columns}


def numeric(column: pd.Series) -> pd.Series:
    """`column` as numbers where it holds only numbers and missing values (ints with a None: whole
    numbers kept exact, as pandas' Int64); any other column as it is."""
    if column.dtype != object:
        return column
    present = column.dropna()
    if present.empty or not all(isinstance(v, (int, float, np.integer, np.floating))
                                and not isinstance(v, (bool, np.bool_)) for v in present):
        return column
    try:
        whole = all(isinstance(v, (int, np.integer)) for v in present)
        return column.astype("Int64") if whole else column.astype(float)
    except (OverflowError, TypeError, ValueError):  # an integer past int64 stays as it is
        return column


ROW_PX, MOST_ROWS = 35, 20  # a table shows up to MOST_ROWS rows before it scrolls
WRAPPED_PX = 70  # a row this tall wraps its text (Streamlit wraps from 64 px), two to three lines
LINE_PX = 20  # a wrapped line of text


def show_table(table: pd.DataFrame, headers: dict | None = None, formats: dict | None = None, key: str | None = None,
               pinned: tuple = (), widths: dict | None = None, wrap: bool | int = False, helps: dict | None = None,
               select: str | None = None, into=None):
    """`table`'s columns named by `headers` (its order; columns it lacks are left out; None: every
    column, `readable_headers`), each formatted by `formats` (a column -> function of one value;
    default: floats in 3 decimals, or `fitting` where every column is shown), and every missing
    value blank; `pinned` columns stay in view while the table scrolls sideways; `widths` (a
    column -> "small" / "medium" / "large" / pixels) sizes a column and `wrap` makes rows tall
    enough to wrap long text (True: up to three lines; a number: that many lines, three at
    least); `helps` (a column -> text) is shown over its header; up to MOST_ROWS rows before it
    scrolls. `select` ("single-row", ...) makes rows selectable and returns the selection event
    (rows as shown); `into` the container drawn in (default: the page)."""
    every = headers is None
    headers = readable_headers(table) if every else headers
    columns = [c for c in headers if c in table.columns]
    shown = table[columns].reset_index(drop=True)
    formats, widths, helps = formats or {}, widths or {}, helps or {}

    def default(c):
        return fitting(shown[c]) if every else rate if pd.api.types.is_float_dtype(shown[c]) else compact
    chosen = {c: formats.get(c) or default(c) for c in columns}
    for c in columns:
        shown[c] = numeric(shown[c])
    ticks = [c for c in columns if shown[c].dtype.kind == "b" and c not in formats]  # True / False as checkboxes
    # text, numbers mixed with text, or a whole number past 2**53 (a seed: the frontend's numbers refuse it)
    as_text = [c for c in columns if shown[c].dtype == object
               or shown[c].dtype.kind in "iuf" and bool((shown[c].abs() >= 2 ** 53).any())]
    for c in as_text:
        shown[c] = shown[c].map(chosen[c]).astype(object)
    styler = shown.style.format({c: f for c, f in chosen.items() if c not in as_text + ticks}, na_rep="")
    # NumberColumn without a format: the frontend shows the Styler's text (a format would override it)
    kind = {c: st.column_config.NumberColumn if shown[c].dtype.kind in "iuf" else st.column_config.Column
            for c in columns}
    config = {c: kind[c](headers[c], pinned=c in pinned, width=widths.get(c), help=helps.get(c)) for c in columns}
    row = ROW_PX if not wrap else WRAPPED_PX if wrap is True else max(WRAPPED_PX, LINE_PX * int(wrap) + 12)
    chosen_rows = {"on_select": "rerun", "selection_mode": select} if select else {}
    return (into or st).dataframe(styler, hide_index=True, width="stretch", column_config=config, key=key,
                                  placeholder="",
                                  row_height=row if wrap else None,
                                  height=ROW_PX + row * min(len(shown), MOST_ROWS) + 3, **chosen_rows)
