"""Two independent samples: does a paired effect differ between two settings?

Each sample holds one setting's per-example paired differences (A - B on the same examples), and
the settings' examples are distinct, so the two samples are independent. The statistic is the
difference of their means; its p is a two-sided permutation test of exchangeability (labels of
the pooled values shuffled), its interval a percentile bootstrap resampling each sample on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from workbench.errors import WorkbenchError
from workbench.stats.checks import as_float, check_confidence, to_1d


@dataclass(frozen=True)
class TwoSampleResult:
    """mean(x) - mean(y), its interval and the permutation test's two-sided p."""

    difference: float
    low: float
    high: float
    p_value: float
    method: str  # "exact" (every split enumerated) or "Monte Carlo (R resamples)"


def difference_of_means(x: Any, y: Any, n_resamples: int = 100_000, seed: int = 0,
                        confidence: float = 0.95) -> TwoSampleResult:
    """The two-sided permutation test of mean(x) = mean(y) for independent samples, exact where the
    splits number at most `n_resamples` (scipy enumerates them), else Monte Carlo with `seed`; and a
    percentile bootstrap interval of the difference (each sample resampled on its own)."""
    x, y = as_float(to_1d(x, "x"), "x"), as_float(to_1d(y, "y"), "y")
    if len(x) < 2 or len(y) < 2:
        raise WorkbenchError(f"each sample needs at least two values (got {len(x)} and {len(y)})")
    confidence = check_confidence(confidence)

    def statistic(a, b, axis=-1):
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    test = sps.permutation_test((x, y), statistic, permutation_type="independent", vectorized=True,
                                n_resamples=n_resamples, alternative="two-sided", random_state=seed)
    boot = sps.bootstrap((x, y), statistic, vectorized=True, paired=False, confidence_level=confidence,
                         n_resamples=9_999, method="percentile", random_state=seed)
    n_splits = math.comb(len(x) + len(y), len(x))
    method = "exact" if n_splits <= n_resamples else f"Monte Carlo ({n_resamples:,} resamples)"
    return TwoSampleResult(float(statistic(x, y)), float(boot.confidence_interval.low),
                           float(boot.confidence_interval.high), float(min(1.0, test.pvalue)), method)
