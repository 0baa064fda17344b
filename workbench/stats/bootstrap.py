"""Bootstrap intervals over examples: of a paired difference, and of the share of a gap closed."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
from scipy import stats as _st

from workbench.errors import WorkbenchError
from workbench.stats.checks import (
    BOOTSTRAP_BATCH_ELEMENTS, BOOTSTRAP_RNG_KW, as_float, check_confidence, same_length,
)


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
    conf = check_confidence(confidence)
    x, y = as_float(a, "a"), as_float(b, "b")
    same_length(x, y, "a", "b")
    if x.shape[0] < 2:
        raise WorkbenchError("paired_bootstrap_ci needs at least 2 paired examples")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise WorkbenchError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    d = x - y
    estimate = float(stat(d))
    batch = max(1, BOOTSTRAP_BATCH_ELEMENTS // d.shape[0])

    def run(method: str) -> tuple[float, float]:
        kw = {BOOTSTRAP_RNG_KW: np.random.default_rng(seed)}
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
    conf = check_confidence(confidence)
    m, r, d = as_float(method, "method"), as_float(reuse_all, "reuse_all"), as_float(dense, "dense")
    same_length(m, r, "method", "reuse_all")
    same_length(m, d, "method", "dense")
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
        kw = {BOOTSTRAP_RNG_KW: np.random.default_rng(seed)}
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


# --------------------------------------------------------------------------- cost to a target


def cost_to_target_ci(
    values: Any,
    costs: Any,
    reference: Any,
    share: float,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(cost, low, high)``: the least mean cost over the grid's points whose mean value reaches
    ``share`` x the mean reference (inf where none does), with a percentile interval resampling
    examples with their whole rows (a bound is inf where that share of resamples reaches no point).
    values, costs: [example, point]; reference: [example]. Needs 2 examples."""
    conf = check_confidence(confidence)
    v, c = np.asarray(values, dtype=float), np.asarray(costs, dtype=float)
    r = as_float(reference, "reference")
    if v.ndim != 2 or v.shape != c.shape or v.shape[0] != r.shape[0]:
        raise WorkbenchError(f"cost_to_target_ci: values {v.shape}, costs {c.shape} and reference {r.shape} "
                             "must be [example, point], [example, point] and [example]")
    if v.shape[0] < 2:
        raise WorkbenchError("cost_to_target_ci needs at least 2 examples")
    if not (np.isfinite(v).all() and np.isfinite(c).all()):
        raise WorkbenchError("cost_to_target_ci: values and costs must be finite")
    reached = v.mean(axis=0) >= share * r.mean()
    estimate = float(c.mean(axis=0)[reached].min()) if reached.any() else math.inf
    rng, n, found = np.random.default_rng(seed), v.shape[0], []
    per_batch = max(1, BOOTSTRAP_BATCH_ELEMENTS // n)
    for start in range(0, int(n_resamples), per_batch):
        size = min(per_batch, int(n_resamples) - start)
        w = rng.multinomial(n, np.full(n, 1 / n), size=size) / n  # [resample, example]: each example's weight
        ok = w @ v >= share * (w @ r)[:, None] - 1e-12  # [resample, point]
        found.append(np.where(ok, w @ c, np.inf).min(axis=1))
    tail = (1 - conf) / 2
    low, high = (float(q) for q in np.quantile(np.concatenate(found), [tail, 1 - tail], method="inverted_cdf"))
    return (estimate, low, high)
