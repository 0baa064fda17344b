"""Paired statistics for comparing two KV-cache repair methods on the same examples.

Every comparison here is *paired*: example ``i`` was answered by method A and by method B,
so the tests work on per-example pairs (or their differences), never on two independent
samples. Which test each function is, and where scipy does the work:

=========================  ==========================================  ===========================
function                   test / quantity                             computed by
=========================  ==========================================  ===========================
``mcnemar_exact``          exact McNemar test (binary outcomes)        ``scipy.stats.binomtest``
``mcnemar_from_counts``    same, from the discordant counts b, c       ``scipy.stats.binomtest``
``wilson_interval``        Wilson score interval for one proportion    ``BinomTestResult.proportion_ci``
``holm``                   Holm-Bonferroni step-down adjustment        here (scipy has no Holm)
``paired_bootstrap_ci``    bootstrap CI of ``stat(a - b)`` over pairs  ``scipy.stats.bootstrap``
``paired_t``               paired (dependent-samples) t-test           ``scipy.stats.ttest_rel``
``sign_flip_test``         paired sign-flip permutation test           exact on a lattice (here), or
                                                                       ``scipy.stats.permutation_test``
``share_of_gap_recovered`` (method - reuse_all) / (dense - reuse_all)  plain arithmetic
=========================  ==========================================  ===========================

Bad input (mismatched lengths, empty arrays, non-boolean outcomes, non-finite scores,
a confidence level outside (0, 1)) raises :class:`~workbench.errors.WorkbenchError`.
"""

from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy import stats as _st

from workbench.errors import WorkbenchError

__all__ = ["McNemarResult", "PairedTResult", "SignFlipResult", "holm", "mcnemar_exact", "mcnemar_from_counts",
           "paired_bootstrap_ci", "paired_t", "share_of_gap_recovered", "sign_flip_test", "wilson_interval"]

# Bootstrap memory guard: at most this many resampled values are held at once.
_BOOTSTRAP_BATCH_ELEMENTS = 2_000_000
# scipy >= 1.15 takes ``rng``; older releases (pyproject allows >= 1.12) take ``random_state``.
_BOOTSTRAP_RNG_KW = "rng" if "rng" in inspect.signature(_st.bootstrap).parameters else "random_state"
_PERMUTATION_RNG_KW = "rng" if "rng" in inspect.signature(_st.permutation_test).parameters else "random_state"


# --------------------------------------------------------------------------- validation


def _to_1d(x: Any, name: str) -> np.ndarray:
    """Turn a list / numpy array / pandas Series into a non-empty 1-D numpy array."""
    if hasattr(x, "to_numpy"):  # pandas Series / Index / ExtensionArray
        x = x.to_numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise WorkbenchError(f"{name}: could not read as a 1-D array ({exc})") from exc
    if arr.ndim != 1:
        raise WorkbenchError(f"{name}: expected a 1-D sequence, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise WorkbenchError(f"{name}: is empty; need at least one paired example")
    return arr


def _as_bool(x: Any, name: str) -> np.ndarray:
    """Validate per-example correct/incorrect outcomes: bools or the integers 0/1 only."""
    arr = _to_1d(x, name)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iu":
        bad = ~np.isin(arr, (0, 1))
    elif arr.dtype == object:
        bad = np.array(
            [
                not (isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)))
                for v in arr
            ]
        )
    else:
        raise WorkbenchError(
            f"{name}: expected booleans or 0/1 integers, got dtype {arr.dtype}; "
            "threshold float scores into correct/incorrect first"
        )
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise WorkbenchError(
            f"{name}: expected booleans or 0/1 integers, got {arr[i]!r} at position {i}"
        )
    return arr.astype(bool)


