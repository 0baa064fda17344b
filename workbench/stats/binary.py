"""Binary outcomes: the exact McNemar test, the Wilson interval and Holm's step-down adjustment."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from workbench.errors import WorkbenchError
from workbench.stats.checks import as_bool, check_confidence, check_count, same_length, to_1d


# --------------------------------------------------------------------------- McNemar


def _fmt_p(p: float) -> str:
    if math.isnan(p):
        return "nan"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar result. ``b`` = A right & B wrong, ``c`` = A wrong & B right."""

    b: int
    c: int
    n_discordant: int
    p_value: float

    def __str__(self) -> str:
        return f"b/c = {self.b}/{self.c}, p = {_fmt_p(self.p_value)}"


def mcnemar_from_counts(b: int, c: int) -> McNemarResult:
    """Exact two-sided McNemar test from the discordant counts.

    Binomial test of ``min(b, c)`` successes in ``b + c`` trials at p = 0.5
    (``scipy.stats.binomtest``); p = 1.0 when there are no discordant pairs.
    """
    b, c = check_count(b, "b"), check_count(c, "c")
    n = b + c
    p = 1.0 if n == 0 else float(_st.binomtest(min(b, c), n, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b=b, c=c, n_discordant=n, p_value=min(p, 1.0))


def mcnemar_exact(a_correct: Any, b_correct: Any) -> McNemarResult:
    """Exact McNemar test on paired correct/incorrect outcomes of methods A and B."""
    a = as_bool(a_correct, "a_correct")
    bb = as_bool(b_correct, "b_correct")
    same_length(a, bb, "a_correct", "b_correct")
    return mcnemar_from_counts(int(np.sum(a & ~bb)), int(np.sum(~a & bb)))


# --------------------------------------------------------------------------- Wilson


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (no continuity correction) for ``successes / n``.

    Computed by ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``.
    Returns ``(nan, nan)`` when ``n == 0``: there is no information about the proportion.
    """
    conf = check_confidence(confidence)
    k, n = check_count(successes, "successes"), check_count(n, "n")
    if k > n:
        raise WorkbenchError(f"successes ({k}) cannot exceed n ({n})")
    if n == 0:
        return (math.nan, math.nan)
    ci = _st.binomtest(k, n).proportion_ci(confidence_level=conf, method="wilson")
    return (float(ci.low), float(ci.high))


# --------------------------------------------------------------------------- Holm


def _as_float_allow_nan(x: Any, name: str) -> np.ndarray:
    arr = to_1d(x, name)
    try:
        arr = arr.astype(float)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"{name}: expected numbers ({exc})") from exc
    finite = arr[~np.isnan(arr)]
    if ((finite < 0) | (finite > 1)).any():
        raise WorkbenchError(f"{name}: p-values must lie in [0, 1] (or be NaN), got {arr.tolist()}")
    return arr


def holm(p_values: Any) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the input order.

    Step-down: the i-th smallest of m p-values (i = 1..m) is multiplied by (m - i + 1), a running
    maximum makes the result monotone, and it is capped at 1. NaN entries stay NaN and
    are not counted in the family size m.
    """
    p = _as_float_allow_nan(p_values, "p_values")
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m == 0:
        return out
    idx = np.flatnonzero(ok)
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adj, 1.0)
    return out
