"""`diagnose` split into stages gives every table the one-function version gave, on every family.

The fixture (tests/fixtures/diagnose_stages.pkl.gz) holds the tables of one rich diagnosis per
family, taken with the one-function `diagnose` (main at 430e1bc) by

    PYTHONPATH=OLD_TREE:tests python tests/unit/test_diagnose_stages.py --write

Timing columns ("seconds") are compared by name and dtype, not by value."""

from __future__ import annotations

import gzip
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
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


# Absolute rounding floors of the columns that are differences of large float32 numbers: `actual` is
# a difference of answer log-probabilities of tens of nats (float32 spacing there ~2e-6; CI's AMD
# EPYC read up to 1.9e-5 away from the fixture's machine), `first_kl` a KL of two near-equal
# distributions (up to 3.5e-7 away). Every other float column: 1e-5 of its largest magnitude.
ROUNDING_FLOOR = {"actual": 1e-4, "first_kl": 1e-6}


def same_table(got: pd.DataFrame, want: pd.DataFrame, name: str) -> None:
    """Non-float columns exactly; float columns to rtol 1e-5 plus an absolute floor of float32
    rounding: 1e-5 of the column's largest magnitude (per signal in a long table), or the column's
    ROUNDING_FLOOR. A score that cancels to ~1e-9 on a column whose scale is ~3 is rounding, and its
    digits differ between CPUs (CI read 3e-8 where the fixture's machine read 5e-9)."""
    assert list(got.columns) == list(want.columns), name
    assert got.dtypes.equals(want.dtypes), (name, got.dtypes, want.dtypes)
    keep = [c for c in want.columns if c != TIMED]
    floats = list(want[keep].select_dtypes("floating").columns)
    exact = [c for c in keep if c not in floats]
    pd.testing.assert_frame_equal(got[exact], want[exact], check_exact=True, obj=name)
    groups = want.groupby("signal").groups.values() if "signal" in want.columns else [want.index]
    for rows in groups:
        for column in floats:
            w, g = want.loc[rows, column], got.loc[rows, column]
            scale = float(np.nan_to_num(w.abs().max()))
            atol = max(1e-5 * scale, ROUNDING_FLOOR.get(column, 0.0), 1e-8)
            pd.testing.assert_series_equal(g, w, check_exact=False, rtol=1e-5, atol=atol, obj=f"{name}.{column}")


@pytest.fixture(scope="module")
def expected() -> dict:
    with gzip.open(FIXTURE, "rb") as f:
        return pickle.load(f)


# Readings added since the fixture (2026-12-05: retrieval, run-on, evidence) only add tables and columns.
ADDED_TABLES = ("evidence_ranking", "evidence_attention")
ADDED_COLUMNS = {"tokens": ("evidence",), "outcomes": ("retrieved", "answer_tokens", "ran_on", "evidence_recall",
                                                       "evidence_precision")}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_table_is_the_one_function_versions(family, expected):
    got, want = tables_of(family), expected[family]
    assert list(got["tables"]) == [*want["tables"], *ADDED_TABLES]
    for name, table in want["tables"].items():
        added = list(ADDED_COLUMNS.get(name, ()))
        assert set(added) <= set(got["tables"][name].columns), name
        same_table(got["tables"][name].drop(columns=added), table, f"{family}: {name}")
    for key in ("draft_ids", "n_repairs"):
        assert got[key] == want[key], (family, key)
    for side in ("dense", "spliced"):  # the fixture's answers have no `retrieved`
        got_answer, want_answer = getattr(got["answers"], side), getattr(want["answers"], side)
        assert [getattr(got_answer, f) for f in ("text", "token_ids", "stopped", "em", "f1", "contains")] == \
            [getattr(want_answer, f) for f in ("text", "token_ids", "stopped", "em", "f1", "contains")], (family, side)
    # the context's rounding measurements are the CPU's digits: to 10%, the rest exactly
    rounding = {"layer0_error": {}, "rope_floor": (), "splice_tolerance": {}}
    assert got["context"].evidence is None  # the small example defines none
    assert replace(got["context"], **rounding) == replace(want["context"], **rounding), family
    for name in rounding:
        assert getattr(got["context"], name) == pytest.approx(getattr(want["context"], name), rel=0.1), name


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    with gzip.open(FIXTURE, "wb") as f:
        pickle.dump({family: tables_of(family) for family in FAMILIES}, f)
    print(FIXTURE, FIXTURE.stat().st_size)
