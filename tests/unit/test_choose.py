"""`selectors.choose`: a selector's scores and a budget -> rows into the pool and the unit's record."""

import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.selectors.budget import budget_rows
from workbench.selectors import UnitOptions, choose, parse_selector, random_scores, select_rows

POOL = torch.arange(40, 440)  # [n_pool] absolute positions
SCORES = random_scores(len(POOL), seed=3)  # [n_pool]


@pytest.mark.parametrize("label, n_rows", [("none", 0), ("full", len(POOL))])
def test_the_reference_bounds_ignore_scores_and_budget(label, n_rows):
    rows, meta = choose(parse_selector(label), SCORES, 0.3, POOL)
    assert rows.tolist() == list(range(n_rows))
    assert meta == {"n_requested": n_rows, "n_units": n_rows, "skipped": False, "budget_matched": True}


@pytest.mark.parametrize("label", ["bcr", "bcr:single", "bcr:grow", "random:chunk"])
@pytest.mark.parametrize("budget", [0.05, 0.2, 0.5])
def test_a_selector_spends_the_budgets_rows_in_its_unit(label, budget):
    spec, units = parse_selector(label), UnitOptions(chunk_size=32)
    rows, meta = choose(spec, SCORES, budget, POOL, units)
    n_rows = budget_rows(budget, len(POOL))
    want = select_rows(SCORES, n_rows, spec.unit, chunk_size=32, tau=units.tau, max_span=units.grow_max_span)
    assert torch.equal(rows, want.rows) and rows.device.type == "cpu"
    assert meta == {"n_requested": n_rows, "n_units": want.n_units, "skipped": want.skipped,
                    "budget_matched": want.budget_matched and want.n_spent == n_rows}


def test_a_matched_coin_spends_as_many_rows_as_its_selector_elsewhere():
    own, _ = choose(parse_selector("bcr"), SCORES, 0.3, POOL)
    coin, meta = choose(parse_selector("coin:bcr"), SCORES, 0.3, POOL, coin_seed=7)
    assert len(coin) == len(own) and not torch.equal(coin, own) and meta["n_requested"] == budget_rows(0.3, len(POOL))


@pytest.mark.parametrize("label, units, kwargs, match", [
    ("coin:bcr", UnitOptions(), {}, "coin_seed"),
    ("bcr", UnitOptions(chunk_scope="passage"), {}, "signals="),
    ("epic", UnitOptions(), {}, "signals="),
])
def test_what_choose_cannot_do_without_is_refused(label, units, kwargs, match):
    with pytest.raises(WorkbenchError, match=match):
        choose(parse_selector(label), SCORES, 0.2, POOL, units, **kwargs)
