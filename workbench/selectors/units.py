"""Units of choice: how a per-row score and a row budget become the rows to recompute.

A selector gives one score per reused row (`scores [n]`, higher = recompute first, aligned
to the reused rows in context order). A unit spends a budget of `n_rows` rows on those
scores. Units never look at what the score means, so any score can be spent in any unit
(BCR §4.2 calls this the *unit of choice*: the value of choosing falls as it grows).

    single  the n_rows top-scoring rows (the token-level choice of CacheBlend-style methods)
    chunk   consecutive B-row chunks, each scored by the mean of its rows, counted by
            BCR App. B Algorithm 1 (skip rule; round(n_rows / B) best chunks) or by BCR
            Table 8's rule (max(1, round(share * n_chunks)) chunks, no skip)
    grow    regions grown from the best rows while the neighbours keep up with the seed

Every unit returns row indices into 0..n-1, sorted ascending, unique, int64.

`segments` (optional, all units) is a 1-D integer tensor [n] giving a segment id per row
(e.g. the passage each reused row came from); a segment is a maximal run of equal ids.
Chunks are cut inside each segment (the last chunk of each segment may be short) and grown
regions never cross a segment boundary, so a unit never straddles two sender caches. The
`single` unit only validates it. Without `segments`, rows 0..n-1 form one segment.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace

import torch

from workbench.checks import check_int
from workbench.errors import WorkbenchError

UNITS = ("single", "chunk", "grow")
CHUNK_COUNTINGS = ("algorithm1", "table8")
CHUNK_SCOPES = ("span", "passage")

__all__ = ["CHUNK_COUNTINGS", "CHUNK_SCOPES", "UNITS", "UnitChoice", "UnitOptions", "check_tau", "matched_coin",
           "random_scores", "select_rows"]


@dataclass(frozen=True)
class UnitOptions:
    """The knobs of the units: chunk size B, grow threshold tau and span cap, how chunks are
    counted, and whether chunks and regions may cross passage boundaries."""

    chunk_size: int = 64
    tau: float = 0.25
    grow_max_span: int | None = 64  # BCR Table 12: a grown region holds at most 64 rows (None: no cap)
    chunk_counting: str = "algorithm1"  # or "table8" (BCR Table 8: no skip, max(1, round(share * n_chunks)))
    chunk_scope: str = "span"  # "span": over the whole candidate span, as BCR; "passage": within each passage

    def checked(self) -> UnitOptions:
        """A validated copy (tau as a float); a one-line error naming the first knob out of range."""
        check_int(self.chunk_size, "chunk_size")
        if self.grow_max_span is not None:
            check_int(self.grow_max_span, "grow_max_span")
        if self.chunk_counting not in CHUNK_COUNTINGS:
            raise WorkbenchError(f"chunk_counting must be one of {', '.join(CHUNK_COUNTINGS)}, "
                                 f"got {self.chunk_counting!r}")
        if self.chunk_scope not in CHUNK_SCOPES:
            raise WorkbenchError(f"chunk_scope must be one of {', '.join(CHUNK_SCOPES)}, got {self.chunk_scope!r}")
        return replace(self, tau=check_tau(self.tau))


@dataclass(frozen=True)
class UnitChoice:
    """The rows a unit chose, as indices into the scored rows (`diagnosis.run.Selection` is the
    diagnosis's record of one selector's choice, in absolute positions).

    rows:          [k] int64, sorted ascending, unique, indices into the n scored rows
    unit:          "single" | "chunk" | "grow"
    n_requested:   the row budget asked for (n_rows)
    n_units:       units chosen: rows (single), chunks (chunk), regions (grow)
    skipped:       True when the unit declined to spend the budget (chunk skip rule)
    budget_matched: len(rows) == n_requested (chunk may over- or under-spend: it takes
                   whole chunks, round(n_rows / B) of them, and short chunks exist)
    spans:         the chosen units as half-open (start, end) row ranges, ascending; for
                   `single` adjacent rows are merged into one span
    """

    rows: torch.Tensor  # [k] int64
    unit: str
    n_requested: int
    n_units: int
    skipped: bool
    budget_matched: bool
    spans: tuple[tuple[int, int], ...] = ()

    @property
    def n_spent(self) -> int:
        """Rows actually chosen (may differ from n_requested for `chunk`)."""
        return int(self.rows.numel())


# ----------------------------------------------------------------------------- validation

def _as_int(value, name: str) -> int:
    if isinstance(value, bool):
        raise WorkbenchError(f"{name} must be an integer, got a bool ({value!r})")
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        return int(value.item())
    try:
        return operator.index(value)
    except TypeError:
        raise WorkbenchError(f"{name} must be an integer, got {type(value).__name__} ({value!r})") from None


def check_tau(tau) -> float:
    """The grow threshold as a float in (0, 1]; a one-line error otherwise."""
    try:
        value = float(tau)
    except (TypeError, ValueError):
        raise WorkbenchError(f"tau must be a number in (0, 1], got {tau!r}") from None
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise WorkbenchError(f"tau must be in (0, 1], got {tau!r}")
    return value


def _check_scores(scores) -> torch.Tensor:
    if not isinstance(scores, torch.Tensor):
        raise WorkbenchError(f"scores must be a 1-D torch.Tensor, got {type(scores).__name__}")
    if scores.dim() != 1:
        raise WorkbenchError(f"scores must be 1-D (one score per reused row), got shape {tuple(scores.shape)}")
    if scores.is_complex() or scores.dtype == torch.bool:
        raise WorkbenchError(f"scores must be real numbers, got dtype {scores.dtype}")
    s = scores.detach().to("cpu", torch.float64)
    n_nan = int(torch.isnan(s).sum())
    n_inf = int(torch.isinf(s).sum())
    if n_nan or n_inf:
        raise WorkbenchError(
            f"scores must be finite: {n_nan} NaN and {n_inf} infinite of {s.numel()} rows; "
            "fix the selector (or replace them, e.g. torch.nan_to_num) before choosing rows")
    return s


def _check_segments(segments, n: int) -> list[tuple[int, int]]:
    """Maximal runs of equal segment ids as half-open (start, end) spans covering 0..n-1."""
    if segments is None:
        return [(0, n)] if n else []
    if not isinstance(segments, torch.Tensor) or segments.dim() != 1:
        raise WorkbenchError("segments must be a 1-D torch.Tensor with one segment id per scored row")
    if segments.numel() != n:
        raise WorkbenchError(f"segments has {segments.numel()} entries but scores has {n}; give one id per row")
    if segments.is_floating_point() or segments.is_complex():
        raise WorkbenchError(f"segments must hold integer ids, got dtype {segments.dtype}")
    ids = segments.detach().to("cpu").tolist()
    spans, start = [], 0
    for i in range(1, n + 1):
        if i == n or ids[i] != ids[i - 1]:
            spans.append((start, i))
            start = i
    return spans


def _merge_runs(rows: list[int]) -> tuple[tuple[int, int], ...]:
    spans: list[tuple[int, int]] = []
    for r in rows:
        if spans and spans[-1][1] == r:
            spans[-1] = (spans[-1][0], r + 1)
        else:
            spans.append((r, r + 1))
    return tuple(spans)


# ----------------------------------------------------------------------------- units

def _order(s: torch.Tensor) -> list[int]:
    """Row indices by descending score, ties by lower index (stable sort)."""
    return torch.sort(s, descending=True, stable=True).indices.tolist()


def _single(s: torch.Tensor, n_rows: int):
    rows = sorted(_order(s)[:n_rows])
    return rows, len(rows), False, _merge_runs(rows)


def _chunk_grid(seg_spans, chunk_size: int) -> list[tuple[int, int]]:
    """Consecutive chunk_size-row chunks cut inside each segment (the last of each may be short)."""
    return [(a, min(a + chunk_size, end)) for start, end in seg_spans for a in range(start, end, chunk_size)]


def _chunk(s: torch.Tensor, n_rows: int, chunk_size: int, seg_spans, counting: str, share: float | None):
    n = s.numel()
    chunks = _chunk_grid(seg_spans, chunk_size)
    if counting == "table8":
        # BCR Table 8: no skip; max(1, round(share * n_chunks)) chunks (Python's round).
        k = min(len(chunks), max(1, round(share * len(chunks)))) if chunks else 0
    else:
        # BCR Algorithm 1, line 1: "if M < 2B or rho*M < B then serve unrepaired" (rho*M = n_rows)
        if n < 2 * chunk_size or n_rows < chunk_size:
            return [], 0, True, ()
        # Line 2: rows of the round(rho*M / B) highest-scoring chunks. Python's round() (half to
        # even: round(2.5) == 2, round(3.5) == 4), as the reference implementation's Python does.
        k = min(round(n_rows / chunk_size), len(chunks))
    if k == 0:
        return [], 0, False, ()
    means = torch.stack([s[a:b].mean() for a, b in chunks])
    picked = sorted(_order(means)[:k])
    spans = tuple(chunks[c] for c in picked)
    rows = [r for a, b in spans for r in range(a, b)]
    return rows, len(spans), False, spans


def _grow(s: torch.Tensor, n_rows: int, tau: float, seg_spans, max_span: int | None):
    n = s.numel()
    vals = s.tolist()
    seg_of = [0] * n
    for j, (a, b) in enumerate(seg_spans):
        for r in range(a, b):
            seg_of[r] = j
    chosen = [False] * n
    order = _order(s)
    cursor, spent, spans = 0, 0, []
    while spent < n_rows:
        while chosen[order[cursor]]:  # best unchosen row; spent < n_rows <= n, so one exists
            cursor += 1
        seed = order[cursor]
        chosen[seed] = True
        spent += 1
        lo = hi = seed
        # Threshold min(tau*s, s): tau*s for a positive seed; the seed itself when s <= 0.
        threshold = min(tau * vals[seed], vals[seed])
        seg = seg_of[seed]
        while spent < n_rows and (max_span is None or hi - lo + 1 < max_span):
            left = lo - 1 if lo > 0 and not chosen[lo - 1] and seg_of[lo - 1] == seg else None
            right = hi + 1 if hi + 1 < n and not chosen[hi + 1] and seg_of[hi + 1] == seg else None
            if left is None and right is None:
                break
            if right is None or (left is not None and vals[left] >= vals[right]):
                nxt = left  # better neighbour; a tie goes left (lower index)
            else:
                nxt = right
            if vals[nxt] < threshold:
                break
            chosen[nxt] = True
            spent += 1
            lo, hi = min(lo, nxt), max(hi, nxt)
        spans.append((lo, hi + 1))
    rows = [r for r in range(n) if chosen[r]]
    return rows, len(spans), False, tuple(sorted(spans))


def select_rows(scores: torch.Tensor, n_rows: int, unit: str = "single", *,
                chunk_size: int = UnitOptions.chunk_size, tau: float = UnitOptions.tau, segments: torch.Tensor | None = None,
                chunk_counting: str = "algorithm1", share: float | None = None,
                max_span: int | None = None) -> UnitChoice:
    """Choose which of the n scored rows to recompute with a budget of `n_rows` rows.

    scores: [n] real, finite; higher = recompute first. n_rows: 0..n.

    single: the n_rows highest-scoring rows; ties go to the lower index. Spends exactly
        n_rows.

    chunk (BCR App. B, Algorithm 1, B = chunk_size, M = n, rho*M = n_rows): partition the
        rows into consecutive B-row chunks (within each segment; the last may be short).
        Skip rule: if n < 2B or n_rows < B, nothing is chosen and `skipped=True` ("serve
        unrepaired"). Otherwise the round(n_rows / B) chunks with the highest mean row score
        are taken whole (Python's round, i.e. half to even; ties between chunk means go to
        the earlier chunk). The rows spent therefore need not equal n_rows (rounding, short
        chunks): see `budget_matched` and `n_spent`. With `chunk_counting="table8"` (BCR
        Table 8's rule, used by the unit-of-choice curve) there is no skip rule and the
        max(1, round(share * n_chunks)) best chunks are taken, `share` being the nominal
        budget fraction (required).

    grow (region growing, tau in (0, 1]): seed on the best unchosen row (ties: lower index),
        then extend the region one row at a time to whichever unchosen neighbour (left of
        its start, right of its end, same segment) scores higher (tie: left), as long as that
        neighbour's score is >= threshold, where threshold = tau * seed when seed > 0 and
        threshold = seed when seed <= 0 (in one formula: min(tau * seed, seed)). So once no
        positive score is left, a region only extends over neighbours that tie the seed
        exactly (the seed is the best remaining row, so no neighbour can exceed it); an
        all-zero or all-equal score vector therefore grows one region left to right from
        row 0. When a region cannot extend (threshold not met, segment edge, end of rows, or
        both neighbours already chosen), seed again. It stops the moment n_rows rows are
        chosen, truncating the last region, so it spends exactly n_rows. Terminates: every
        step chooses one new row or closes the region, and each region chooses its seed.
        Regions are disjoint but two may touch (a later region can grow up to an earlier
        one); they are counted separately in `n_units`. With `max_span`, a region stops
        growing at that many rows (BCR Table 12 caps regions at 64).

    Raises WorkbenchError on: non-tensor or non-1-D scores, NaN/inf scores (with counts),
    n_rows outside [0, n], unknown unit, chunk_size < 1, tau outside (0, 1], segments of
    the wrong shape or dtype, an unknown chunk counting or a Table 8 count without `share`.
    """
    if unit not in UNITS:
        raise WorkbenchError(f"unknown unit {unit!r}; valid units: {', '.join(UNITS)}")
    if chunk_counting not in CHUNK_COUNTINGS:
        raise WorkbenchError(f"unknown chunk counting {chunk_counting!r}; valid: {', '.join(CHUNK_COUNTINGS)}")
    if max_span is not None and (isinstance(max_span, bool) or not isinstance(max_span, int) or max_span < 1):
        raise WorkbenchError(f"max_span must be an integer >= 1 or None, got {max_span!r}")
    if chunk_counting == "table8" and (share is None or not 0.0 < float(share) <= 1.0):
        raise WorkbenchError(f"the Table 8 chunk count needs the budget share in (0, 1], got {share!r}")
    s = _check_scores(scores)
    n = s.numel()
    n_rows = _as_int(n_rows, "n_rows")
    if not 0 <= n_rows <= n:
        raise WorkbenchError(f"n_rows must be between 0 and the number of scored rows ({n}), got {n_rows}")
    chunk_size = _as_int(chunk_size, "chunk_size")
    if chunk_size < 1:
        raise WorkbenchError(f"chunk_size must be >= 1, got {chunk_size}")
    tau = check_tau(tau)
    seg_spans = _check_segments(segments, n)

    if n_rows == 0 and unit != "chunk":
        rows, n_units, skipped, spans = [], 0, False, ()
    elif unit == "single":
        rows, n_units, skipped, spans = _single(s, n_rows)
    elif unit == "chunk":
        rows, n_units, skipped, spans = _chunk(s, n_rows, chunk_size, seg_spans, chunk_counting, share)
    else:
        rows, n_units, skipped, spans = _grow(s, n_rows, tau, seg_spans, max_span)

    out = torch.tensor(rows, dtype=torch.int64, device=scores.device)
    return UnitChoice(rows=out, unit=unit, n_requested=n_rows, n_units=n_units,
                     skipped=skipped, budget_matched=len(rows) == n_rows, spans=spans)


def random_scores(n: int, seed: int) -> torch.Tensor:
    """[n] float32 uniform scores from a seeded torch.Generator: the coin selector.

    Same (n, seed) -> same scores on any machine's CPU generator; spend them in any unit
    (in `chunk`, the mean of random rows ranks chunks at random too).
    """
    n = _as_int(n, "n")
    seed = _as_int(seed, "seed")
    if n < 0:
        raise WorkbenchError(f"n must be >= 0, got {n}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand(n, generator=gen, dtype=torch.float32)


def _free_runs(taken: list[bool], seg_spans) -> list[tuple[int, int]]:
    """Maximal runs of rows not taken, each inside one segment, as half-open spans."""
    runs = []
    for start, end in seg_spans:
        lo = None
        for r in range(start, end + 1):
            free = r < end and not taken[r]
            if free and lo is None:
                lo = r
            elif not free and lo is not None:
                runs.append((lo, r))
                lo = None
    return runs


def matched_coin(selection: UnitChoice, n: int, seed: int, *, chunk_size: int = 64,
                 segments: torch.Tensor | None = None) -> UnitChoice:
    """The coin matched to `selection`: the same unit and the same units' sizes, placed by a seeded
    coin, so that it recomputes exactly as many rows as the selector it controls (BCR §4.3: "the
    chunks picked by coin at an identical budget").

    single  as many rows as `selection`, drawn uniformly without replacement;
    chunk   for each chunk length in `selection`, as many chunks of that length from the same grid
            (so a selector that took the short last chunk is matched row for row); a skipped
            selection is matched by a skipped coin;
    grow    regions of the same lengths, longest first, each at a uniform start among those that
            overlap no earlier region and stay inside one segment.
    """
    n = _as_int(n, "n")
    seg_spans = _check_segments(segments, n)
    gen = torch.Generator(device="cpu").manual_seed(_as_int(seed, "seed"))
    if selection.unit == "single":
        rows = sorted(torch.randperm(n, generator=gen)[:selection.n_spent].tolist())
        spans = _merge_runs(rows)
    elif selection.unit == "chunk":
        grid = _chunk_grid(seg_spans, _as_int(chunk_size, "chunk_size"))
        wanted: dict[int, int] = {}
        for a, b in selection.spans:
            wanted[b - a] = wanted.get(b - a, 0) + 1
        picked = []
        for length, count in sorted(wanted.items()):
            same = [c for c in grid if c[1] - c[0] == length]
            if count > len(same):
                raise WorkbenchError(f"the selection has {count} chunks of {length} rows; the grid of chunk size "
                                     f"{chunk_size} has {len(same)}: match the coin on the selection's own grid")
            picked += [same[i] for i in torch.randperm(len(same), generator=gen)[:count].tolist()]
        spans = tuple(sorted(picked))
        rows = [r for a, b in spans for r in range(a, b)]
    elif selection.unit == "grow":
        taken = [False] * n
        placed = []
        for length in sorted((b - a for a, b in selection.spans), reverse=True):
            starts = [a for lo, hi in _free_runs(taken, seg_spans) for a in range(lo, hi - length + 1)]
            if not starts:
                raise WorkbenchError(f"no free place for a region of {length} rows among {n}: the coin cannot "
                                     "match this selection")
            a = starts[int(torch.randint(len(starts), (1,), generator=gen))]
            taken[a:a + length] = [True] * length
            placed.append((a, a + length))
        spans = tuple(sorted(placed))
        rows = [r for a, b in spans for r in range(a, b)]
    else:
        raise WorkbenchError(f"unknown unit {selection.unit!r}; valid units: {', '.join(UNITS)}")
    device = selection.rows.device
    return UnitChoice(rows=torch.tensor(rows, dtype=torch.int64, device=device), unit=selection.unit,
                     n_requested=selection.n_requested, n_units=len(spans) if selection.unit != "single"
                     else len(rows), skipped=selection.skipped, budget_matched=len(rows) == selection.n_requested,
                     spans=spans)
