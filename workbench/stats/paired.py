"""Paired tests on graded outcomes: the paired t-test and the sign-flip permutation test."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from workbench.errors import WorkbenchError
from workbench.stats.checks import PERMUTATION_RNG_KW, as_float, same_length


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
    x, y = as_float(a, "a"), as_float(b, "b")
    same_length(x, y, "a", "b")
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
_WIDE_LATTICE_MAX_SUM = 4_000_000  # a wider lattice (max_denominator): the null's support held at once


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


def _lattice(d: np.ndarray, max_denominator: int = _LATTICE_MAX_DENOMINATOR) -> int | None:
    """The smallest D <= max_denominator with every d * D an integer, else None (D tried 256 at a time)."""
    for start in range(1, max_denominator + 1, 256):
        dens = np.arange(start, min(start + 256, max_denominator + 1), dtype=float)[:, None]
        scaled = d[None, :] * dens  # [den, value]
        tolerance = 1e-9 * np.maximum(1.0, np.abs(scaled).max(axis=1))
        fits = np.all(np.abs(scaled - np.round(scaled)) <= tolerance[:, None], axis=1)
        if fits.any():
            return int(dens[np.argmax(fits), 0])
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


def _wide_lattice_p(values: list[int], observed: int) -> float:
    """`_lattice_p` for a wider lattice: the null's probabilities (not counts) by shifted adds in float64,
    each value one step (all terms positive: the relative error stays near n * 1e-16)."""
    total = sum(values)
    p = np.zeros(2 * total + 1)
    p[total] = 1.0  # index total + s holds P(sum = s)
    for v in values:
        nxt = np.zeros_like(p)
        nxt[v:] += 0.5 * p[:p.size - v]
        nxt[:p.size - v] += 0.5 * p[v:]
        p = nxt
    sums = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, p[sums >= observed].sum()))


def sign_flip_test(a: Any, b: Any, n_resamples: int = 100_000, seed: int = 0,
                   max_denominator: int = _LATTICE_MAX_DENOMINATOR) -> SignFlipResult:
    """Two-sided paired sign-flip permutation test on the differences ``d = a - b``.

    Under the null each difference is as likely to have either sign. The statistic is sum(d). When
    the differences lie on a lattice (multiples of 1/D, D <= 120: binary outcomes, means over up
    to 120 coin draws, counts) the null is computed exactly by integer convolution; otherwise it is
    enumerated exactly for up to 20 non-zero differences and sampled (``n_resamples`` sign patterns,
    seeded) beyond. Zero differences carry no sign and are left out of the null. On binary outcomes
    the exact test equals the exact McNemar test. `max_denominator` above 120 widens the lattice
    searched (areas over a budget grid, say); a lattice wider than 120 is computed in float64.
    """
    x, y = as_float(a, "a"), as_float(b, "b")
    same_length(x, y, "a", "b")
    d = x - y
    nonzero = d[d != 0]
    k, mean = int(nonzero.size), float(np.mean(d))
    if k == 0:
        return SignFlipResult(mean, 1.0, int(d.size), 0, "exact (no non-zero difference)")
    den = _lattice(nonzero, max(_LATTICE_MAX_DENOMINATOR, int(max_denominator)))
    if den is not None:
        ints = [abs(int(round(v * den))) for v in nonzero]
        observed = abs(int(round(float(np.sum(nonzero)) * den)))
        if den <= _LATTICE_MAX_DENOMINATOR:
            return SignFlipResult(mean, min(1.0, _lattice_p(ints, observed)), int(d.size), k, "exact (lattice)")
        if sum(ints) <= _WIDE_LATTICE_MAX_SUM:
            return SignFlipResult(mean, _wide_lattice_p(ints, observed), int(d.size), k, "exact (lattice)")
    exact = k <= _EXACT_ENUMERATION_MAX
    resamples = 2 ** k if exact else int(n_resamples)
    res = _st.permutation_test((nonzero,), lambda v, axis: np.sum(v, axis=axis), permutation_type="samples",
                               n_resamples=resamples, alternative="two-sided", vectorized=True,
                               **{PERMUTATION_RNG_KW: np.random.default_rng(seed)})
    method = "exact (enumeration)" if exact else f"Monte Carlo ({resamples})"
    return SignFlipResult(mean, float(min(1.0, res.pvalue)), int(d.size), k, method)
