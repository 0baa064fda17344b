"""workbench.stats against values computed by hand in this file."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as t_dist

from workbench import stats
from workbench.errors import WorkbenchError
from workbench.stats import (
    McNemarResult,
    PairedTResult,
    holm,
    mcnemar_exact,
    mcnemar_from_counts,
    paired_bootstrap_ci,
    paired_t,
    share_of_gap_recovered,
    gap_closed_ci,
    wilson_interval,
)

Z95 = 1.959963984540054  # Phi^{-1}(0.975)


# --------------------------------------------------------------------------- McNemar


def test_mcnemar_from_counts_12_21():
    # two-sided exact: p = 2 * sum_{k=0}^{12} C(33, k) / 2^33   (b + c = 33, min = 12)
    expected = 2 * sum(math.comb(33, k) for k in range(13)) / 2**33
    r = mcnemar_from_counts(12, 21)
    assert isinstance(r, McNemarResult)
    assert (r.b, r.c, r.n_discordant) == (12, 21, 33)
    assert r.p_value == pytest.approx(expected, abs=1e-12)
    assert str(r) == "b/c = 12/21, p = 0.163"
    # symmetric in b, c
    assert mcnemar_from_counts(21, 12).p_value == pytest.approx(expected, abs=1e-12)


def test_mcnemar_no_discordant_pairs_is_one():
    r = mcnemar_from_counts(0, 0)
    assert (r.n_discordant, r.p_value) == (0, 1.0)
    assert str(r) == "b/c = 0/0, p = 1.000"


def test_mcnemar_equal_split_capped_at_one():
    # 2 * sum_{k=0}^{3} C(6,k)/64 = 2 * (1+6+15+20)/64 = 84/64 > 1  -> capped at 1
    assert mcnemar_from_counts(3, 3).p_value == 1.0


def test_mcnemar_exact_from_arrays():
    # pairs (A, B): (1,0) (1,0) (0,1) (0,1) (0,1) (0,1) (0,1) (1,1) (0,0)
    # b = #(A right, B wrong) = 2, c = #(A wrong, B right) = 5, n = 7
    # p = 2 * (C(7,0) + C(7,1) + C(7,2)) / 2^7 = 2 * (1 + 7 + 21) / 128 = 58/128 = 0.453125
    a = [1, 1, 0, 0, 0, 0, 0, 1, 0]
    b = [0, 0, 1, 1, 1, 1, 1, 1, 0]
    r = mcnemar_exact(a, b)
    assert (r.b, r.c, r.n_discordant) == (2, 5, 7)
    assert r.p_value == pytest.approx(58 / 128, abs=1e-12)
    # same answer from numpy bools and pandas Series
    r2 = mcnemar_exact(np.array(a, dtype=bool), pd.Series(b))
    assert r2 == r


def test_mcnemar_exact_small_p_formatting():
    # b = 0, c = 12: p = 2 * C(12,0) / 2^12 = 2/4096 = 4.8828125e-4
    a = np.zeros(12, dtype=bool)
    b = np.ones(12, dtype=bool)
    r = mcnemar_exact(a, b)
    assert r.p_value == pytest.approx(2 / 4096, abs=1e-15)
    assert str(r) == "b/c = 0/12, p = 4.9e-04"


# --------------------------------------------------------------------------- Wilson


def _wilson_closed_form(k: int, n: int, z: float) -> tuple[float, float]:
    # (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    den = 1 + z * z / n
    return (centre - half) / den, (centre + half) / den


def test_wilson_7_of_12():
    # p = 7/12 = 0.583333..., z^2 = 3.841458820694124, z^2/n = 0.32012156839,
    # centre = 0.58333333 + 0.16006078420 = 0.74339411753, den = 1.32012156839
    # half = 1.959963984540054 * sqrt(0.24305555556/12 + 3.8414588207/576)
    #      = 1.959963984540054 * sqrt(0.02025462963 + 0.00666919934) = 0.32160034
    # -> ((0.74339412 - 0.32160034) / 1.32012157, (0.74339412 + 0.32160034) / 1.32012157)
    #  = (0.31951131, 0.80673969)
    lo, hi = wilson_interval(7, 12)
    assert (lo, hi) == pytest.approx(_wilson_closed_form(7, 12, Z95), abs=1e-12)
    assert (lo, hi) == pytest.approx((0.31951131, 0.80673969), abs=1e-8)


def test_wilson_0_of_10():
    # p = 0: lower = (z^2/20 - z*sqrt(z^2/400)) / (1 + z^2/10) = 0
    #        upper = (z^2/20 + z^2/20) / (1 + z^2/10) = 0.38414588207 / 1.38414588207 = 0.27753280
    lo, hi = wilson_interval(0, 10)
    assert lo == pytest.approx(0.0, abs=1e-15)
    z2n = Z95**2 / 10
    assert hi == pytest.approx(z2n / (1 + z2n), abs=1e-12)
    assert (lo, hi) == pytest.approx(_wilson_closed_form(0, 10, Z95), abs=1e-12)


def test_wilson_other_confidence_and_empty():
    z90 = 1.6448536269514722  # Phi^{-1}(0.95)
    assert wilson_interval(3, 8, confidence=0.90) == pytest.approx(
        _wilson_closed_form(3, 8, z90), abs=1e-12
    )
    lo, hi = wilson_interval(0, 0)  # no trials: documented (nan, nan)
    assert math.isnan(lo) and math.isnan(hi)


# --------------------------------------------------------------------------- Holm


def test_holm_hand_computed():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06
    # back in input order [0.01, 0.04, 0.03, 0.005] -> [0.03, 0.06, 0.06, 0.02]
    out = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(out, [0.03, 0.06, 0.06, 0.02], rtol=0, atol=1e-15)


def test_holm_nan_not_counted():
    # family m = 3: 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> 0.06
    out = holm(np.array([0.01, np.nan, 0.04, 0.03]))
    np.testing.assert_allclose(out, [0.03, np.nan, 0.06, 0.06], rtol=0, atol=1e-15)
    assert np.isnan(holm([np.nan, np.nan])).all()


def test_holm_cap_and_monotone():
    # 0.5*2 = 1.0, 0.6*1 = 0.6 -> max(1.0, 0.6) = 1.0 ; 0.3*2 = 0.6, 0.4*1 -> 0.6 ; single p unchanged
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])
    np.testing.assert_allclose(holm([0.4, 0.3]), [0.6, 0.6])
    np.testing.assert_allclose(holm(pd.Series([0.2])), [0.2])
    assert (holm([0.9, 0.8, 0.7]) <= 1.0).all()


# --------------------------------------------------------------------------- paired t


def test_paired_t_hand_computed():
    # d = a - b = [2, 1, 0, 3, 2], mean = 8/5 = 1.6
    # deviations 0.4, -0.6, -1.6, 1.4, 0.4 ; squares sum = 0.16+0.36+2.56+1.96+0.16 = 5.2
    # sd = sqrt(5.2/4) = sqrt(1.3) ; se = sd/sqrt(5) = sqrt(0.26) ; t = 1.6/sqrt(0.26) = 3.13785816
    # p = 2 * P(T_4 > t)
    a = [3.0, 5.0, 4.0, 6.0, 7.0]
    b = [1.0, 4.0, 4.0, 3.0, 5.0]
    r = paired_t(a, b)
    t_hand = 1.6 / math.sqrt(0.26)
    assert isinstance(r, PairedTResult)
    assert r.n == 5
    assert r.mean_diff == pytest.approx(1.6, abs=1e-12)
    assert r.t == pytest.approx(t_hand, abs=1e-12)
    assert r.t == pytest.approx(3.13785816, abs=1e-8)
    assert r.p_value == pytest.approx(2 * t_dist.sf(t_hand, df=4), abs=1e-12)
    # swapping A and B flips the sign of t, keeps p
    r2 = paired_t(b, a)
    assert r2.t == pytest.approx(-t_hand) and r2.p_value == pytest.approx(r.p_value)


def test_paired_t_identical_differences_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = paired_t([0.3, 0.5, 0.9], [0.1, 0.3, 0.7])  # d = 0.2 each (up to round-off)
        z = paired_t([1, 0, 1], [1, 0, 1])  # d = 0
    assert math.isnan(r.t) and math.isnan(r.p_value)
    assert r.mean_diff == pytest.approx(0.2) and r.n == 3
    assert math.isnan(z.t) and z.mean_diff == 0.0


# --------------------------------------------------------------------------- bootstrap


def _scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.normal(0.6, 0.2, n)
    return a, a - 0.1 + rng.normal(0, 0.1, n)


def test_bootstrap_estimate_and_determinism():
    a, b = _scores(40, 1)
    est, lo, hi = paired_bootstrap_ci(a, b, n_resamples=2000, seed=7)
    assert est == pytest.approx(float(np.mean(a - b)), abs=1e-12)
    assert lo < est < hi
    assert paired_bootstrap_ci(a, b, n_resamples=2000, seed=7) == (est, lo, hi)
    assert paired_bootstrap_ci(a, b, n_resamples=2000, seed=8) != (est, lo, hi)


def test_bootstrap_narrows_with_n():
    a, b = _scores(30, 2)
    _, lo_small, hi_small = paired_bootstrap_ci(a, b, n_resamples=2000)
    big_a, big_b = np.tile(a, 10), np.tile(b, 10)  # same differences, 10x the examples
    est, lo_big, hi_big = paired_bootstrap_ci(big_a, big_b, n_resamples=2000)
    assert lo_big < est < hi_big
    # width scales like 1/sqrt(n): expect about 1/sqrt(10) = 0.32 of the small width
    assert (hi_big - lo_big) < 0.5 * (hi_small - lo_small)


def test_bootstrap_binary_outcomes_and_median():
    a = [1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1]
    b = [0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1]
    # d = [1,0,0,0,1,0,0,1,0,0,0,0] -> mean = 3/12 = 0.25
    est, lo, hi = paired_bootstrap_ci(a, b, n_resamples=2000)
    assert est == pytest.approx(0.25)
    assert 0.0 <= lo <= est <= hi <= 1.0
    est_med, _, _ = paired_bootstrap_ci(a, b, stat=np.median, n_resamples=500)
    assert est_med == 0.0


def test_bootstrap_degenerate_falls_back_to_percentile():
    # every difference is 0.5: BCa is undefined, the percentile interval is (0.5, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = paired_bootstrap_ci(np.full(20, 1.0), np.full(20, 0.5), n_resamples=500)
    assert out == pytest.approx((0.5, 0.5, 0.5))


# --------------------------------------------------------------------------- share of gap


def test_share_of_gap_recovered():
    # (0.6 - 0.4) / (0.9 - 0.4) = 0.2 / 0.5 = 0.4
    assert share_of_gap_recovered(0.6, 0.4, 0.9) == pytest.approx(0.4)
    assert share_of_gap_recovered(0.9, 0.4, 0.9) == pytest.approx(1.0)
    assert share_of_gap_recovered(0.4, 0.4, 0.9) == 0.0
    # (0.3 - 0.4) / (0.9 - 0.4) = -0.2: worse than reusing everything
    assert share_of_gap_recovered(0.3, 0.4, 0.9) == pytest.approx(-0.2)
    assert math.isnan(share_of_gap_recovered(0.5, 0.7, 0.7))


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "a, b",
    [
        ([1, 0, 1], [1, 0]),  # mismatched lengths
        ([], []),  # empty
        ([1, 2, 0], [1, 0, 0]),  # 2 is not a boolean
        ([1.0, 0.0], [1, 0]),  # floats: threshold first
        (["yes", "no"], [1, 0]),  # strings
        ([[1, 0], [0, 1]], [[1, 0], [0, 1]]),  # 2-D
        (pd.Series([True, None], dtype="boolean"), [True, False]),  # missing value
    ],
)
def test_mcnemar_exact_rejects_bad_input(a, b):
    with pytest.raises(WorkbenchError):
        mcnemar_exact(a, b)


def test_count_validation():
    for bad in [(-1, 3), (2.5, 3), (True, 3)]:
        with pytest.raises(WorkbenchError):
            mcnemar_from_counts(*bad)
    with pytest.raises(WorkbenchError, match="cannot exceed"):
        wilson_interval(11, 10)
    with pytest.raises(WorkbenchError):
        wilson_interval(-1, 10)


@pytest.mark.parametrize("conf", [0.0, 1.0, 1.5, -0.1, float("nan"), "high"])
def test_confidence_out_of_range(conf):
    with pytest.raises(WorkbenchError, match="confidence"):
        wilson_interval(3, 10, confidence=conf)
    with pytest.raises(WorkbenchError, match="confidence"):
        paired_bootstrap_ci([1.0, 2.0, 3.0], [0.0, 1.0, 1.0], n_resamples=10, confidence=conf)


def test_score_validation():
    with pytest.raises(WorkbenchError, match="lengths"):
        paired_t([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(WorkbenchError, match="empty"):
        paired_t([], [])
    with pytest.raises(WorkbenchError, match="at least 2"):
        paired_t([1.0], [0.0])
    with pytest.raises(WorkbenchError, match="non-finite"):
        paired_t([1.0, np.nan, 0.5], [0.0, 1.0, 0.5])
    with pytest.raises(WorkbenchError):
        paired_t(["a", "b"], [0.0, 1.0])
    with pytest.raises(WorkbenchError, match="lengths"):
        paired_bootstrap_ci([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(WorkbenchError, match="n_resamples"):
        paired_bootstrap_ci([1.0, 2.0], [0.0, 0.0], n_resamples=0)
    with pytest.raises(WorkbenchError):
        share_of_gap_recovered("x", 0.1, 0.2)


def test_holm_validation():
    with pytest.raises(WorkbenchError):
        holm([])
    with pytest.raises(WorkbenchError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])
    with pytest.raises(WorkbenchError):
        holm([[0.1, 0.2]])


# --------------------------------------------------------------------------- sign-flip test

def _enumerated_p(d):
    """Two-sided sign-flip p by enumerating every sign pattern of the non-zero differences."""
    import itertools

    d = [v for v in d if v != 0]
    observed = abs(sum(d))
    hits = sum(abs(sum(s * abs(v) for s, v in zip(signs, d))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


@pytest.mark.parametrize("seed", range(4))
def test_sign_flip_p_equals_exhaustive_enumeration_on_and_off_a_lattice(seed):
    rng = np.random.default_rng(seed)
    graded = (rng.random(13), rng.random(13))  # off any lattice: enumerated
    coin = (rng.integers(0, 2, 15).astype(float), rng.integers(0, 6, 15) / 5)  # a selector vs a 5-draw mean
    for a, b in (graded, coin):
        result = stats.sign_flip_test(a, b)
        assert result.exact and result.p_value == pytest.approx(_enumerated_p(a - b), abs=1e-12)
    assert stats.sign_flip_test(*coin).method == "exact (lattice)"


def test_sign_flip_on_binary_outcomes_is_mcnemar_and_samples_beyond_enumeration():
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2, 80).astype(bool), rng.integers(0, 2, 80).astype(bool)
    assert stats.sign_flip_test(a, b).p_value == pytest.approx(stats.mcnemar_exact(a, b).p_value)
    x, y = rng.random(40), rng.random(40) + 0.3
    sampled = stats.sign_flip_test(x, y, n_resamples=20_000)
    assert sampled.method == "Monte Carlo (20000)" and 0 < sampled.p_value < 0.01
    assert stats.sign_flip_test([1.0, 2.0], [1.0, 2.0]).p_value == 1.0  # no non-zero difference
    with pytest.raises(WorkbenchError):
        stats.sign_flip_test([1.0, np.nan], [0.0, 0.0])


def test_gap_closed_ci_reads_the_share_of_means_and_brackets_it():
    rng = np.random.default_rng(3)
    n = 200
    dense = (rng.random(n) < 0.8).astype(float)  # [example]
    splice = dense * (rng.random(n) < 0.5)  # the splice loses about half of dense's right answers
    method = np.where(rng.random(n) < 0.5, dense, splice)  # restores about half of what it lost
    share, low, high = gap_closed_ci(method, splice, dense)
    assert share == pytest.approx(share_of_gap_recovered(method.mean(), splice.mean(), dense.mean()))
    assert low < share < high and 0.25 < share < 0.75
    # the same bracket by hand: a percentile bootstrap over examples (the three outcomes resampled together)
    idx = np.random.default_rng(1).integers(0, n, size=(4000, n))
    by_hand = (method[idx].mean(1) - splice[idx].mean(1)) / (dense[idx].mean(1) - splice[idx].mean(1))
    assert low == pytest.approx(np.quantile(by_hand, 0.025), abs=0.05)
    assert high == pytest.approx(np.quantile(by_hand, 0.975), abs=0.05)
    few = gap_closed_ci(method[:40], splice[:40], dense[:40])
    assert few[2] - few[1] > high - low  # fewer examples, a wider interval


def test_gap_closed_ci_at_the_bounds_and_without_a_gap():
    dense, splice = np.array([1, 1, 1, 0, 1, 0.0]), np.array([0, 1, 0, 0, 0, 0.0])
    assert gap_closed_ci(dense, splice, dense) == (1.0, 1.0, 1.0)  # dense's outcomes close all of it
    assert gap_closed_ci(splice, splice, dense) == (0.0, 0.0, 0.0)
    assert all(math.isnan(x) for x in gap_closed_ci(dense, dense, dense))  # no gap: no share
    with pytest.raises(WorkbenchError, match="at least 2"):
        gap_closed_ci([1.0], [0.0], [1.0])