def _as_float(x: Any, name: str) -> np.ndarray:
    """Validate per-example scores: real, finite numbers."""
    arr = _to_1d(x, name)
    if arr.dtype.kind not in "biuf" and arr.dtype != object:
        raise WorkbenchError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    try:
        arr = arr.astype(float)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"{name}: expected real numbers ({exc})") from exc
    if not np.isfinite(arr).all():
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise WorkbenchError(
            f"{name}: non-finite value {arr[i]} at position {i}; drop incomplete pairs first"
        )
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, na: str, nb: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise WorkbenchError(
            f"{na} and {nb} must be paired per example, but have lengths {a.shape[0]} and {b.shape[0]}"
        )


def _check_confidence(confidence: float) -> float:
    try:
        c = float(confidence)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"confidence must be a number in (0, 1), got {confidence!r}") from exc
    if not 0.0 < c < 1.0:  # also rejects nan
        raise WorkbenchError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return c


def _check_count(v: Any, name: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise WorkbenchError(f"{name} must be a non-negative integer count, got {v!r}")
    if v < 0:
        raise WorkbenchError(f"{name} must be a non-negative integer count, got {v}")
    return int(v)


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
    b, c = _check_count(b, "b"), _check_count(c, "c")
    n = b + c
    p = 1.0 if n == 0 else float(_st.binomtest(min(b, c), n, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b=b, c=c, n_discordant=n, p_value=min(p, 1.0))


def mcnemar_exact(a_correct: Any, b_correct: Any) -> McNemarResult:
    """Exact McNemar test on paired correct/incorrect outcomes of methods A and B."""
    a = _as_bool(a_correct, "a_correct")
    bb = _as_bool(b_correct, "b_correct")
    _same_length(a, bb, "a_correct", "b_correct")
    return mcnemar_from_counts(int(np.sum(a & ~bb)), int(np.sum(~a & bb)))


# --------------------------------------------------------------------------- Wilson


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (no continuity correction) for ``successes / n``.

    Computed by ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``.
    Returns ``(nan, nan)`` when ``n == 0``: there is no information about the proportion.
    """
    conf = _check_confidence(confidence)
    k, n = _check_count(successes, "successes"), _check_count(n, "n")
    if k > n:
        raise WorkbenchError(f"successes ({k}) cannot exceed n ({n})")
    if n == 0:
        return (math.nan, math.nan)
    ci = _st.binomtest(k, n).proportion_ci(confidence_level=conf, method="wilson")
    return (float(ci.low), float(ci.high))


# --------------------------------------------------------------------------- Holm


def _as_float_allow_nan(x: Any, name: str) -> np.ndarray:
    arr = _to_1d(x, name)
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


# --------------------------------------------------------------------------- bootstrap


def paired_bootstrap_ci(
    a: Any,
    b: Any,
    stat: Callable[..., Any] = np.mean,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(stat(a - b), low, high)``: bootstrap CI resampling examples (pairs) with replacement.

    Runs ``scipy.stats.bootstrap`` on the per-example differences ``a - b`` (equivalent to
    resampling pairs) with the **BCa** method; when BCa is degenerate (e.g. all differences
    equal, giving NaN bounds) it falls back to the **percentile** method. ``stat`` should
    accept an ``axis`` keyword (``np.mean``, ``np.median`` do) to run vectorised.
    Deterministic for a given ``seed``. Needs at least 2 pairs.
    """
    conf = _check_confidence(confidence)
    x, y = _as_float(a, "a"), _as_float(b, "b")
    _same_length(x, y, "a", "b")
    if x.shape[0] < 2:
        raise WorkbenchError("paired_bootstrap_ci needs at least 2 paired examples")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise WorkbenchError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    d = x - y
    estimate = float(stat(d))
    batch = max(1, _BOOTSTRAP_BATCH_ELEMENTS // d.shape[0])

    def run(method: str) -> tuple[float, float]:
        kw = {_BOOTSTRAP_RNG_KW: np.random.default_rng(seed)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # degenerate-BCa warnings are handled below
            res = _st.bootstrap(
                (d,), stat, n_resamples=int(n_resamples), batch=batch,
                confidence_level=conf, method=method, **kw,
            )
        return float(res.confidence_interval.low), float(res.confidence_interval.high)

    low, high = run("BCa")
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = run("percentile")
    return (estimate, low, high)


def gap_closed_ci(
    method: Any,
    reuse_all: Any,
    dense: Any,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(share, low, high)``: the share of the dense-vs-splice gap a method closes,
    ``(mean(method) - mean(reuse_all)) / (mean(dense) - mean(reuse_all))`` over the same
    examples, with a paired bootstrap interval (examples resampled with their three outcomes
    together; ``scipy.stats.bootstrap``, BCa, else percentile when BCa is degenerate). A resample
    with no gap has no share and is left out of the percentiles (BCa needs every resample, so a
    small gap falls back to the percentile method). NaN when the observed gap is 0. Needs 2 examples.
    """
    conf = _check_confidence(confidence)
    m, r, d = _as_float(method, "method"), _as_float(reuse_all, "reuse_all"), _as_float(dense, "dense")
    _same_length(m, r, "method", "reuse_all")
    _same_length(m, d, "method", "dense")
    if m.shape[0] < 2:
        raise WorkbenchError("gap_closed_ci needs at least 2 examples")

    def share(mm, rr, dd, axis=-1):
        gap = dd.mean(axis=axis) - rr.mean(axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gap == 0, np.nan, (mm.mean(axis=axis) - rr.mean(axis=axis)) / gap)

    estimate = float(share(m, r, d))
    if not math.isfinite(estimate):
        return (math.nan, math.nan, math.nan)

    def run(method_name: str) -> tuple[float, float]:
        kw = {_BOOTSTRAP_RNG_KW: np.random.default_rng(seed)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = _st.bootstrap((m, r, d), share, paired=True, vectorized=True, n_resamples=int(n_resamples),
                                confidence_level=conf, method=method_name, **kw)
        return float(res.confidence_interval.low), float(res.confidence_interval.high)

    low, high = run("BCa")
    if not (math.isfinite(low) and math.isfinite(high)):
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, m.shape[0], size=(int(n_resamples), m.shape[0]))  # [resample, example]
        shares = share(m[idx], r[idx], d[idx], axis=1)
        shares = shares[np.isfinite(shares)]
        if shares.size == 0:
            return (estimate, math.nan, math.nan)
        tail = (1 - conf) / 2
        low, high = (float(q) for q in np.quantile(shares, [tail, 1 - tail]))
    return (estimate, low, high)


# --------------------------------------------------------------------------- paired t


@dataclass(frozen=True)
class PairedTResult:
    """Paired t-test: mean of ``a - b``, t statistic, two-sided p-value, number of pairs."""

    mean_diff: float
    t: float
    p_value: float
    n: int


def paired_t(a: Any, b: Any) -> PairedTResult:
    """Two-sided paired t-test on ``a - b`` (``scipy.stats.ttest_rel``).

    When every difference is identical the t statistic is undefined: returns
    ``t = p_value = nan`` without warnings. Needs at least 2 pairs.
    """
    x, y = _as_float(a, "a"), _as_float(b, "b")
    _same_length(x, y, "a", "b")
    n = int(x.shape[0])
    if n < 2:
        raise WorkbenchError("paired_t needs at least 2 paired examples")
    d = x - y
    mean_diff = float(np.mean(d))
    # identical differences (up to float round-off in a - b): the t statistic is undefined
    if np.ptp(d) <= 4 * np.finfo(float).eps * np.max(np.abs(d)):
        return PairedTResult(mean_diff=mean_diff, t=math.nan, p_value=math.nan, n=n)
    res = _st.ttest_rel(x, y)
    return PairedTResult(mean_diff=mean_diff, t=float(res.statistic), p_value=float(res.pvalue), n=n)


# --------------------------------------------------------------------------- sign-flip test

# Differences that are multiples of 1/D for some D up to this are tested exactly on their lattice
# (a binary outcome against the mean of up to this many coin draws, say).
_LATTICE_MAX_DENOMINATOR = 120
_EXACT_ENUMERATION_MAX = 20  # off a lattice: all 2^n sign patterns are enumerated up to this n


@dataclass(frozen=True)
class SignFlipResult:
    """Paired sign-flip test of mean(a - b) = 0, two-sided. ``method``: "exact (lattice)", "exact
    (enumeration)" (all 2^n sign patterns) or "Monte Carlo (N)" (``scipy.stats.permutation_test``)."""

    mean_diff: float
    p_value: float
    n: int
    n_nonzero: int
    method: str

    @property
    def exact(self) -> bool:
        return self.method.startswith("exact")


def _lattice(d: np.ndarray) -> int | None:
    """The smallest D <= _LATTICE_MAX_DENOMINATOR with every d * D an integer, else None."""
    for den in range(1, _LATTICE_MAX_DENOMINATOR + 1):
        scaled = d * den
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 * max(1.0, float(np.max(np.abs(scaled))))):
            return den
    return None


def _lattice_p(values: list[int], observed: int) -> float:
    """P(|sum of ±v_i| >= observed) over independent fair signs, by exact integer counts."""
    counts = {0: 1}
    for v in values:
        nxt: dict[int, int] = {}
        for s, c in counts.items():
            nxt[s + v] = nxt.get(s + v, 0) + c
            nxt[s - v] = nxt.get(s - v, 0) + c
        counts = nxt
    return min(1.0, sum(c for s, c in counts.items() if abs(s) >= observed) / 2 ** len(values))


def sign_flip_test(a: Any, b: Any, n_resamples: int = 100_000, seed: int = 0) -> SignFlipResult:
    """Two-sided paired sign-flip permutation test on the differences ``d = a - b``.

    Under the null each difference is as likely to have either sign. The statistic is sum(d). When
    the differences lie on a lattice (multiples of 1/D, D <= 120: binary outcomes, means over up
    to 120 coin draws, counts) the null is computed exactly by integer convolution; otherwise it is
    enumerated exactly for up to 20 non-zero differences and sampled (``n_resamples`` sign patterns,
    seeded) beyond. Zero differences carry no sign and are left out of the null. On binary outcomes
    the exact test equals the exact McNemar test.
    """
    x, y = _as_float(a, "a"), _as_float(b, "b")
    _same_length(x, y, "a", "b")
    d = x - y
    nonzero = d[d != 0]
    k, mean = int(nonzero.size), float(np.mean(d))
    if k == 0:
        return SignFlipResult(mean, 1.0, int(d.size), 0, "exact (no non-zero difference)")
    den = _lattice(nonzero)
    if den is not None:
        ints = [abs(int(round(v * den))) for v in nonzero]
        p = _lattice_p(ints, abs(int(round(float(np.sum(nonzero)) * den))))
        return SignFlipResult(mean, min(1.0, p), int(d.size), k, "exact (lattice)")
    exact = k <= _EXACT_ENUMERATION_MAX
    resamples = 2 ** k if exact else int(n_resamples)
    res = _st.permutation_test((nonzero,), lambda v, axis: np.sum(v, axis=axis), permutation_type="samples",
                               n_resamples=resamples, alternative="two-sided", vectorized=True,
                               **{_PERMUTATION_RNG_KW: np.random.default_rng(seed)})
    method = "exact (enumeration)" if exact else f"Monte Carlo ({resamples})"
    return SignFlipResult(mean, float(min(1.0, res.pvalue)), int(d.size), k, method)


# --------------------------------------------------------------------------- gap share


def share_of_gap_recovered(method: float, reuse_all: float, dense: float) -> float:
    """``(method - reuse_all) / (dense - reuse_all)``: 0 = no better than reusing the whole
    cache, 1 = matches the dense recompute. NaN when ``dense == reuse_all`` (no gap)."""
    try:
        m, r, d = float(method), float(reuse_all), float(dense)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"share_of_gap_recovered expects three numbers ({exc})") from exc
    if d == r:
        return math.nan
    return (m - r) / (d - r)
