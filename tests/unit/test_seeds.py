"""One seed derivation: its values, its range, and the coin draws of recorded runs unchanged."""

from __future__ import annotations

import hashlib

import pytest

from workbench.errors import WorkbenchError
from workbench.experiments.unit_curve import random_seed_for
from workbench.pipeline.request import call_seed
from workbench.seeds import MAX_SEED, check_seed, derive_seed


def test_a_coin_draw_keeps_the_seed_recorded_runs_used():
    """Diagnose's coins drew from sha256("seed:id:draw") >> 1 before `derive_seed` existed; the
    stored sweeps (RESULTS 3.x, 8.x, 10.x) must resume onto the same rows."""
    for seed, eid, draw in [(0, "musique:2hop_13548", 0), (7, "ruler:niah_multikey:1:3", 4), (MAX_SEED, "x", 1)]:
        old = int.from_bytes(hashlib.sha256(f"{seed}:{eid}:{draw}".encode()).digest()[:8], "little") >> 1
        assert derive_seed(seed, eid, draw) == old


def test_derived_seeds_fit_torch_and_int64_and_differ_by_part():
    seeds = {derive_seed(s, "q", part, k) for s in (0, 1) for part in ("agent", "curve") for k in range(4)}
    assert len(seeds) == 16
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(0, 1, 2) != derive_seed(0, 2, 1)


def test_every_former_derivation_goes_through_derive_seed():
    assert call_seed(3, "q", 2) == derive_seed(3, "q", "agent", 2)
    assert random_seed_for(3, 1, 2) == derive_seed(3, "curve", 1, 2)


@pytest.mark.parametrize("bad", [-1, MAX_SEED + 1, 1.0, True, "3"])
def test_check_seed_refuses_in_one_line(bad):
    with pytest.raises(WorkbenchError, match="seed must be an integer from 0"):
        check_seed(bad)
