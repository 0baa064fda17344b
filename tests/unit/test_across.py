"""A contrast compared between two settings (issue 43.6): each run's per-example A - B (the area at
`@auc`), their difference of means by a two-sided permutation test that equals enumeration of
every split, a bootstrap interval, Holm over the family, and runs with other budget grids refused."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from test_gap_auc import hand_areas, make_run
from workbench import cli, stats
from workbench.errors import WorkbenchError
from workbench.experiments.across import across_family, across_settings
from workbench.experiments.contrasts import paired_values


def enumerated_two_sided(x, y) -> float:
    """2 min(P(T >= t), P(T <= t)) over every split of the pooled values into |x| and |y|."""
    pool, t = np.array([*x, *y]), np.mean(x) - np.mean(y)
    splits = []
    for chosen in itertools.combinations(range(len(pool)), len(x)):
        mask = np.zeros(len(pool), dtype=bool)
        mask[list(chosen)] = True
        splits.append(pool[mask].mean() - pool[~mask].mean())
    splits = np.array(splits)
    return min(1.0, 2 * min((splits >= t - 1e-12).mean(), (splits <= t + 1e-12).mean()))


def test_the_permutation_p_equals_enumeration_of_every_split():
    x, y = [0.1, 0.2, 0.35, 0.4, 0.05], [0.0, 0.0, 0.1, -0.2]
    result = stats.difference_of_means(x, y)
    assert result.method == "exact"
    assert result.p_value == pytest.approx(enumerated_two_sided(x, y), abs=1e-12)
    assert result.difference == pytest.approx(np.mean(x) - np.mean(y))
    assert result.low <= result.difference <= result.high


def test_too_few_values_are_refused():
    with pytest.raises(WorkbenchError, match="at least two"):
        stats.difference_of_means([1.0], [0.0, 1.0])


def test_a_runs_paired_values_are_its_per_example_areas():
    run = make_run()
    got = paired_values(run, "cadence", "cacheblend", "auc", "retrieved")
    want = hand_areas(run, "cadence") - hand_areas(run, "cacheblend")
    assert got.sort_index().to_numpy() == pytest.approx(want.sort_index().to_numpy())


def test_across_settings_compares_the_two_runs_paired_differences():
    first, second = make_run(), make_run()
    second = replace(second, outcomes=second.outcomes.assign(
        retrieved=np.where(second.outcomes["selector"] == "cacheblend", 1.0, second.outcomes["retrieved"])))
    r = across_settings(first, second, "cadence", "cacheblend", "auc", "retrieved")
    x = paired_values(first, "cadence", "cacheblend", "auc", "retrieved")
    y = paired_values(second, "cadence", "cacheblend", "auc", "retrieved")
    assert (r.n_first, r.n_second) == (8, 8)
    assert r.effect_first == pytest.approx(x.mean()) and r.effect_second == pytest.approx(y.mean())
    assert r.difference == pytest.approx(x.mean() - y.mean())
    assert r.p_value == pytest.approx(stats.difference_of_means(x.to_numpy(), y.to_numpy()).p_value)
    same = across_settings(first, make_run(), "cadence", "cacheblend", "auc", "retrieved")
    assert same.difference == 0.0 and same.p_value == 1.0


def test_a_family_is_holm_adjusted_and_other_grids_are_refused():
    first, second = make_run(), make_run()
    family = across_family(first, second, ["cadence:cacheblend@auc", "cadence:random@0.2"], "retrieved")
    assert [r.p_holm for r in family] == pytest.approx(list(stats.holm([r.p_value for r in family])))
    fewer = replace(second, outcomes=second.outcomes[second.outcomes["budget"] != 0.5])
    with pytest.raises(WorkbenchError, match="budget grids differ"):
        across_settings(first, fewer, "cadence", "cacheblend", "auc", "retrieved")


def test_against_needs_a_contrast(capsys, tmp_path):
    assert cli.main(["summary", str(tmp_path), "--against", str(tmp_path)]) != 0
    assert "give at least one --contrast" in capsys.readouterr().err
