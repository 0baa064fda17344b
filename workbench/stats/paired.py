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
    x, y = as_float(a, "a"), as_float(b, "b")
    same_length(x, y, "a", "b")
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
                               **{PERMUTATION_RNG_KW: np.random.default_rng(seed)})
    method = "exact (enumeration)" if exact else f"Monte Carlo ({resamples})"
    return SignFlipResult(mean, float(min(1.0, res.pvalue)), int(d.size), k, method)
