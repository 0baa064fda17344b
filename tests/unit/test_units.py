"""Layouts: single / chunk (BCR Algorithm 1) / grow. Fast, no model."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.selectors.units import UNITS, UnitChoice, random_scores, select_rows


def _rows(sel: UnitChoice) -> list[int]:
    return sel.rows.tolist()


def _contiguous_runs(rows: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and runs[-1][1] == r:
            runs[-1] = (runs[-1][0], r + 1)
        else:
            runs.append((r, r + 1))
    return runs


# ----------------------------------------------------------------------------- every layout

@pytest.mark.parametrize("layout", UNITS)
@pytest.mark.parametrize("n_rows", [0, 1, 7, 64, 100, 200, 300])
def test_rows_sorted_unique_in_range(layout, n_rows):
    scores = random_scores(300, seed=3) - 0.3  # mixed signs
    sel = select_rows(scores, n_rows, layout, chunk_size=16)
    rows = _rows(sel)
    assert sel.rows.dtype == torch.int64 and sel.rows.dim() == 1
    assert rows == sorted(set(rows))
    assert all(0 <= r < 300 for r in rows)
    assert sel.unit == layout and sel.n_requested == n_rows
    assert sel.budget_matched == (len(rows) == n_rows)
    assert sel.n_spent == len(rows)


@pytest.mark.parametrize("layout", UNITS)
def test_zero_budget_is_empty(layout):
    sel = select_rows(torch.arange(200.0), 0, layout)
    assert sel.rows.numel() == 0 and sel.n_units == 0 and sel.budget_matched


@pytest.mark.parametrize("layout", UNITS)
def test_full_budget(layout):
    scores = random_scores(256, seed=1)
    sel = select_rows(scores, 256, layout)
    assert _rows(sel) == list(range(256))


@pytest.mark.parametrize("layout", UNITS)
def test_empty_scores(layout):
    sel = select_rows(torch.zeros(0), 0, layout)
    assert sel.rows.numel() == 0


@pytest.mark.parametrize("layout", UNITS)
def test_layout_independent_of_score_scale(layout):
    """A layout only ranks: a positive affine map of a positive score changes nothing."""
    scores = random_scores(400, seed=5) + 0.1
    a = select_rows(scores, 100, layout, chunk_size=32)
    b = select_rows(scores * 7.0 + 3.0, 100, layout, chunk_size=32)
    if layout != "grow":  # grow's tau threshold is relative to the seed, not affine-invariant
        assert _rows(a) == _rows(b)
    c = select_rows(scores * 7.0, 100, layout, chunk_size=32)
    assert _rows(a) == _rows(c)


# ----------------------------------------------------------------------------- single

def test_single_picks_top_rows():
    scores = torch.tensor([0.1, 0.9, 0.3, 0.8, 0.0, 0.5])
    sel = select_rows(scores, 3, "single")
    assert _rows(sel) == [1, 3, 5]
    assert sel.n_units == 3 and not sel.skipped and sel.budget_matched


def test_single_ties_go_to_lower_index():
    scores = torch.tensor([1.0, 2.0, 2.0, 2.0, 1.0])
    assert _rows(select_rows(scores, 2, "single")) == [1, 2]
    assert _rows(select_rows(torch.zeros(10), 3, "single")) == [0, 1, 2]


def test_single_handles_negative_scores():
    scores = torch.tensor([-5.0, -1.0, -3.0, -0.5])
    assert _rows(select_rows(scores, 2, "single")) == [1, 3]


def test_rows_keep_device_and_input_unchanged():
    scores = torch.tensor([3.0, 1.0, 2.0])
    before = scores.clone()
    sel = select_rows(scores, 2, "single")
    assert torch.equal(scores, before)
    assert sel.rows.device == scores.device


# ----------------------------------------------------------------------------- chunk

def test_chunk_respects_chunk_size_and_count():
    scores = torch.zeros(256)
    scores[64:128] = 1.0  # chunk 1 best
    scores[192:256] = 0.5  # chunk 3 next
    sel = select_rows(scores, 128, "chunk", chunk_size=64)  # round(128/64) = 2 chunks
    assert _rows(sel) == list(range(64, 128)) + list(range(192, 256))
    assert sel.n_units == 2 and not sel.skipped and sel.budget_matched
    assert sel.spans == ((64, 128), (192, 256))


def test_chunk_rows_are_whole_chunks():
    scores = random_scores(1000, seed=7)
    sel = select_rows(scores, 200, "chunk", chunk_size=64)
    for a, b in _contiguous_runs(_rows(sel)):
        assert a % 64 == 0 and (b % 64 == 0 or b == 1000)


@pytest.mark.parametrize("n_rows, expected_chunks", [
    (64, 1), (95, 1), (96, 2), (100, 2), (159, 2), (160, 2), (161, 3), (224, 4), (288, 4)])
def test_chunk_count_is_python_round(n_rows, expected_chunks):
    """round(n_rows / B) with Python's round: 96/64 = 1.5 -> 2, 160/64 = 2.5 -> 2 (half to even),
    224/64 = 3.5 -> 4, 288/64 = 4.5 -> 4."""
    sel = select_rows(random_scores(1024, seed=0), n_rows, "chunk", chunk_size=64)
    assert sel.n_units == expected_chunks == round(n_rows / 64)
    assert sel.n_spent == 64 * expected_chunks
    assert sel.budget_matched == (64 * expected_chunks == n_rows)


def test_chunk_skip_rule_short_context():
    # n < 2B: skipped even with a full budget
    sel = select_rows(torch.ones(127), 127, "chunk", chunk_size=64)
    assert sel.skipped and sel.rows.numel() == 0 and sel.n_units == 0 and not sel.budget_matched
    # n == 2B: not skipped
    sel = select_rows(torch.ones(128), 64, "chunk", chunk_size=64)
    assert not sel.skipped and sel.n_spent == 64


def test_chunk_skip_rule_small_budget():
    # rho*M < B: skipped
    sel = select_rows(random_scores(1000, seed=2), 63, "chunk", chunk_size=64)
    assert sel.skipped and sel.rows.numel() == 0
    # rho*M == B: one chunk
    sel = select_rows(random_scores(1000, seed=2), 64, "chunk", chunk_size=64)
    assert not sel.skipped and sel.n_units == 1 and sel.n_spent == 64


def test_chunk_zero_budget_is_a_skip():
    sel = select_rows(torch.ones(512), 0, "chunk")
    assert sel.skipped and sel.rows.numel() == 0 and sel.budget_matched


def test_chunk_scores_by_mean():
    """A chunk with one huge row loses to a chunk that is uniformly high."""
    scores = torch.zeros(256)
    scores[10] = 50.0  # chunk 0: mean 50/64 ~ 0.78
    scores[128:192] = 1.0  # chunk 2: mean 1.0
    sel = select_rows(scores, 64, "chunk", chunk_size=64)
    assert _rows(sel) == list(range(128, 192))
    # with a bigger spike the spiky chunk's mean wins
    scores[10] = 100.0  # mean 1.5625
    sel = select_rows(scores, 64, "chunk", chunk_size=64)
    assert _rows(sel) == list(range(0, 64))


def test_chunk_last_short_chunk_scored_by_its_own_mean():
    scores = torch.zeros(200)  # chunks [0,64) [64,128) [128,192) [192,200)
    scores[192:200] = 1.0
    scores[0:64] = 0.9
    sel = select_rows(scores, 64, "chunk", chunk_size=64)
    assert _rows(sel) == list(range(192, 200))
    assert not sel.budget_matched and sel.n_spent == 8


def test_chunk_segments_cut_chunks_at_boundaries():
    segments = torch.tensor([0] * 100 + [1] * 100)  # chunks [0,64) [64,100) [100,164) [164,200)
    scores = torch.zeros(200)
    scores[64:100] = 1.0
    sel = select_rows(scores, 64, "chunk", chunk_size=64, segments=segments)
    assert _rows(sel) == list(range(64, 100))
    assert sel.spans == ((64, 100),)


# ----------------------------------------------------------------------------- grow

def test_grow_builds_contiguous_region_from_seed():
    scores = torch.tensor([0.0, 0.0, 0.5, 0.8, 1.0, 0.6, 0.4, 0.0, 0.0, 0.0])
    sel = select_rows(scores, 5, "grow", tau=0.25)
    assert _rows(sel) == [2, 3, 4, 5, 6]
    assert sel.n_units == 1 and sel.budget_matched and sel.spans == ((2, 7),)


def test_grow_respects_tau():
    scores = torch.tensor([0.0, 0.3, 1.0, 0.2, 0.0, 0.0, 0.9, 0.0])
    # tau = 0.25: from seed 2 (1.0), threshold 0.25: left 0.3 passes, then best neighbour
    # 0.2 (right) fails -> region [1, 3); next seed 6 (0.9), threshold 0.225: neighbours 0.0 fail
    sel = select_rows(scores, 3, "grow", tau=0.25)
    assert _rows(sel) == [1, 2, 6] and sel.n_units == 2
    # tau = 0.15: 0.2 passes too -> region [1, 4)
    sel = select_rows(scores, 3, "grow", tau=0.15)
    assert _rows(sel) == [1, 2, 3] and sel.n_units == 1
    # tau = 1: no neighbour below the seed passes -> single rows
    sel = select_rows(scores, 3, "grow", tau=1.0)
    assert _rows(sel) == [1, 2, 6] and sel.n_units == 3


def test_grow_extends_to_the_better_neighbour():
    scores = torch.tensor([0.0, 0.4, 0.6, 1.0, 0.5, 0.9, 0.0])
    # seed 3; neighbours 0.6 (L) vs 0.5 (R) -> L; then 0.4 (L) vs 0.5 (R) -> R; then 0.4 vs 0.9 -> R
    sel = select_rows(scores, 4, "grow")
    assert _rows(sel) == [2, 3, 4, 5]


def test_grow_spends_exactly_n_rows_truncating_last_region():
    scores = torch.tensor([0.0] * 5 + [1.0] * 10 + [0.0] * 5 + [0.9] * 10)
    sel = select_rows(scores, 13, "grow")
    assert sel.n_spent == 13 and sel.budget_matched
    assert _rows(sel) == list(range(5, 15)) + [20, 21, 22]
    assert sel.n_units == 2


@pytest.mark.parametrize("n_rows", [1, 17, 250, 512])
def test_grow_spends_exactly_on_random_scores(n_rows):
    scores = random_scores(512, seed=11)
    sel = select_rows(scores, n_rows, "grow")
    assert sel.n_spent == n_rows and sel.budget_matched
    assert sel.n_units == len(sel.spans)
    assert sum(b - a for a, b in sel.spans) == n_rows


def test_grow_regions_are_contiguous_spans():
    scores = random_scores(300, seed=4) ** 4  # peaky
    sel = select_rows(scores, 60, "grow", tau=0.25)
    covered = sorted(r for a, b in sel.spans for r in range(a, b))
    assert covered == _rows(sel)
    for a, b in sel.spans:
        assert b > a


def test_grow_all_equal_scores_one_region():
    sel = select_rows(torch.full((50,), 3.0), 20, "grow")
    assert _rows(sel) == list(range(20)) and sel.n_units == 1


def test_grow_all_zero_scores_terminates():
    sel = select_rows(torch.zeros(50), 20, "grow")
    assert _rows(sel) == list(range(20)) and sel.n_units == 1


def test_grow_negative_scores_terminate():
    # strictly decreasing negatives: no neighbour ties its seed -> every region is one row
    scores = -torch.arange(1.0, 41.0)
    sel = select_rows(scores, 10, "grow")
    assert _rows(sel) == list(range(10)) and sel.n_units == 10 and sel.budget_matched
    # random negatives, full budget
    sel = select_rows(-random_scores(100, seed=9) - 1.0, 100, "grow")
    assert _rows(sel) == list(range(100))


def test_grow_nonpositive_seed_extends_only_over_ties():
    scores = torch.tensor([-1.0, -2.0, -1.0, -1.0, -3.0])
    sel = select_rows(scores, 3, "grow")
    # seed 0 (-1): right neighbour -2 does not tie -> region [0,1); seed 2 (-1): right -1 ties
    assert _rows(sel) == [0, 2, 3] and sel.n_units == 2


def test_grow_regions_stay_inside_segments():
    scores = torch.ones(20)
    segments = torch.tensor([0] * 8 + [1] * 12)
    sel = select_rows(scores, 10, "grow", segments=segments)
    assert sel.spans == ((0, 8), (8, 10)) and sel.n_units == 2


# ----------------------------------------------------------------------------- random_scores

def test_random_scores_reproducible_and_seed_dependent():
    a, b, c = random_scores(500, 0), random_scores(500, 0), random_scores(500, 1)
    assert a.shape == (500,) and a.is_floating_point()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    for layout in UNITS:
        assert _rows(select_rows(a, 128, layout)) == _rows(select_rows(b, 128, layout))
    assert _rows(select_rows(a, 128, "single")) != _rows(select_rows(c, 128, "single"))


def test_random_scores_unaffected_by_global_rng():
    torch.manual_seed(123)
    a = random_scores(50, 7)
    torch.manual_seed(456)
    torch.rand(10)
    assert torch.equal(a, random_scores(50, 7))


def test_random_scores_validation():
    assert random_scores(0, 1).numel() == 0
    with pytest.raises(WorkbenchError):
        random_scores(-1, 0)
    with pytest.raises(WorkbenchError):
        random_scores(5, 1.5)


# ----------------------------------------------------------------------------- validation

def test_nan_scores_error_counts_them():
    scores = torch.tensor([1.0, float("nan"), 2.0, float("nan"), float("nan")])
    with pytest.raises(WorkbenchError, match="3 NaN"):
        select_rows(scores, 1)


def test_inf_scores_rejected():
    with pytest.raises(WorkbenchError, match="finite"):
        select_rows(torch.tensor([1.0, float("inf")]), 1)


@pytest.mark.parametrize("bad", [torch.zeros(2, 3), torch.tensor(1.0), [1.0, 2.0]])
def test_scores_must_be_1d_tensor(bad):
    with pytest.raises(WorkbenchError):
        select_rows(bad, 1)


@pytest.mark.parametrize("n_rows", [-1, 11])
def test_n_rows_out_of_range(n_rows):
    with pytest.raises(WorkbenchError, match="n_rows"):
        select_rows(torch.zeros(10), n_rows)


def test_n_rows_must_be_int():
    with pytest.raises(WorkbenchError, match="n_rows"):
        select_rows(torch.zeros(10), 2.5)


def test_unknown_layout_lists_valid_ones():
    with pytest.raises(WorkbenchError, match="single, chunk, grow"):
        select_rows(torch.zeros(10), 1, "blocks")


def test_chunk_size_must_be_positive():
    with pytest.raises(WorkbenchError, match="chunk_size"):
        select_rows(torch.zeros(10), 1, "chunk", chunk_size=0)


@pytest.mark.parametrize("tau", [0.0, -0.1, 1.5, float("nan")])
def test_tau_range(tau):
    with pytest.raises(WorkbenchError, match="tau"):
        select_rows(torch.zeros(10), 1, "grow", tau=tau)


def test_segments_validation():
    with pytest.raises(WorkbenchError, match="segments"):
        select_rows(torch.zeros(10), 1, "chunk", segments=torch.zeros(9, dtype=torch.long))
    with pytest.raises(WorkbenchError, match="segments"):
        select_rows(torch.zeros(10), 1, "grow", segments=torch.zeros(10))


def test_integer_scores_accepted():
    sel = select_rows(torch.tensor([1, 5, 3]), 1, "single")
    assert _rows(sel) == [1]


def test_selection_is_frozen():
    sel = select_rows(torch.zeros(4), 1)
    with pytest.raises(Exception):
        sel.layout = "chunk"  # type: ignore[misc]


def test_grow_regions_stop_at_the_span_cap():
    """BCR Table 12 caps a grown region at 64 rows; uniform scores would grow one region forever."""
    scores = torch.ones(300)
    capped = select_rows(scores, 200, "grow", max_span=64)
    assert capped.n_spent == 200 and all(b - a <= 64 for a, b in capped.spans) and capped.n_units == 4
    free = select_rows(scores, 200, "grow")
    assert free.n_units == 1 and free.spans == ((0, 200),)
    with pytest.raises(WorkbenchError, match="max_span"):
        select_rows(scores, 10, "grow", max_span=0)


# ----------------------------------------------------------------------------- the matched coin

@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("n_rows", [0, 5, 40, 64, 100, 150])
@pytest.mark.parametrize("with_segments", [False, True])
def test_matched_coin_recomputes_exactly_the_selections_rows_in_its_units(unit, n_rows, with_segments):
    from workbench.selectors.units import matched_coin

    n = 300
    segments = torch.tensor([0] * 70 + [1] * 130 + [2] * 100) if with_segments else None
    scores = random_scores(n, seed=11) ** 3  # uneven, so grow makes regions of several sizes
    sel = select_rows(scores, n_rows, unit, chunk_size=16, segments=segments, max_span=24)
    lengths = sorted(b - a for a, b in sel.spans)
    draws = [matched_coin(sel, n, seed, chunk_size=16, segments=segments) for seed in range(4)]
    for coin in draws:
        rows = _rows(coin)
        assert rows == sorted(set(rows)) and all(0 <= r < n for r in rows)
        assert coin.n_spent == sel.n_spent and coin.unit == unit and coin.skipped == sel.skipped
        if unit != "single":
            assert coin.n_units == sel.n_units and sorted(b - a for a, b in coin.spans) == lengths
        if unit == "chunk":  # on the selection's own grid
            grid = [(a, min(a + 16, e)) for s, e in ([(0, 70), (70, 200), (200, 300)] if with_segments
                                                     else [(0, n)]) for a in range(s, e, 16)]
            assert set(coin.spans) <= set(grid)
        if with_segments and unit != "single":  # no unit straddles two segments
            assert all(len(set(segments[a:b].tolist())) == 1 for a, b in coin.spans)
    if sel.n_spent:
        assert len({tuple(_rows(c)) for c in draws}) > 1  # a coin, not a copy


def test_matched_coin_is_seeded_and_matches_a_short_chunk_row_for_row():
    from workbench.selectors.units import matched_coin

    scores = torch.zeros(150)
    scores[140:] = 1.0  # the best chunk is the short last one (150 = 2 x 64 + 22)
    sel = select_rows(scores, 70, "chunk", chunk_size=64)
    assert sel.spans == ((128, 150),)
    a, b = (matched_coin(sel, 150, 7, chunk_size=64) for _ in range(2))
    assert torch.equal(a.rows, b.rows) and a.spans == ((128, 150),)  # the only 22-row chunk
    skipped = select_rows(scores, 30, "chunk", chunk_size=64)
    coin = matched_coin(skipped, 150, 7, chunk_size=64)
    assert skipped.skipped and coin.skipped and coin.n_spent == 0
