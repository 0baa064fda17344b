"""Does a paired contrast differ between two settings (two runs on distinct examples)?

    kvwb summary RUN --measure retrieved --contrast cadence-grad:cacheblend@auc --against OTHER_RUN

Per run, each example's A - B on the quantity the contrast tests (`contrasts.paired_values`: the
area over the run's budget grid at `@auc`, a drawn control's mean over draws); the two runs'
samples are independent, so their difference of means takes the two-sided permutation test of
`stats.difference_of_means` with a bootstrap interval. Several contrasts given together are a
family: each p is also Holm-adjusted over it. At `@auc` both runs must share one budget grid, or
their areas would average over different budgets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from workbench import stats
from workbench.errors import WorkbenchError
from workbench.experiments.areas import AUC, budget_grid
from workbench.experiments.contrasts import paired_values, parse_family
from workbench.runstore import SweepRun


@dataclass(frozen=True)
class AcrossSettings:
    """A - B in one run against A - B in another: their mean paired differences and its test."""

    a: str
    b: str
    budget: float | str
    measure: str
    first: str  # the runs' folder names
    second: str
    n_first: int
    n_second: int
    effect_first: float  # mean of A - B over the first run's examples
    effect_second: float
    difference: float  # effect_first - effect_second
    low: float
    high: float
    p_value: float
    test: str
    p_holm: float = math.nan


def across_settings(first: SweepRun, second: SweepRun, a: str, b: str, budget: float | str,
                    measure: str) -> AcrossSettings:
    """A against B in `first` compared with A against B in `second` (see the module docstring)."""
    if budget == AUC and budget_grid(first.outcomes) != budget_grid(second.outcomes):
        raise WorkbenchError(f"the two runs' budget grids differ ({budget_grid(first.outcomes)} against "
                             f"{budget_grid(second.outcomes)}): their areas are not the same quantity")
    x, y = (paired_values(run, a, b, budget, measure) for run in (first, second))
    result = stats.difference_of_means(x.to_numpy(), y.to_numpy())
    return AcrossSettings(a, b, budget, measure, first.folder.name, second.folder.name, len(x), len(y),
                          float(x.mean()), float(y.mean()), result.difference, result.low, result.high,
                          result.p_value, f"permutation, {result.method}")


def across_family(first: SweepRun, second: SweepRun, texts, measure: str) -> list[AcrossSettings]:
    """Each contrast of `texts` compared between the runs, Holm-adjusted over them."""
    found = [across_settings(first, second, a, b, budget, measure) for a, b, budget in parse_family(texts)]
    adjusted = stats.holm([r.p_value for r in found]) if found else []
    return [replace(r, p_holm=float(p)) for r, p in zip(found, adjusted)]
