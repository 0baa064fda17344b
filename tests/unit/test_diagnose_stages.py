"""`diagnose` split into stages gives every table the one-function version gave, on every family.

The fixture (tests/fixtures/diagnose_stages.pkl.gz) holds the tables of one rich diagnosis per
family, taken with the one-function `diagnose` (main at 430e1bc) by

    PYTHONPATH=OLD_TREE:tests python tests/unit/test_diagnose_stages.py --write

Timing columns ("seconds") are compared by name and dtype, not by value."""

from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import FAMILIES, small_example, tiny_model
from workbench.diagnosis import diagnose

FIXTURE = Path(__file__).parent.parent / "fixtures" / "diagnose_stages.pkl.gz"
# drawn (random, coin:bcr), a restricted context (relaxkv and its coin), fixed (full, none), a spend hook (epic)
CONFIG = dict(selectors=("none", "full", "random", "bcr:grow", "coin:bcr", "relaxkv", "coin:relaxkv", "epic",
                         "cadence-grad"), budgets=(0.2, 0.5), coin_draws=2, pool="all", max_new_tokens=4)
TIMED = "seconds"


def tables_of(family: str) -> dict:
    """The tables and answers of one diagnosis of the small example on the tiny `family` model."""
    torch.set_num_threads(1)
    d = diagnose(tiny_model(family), small_example(n_passages=2), progress=False, layer_effects=True, **CONFIG)
    return {"tables": d.tables, "answers": d.answers, "context": d.context, "draft_ids": d.draft_ids,
            "n_repairs": d.timing.n_repairs}


def same_table(got: pd.DataFrame, want: pd.DataFrame, name: str) -> None:
    assert list(got.columns) == list(want.columns), name
    assert got.dtypes.equals(want.dtypes), (name, got.dtypes, want.dtypes)
    keep = [c for c in want.columns if c != TIMED]
    pd.testing.assert_frame_equal(got[keep], want[keep], check_exact=False, rtol=1e-5, obj=name)


@pytest.fixture(scope="module")
def expected() -> dict:
    with gzip.open(FIXTURE, "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_table_is_the_one_function_versions(family, expected):
    got, want = tables_of(family), expected[family]
    assert list(got["tables"]) == list(want["tables"])
    for name, table in want["tables"].items():
        same_table(got["tables"][name], table, f"{family}: {name}")
    for key in ("answers", "context", "draft_ids", "n_repairs"):
        assert got[key] == want[key], (family, key)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    with gzip.open(FIXTURE, "wb") as f:
        pickle.dump({family: tables_of(family) for family in FAMILIES}, f)
    print(FIXTURE, FIXTURE.stat().st_size)
