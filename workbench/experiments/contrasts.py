"""Pre-registered paired contrasts: A against B at one budget, on one measure, Holm over the family.

    kvwb summary RUN --measure flip --contrast cadence-grad:cacheblend@0.2 --contrast bcr:coin@0.2
    kvwb summary RUN --measure retrieved --contrast cadence-grad:cacheblend@auc

Every contrast is paired over the examples both selectors answered, and every difference and
its interval are computed on the quantity the test reads:

- two selectors, a binary measure: exact McNemar (b = A succeeds where B fails, c the reverse);
- two selectors, a graded measure: the sign-flip permutation test on per-example differences;
- against a drawn control (the coin): the sign-flip test of A against the coin's mean over its
  draws, and beside it the test against each draw and how many draws separate at 0.05, as BCR
  reports its five seeds (no majority vote over draws anywhere);
- `@auc`: per example the area of the measure over the run's budget grid (`areas`; a drawn
  control's mean over draws at each budget, then the area), by the exact sign-flip test.

`A:coin@b` names the coin matched to A (`coin:A`: A's unit, A's units' sizes, exactly A's rows).
A coin of another unit than A's is refused, with the matched one named. The contrasts given
together are the family: each p is reported raw and Holm-adjusted over it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from workbench import stats
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.experiments.areas import AUC, area_by_draw, budget_grid
from workbench.runstore import SweepRun
from workbench.selectors import parse_selector


@dataclass(frozen=True)
class Measure:
    """A per-cell outcome a contrast can test: its column, whether it is binary, and which way is
    better ("success" for a binary measure is `column == success`)."""

    name: str
    column: str
    binary: bool
    higher_is_better: bool
    description: str


MEASURES = {m.name: m for m in (
    Measure("flip", "flip", True, False, "output changed against dense (the scored answer, SQuAD-normalised)"),
    Measure("em", "em", True, True, "exact match with a gold answer"),
    Measure("contains", "contains", True, True, "a gold answer occurs in the output as whole words"),
    Measure("first_token", "first_token_agree", True, True, "the first answer token is dense's"),
    Measure("f1_to_dense", "f1_to_dense", False, True, "token F1 of the output against the dense answer"),
    Measure("dense_logprob_mean", "dense_logprob_mean", False, True,
            "mean log-probability per token of the dense answer under the cell"),
    Measure("agree_prefix", "agree_prefix", False, True, "leading answer tokens equal to dense's"),
    Measure("first_kl", "first_kl", False, False, "KL(dense || cell) of the first answer token, nats"),
    Measure("f1", "f1", False, True, "token F1 against a gold answer"),
    Measure("retrieved", "retrieved", True, True, "the task's retrieval measure (RULER string match, fractional "
            "over several values; word-boundary contains for QA)"),
    Measure("ran_on", "ran_on", True, False, "the answer runs on past where dense's answer ended"),
)}
GOLD_MEASURES = ("em", "contains", "f1", "retrieved")  # read against the examples' gold answers
# The binary measures, higher better, that the examples record for dense and the splice too
# (`dense_<m>`, `spliced_<m>`): a gap closed can be read on them (`summary.summarize`).
GAP_MEASURES = ("em", "contains", "retrieved")
# Differences of areas over a budget grid sit on a lattice of 1/D for D up to about this (a grid's
# trapezoid weights x coin draws x a fractional measure's values): the sign-flip test stays exact.
AREA_MAX_DENOMINATOR = 5040


def get_measure(name: str) -> Measure:
    if name not in MEASURES:
        raise WorkbenchError(f"unknown measure {name!r}; valid: {', '.join(MEASURES)}")
    return MEASURES[name]


def predates(column: str, measure: Measure, table: str = "this run") -> WorkbenchError:
    """The one-line refusal of a run made before `column` was recorded."""
    return WorkbenchError(f"{table} has no {column!r} column (measure {measure.name!r}); it was made before that "
                          "outcome was recorded: rerun it or choose another measure")


@dataclass(frozen=True)
class DrawTest:
    """A contrast against one draw of a drawn control."""

    draw: int
    b_count: int | None  # McNemar's b and c for a binary measure, else None
    c_count: int | None
    p_value: float


@dataclass(frozen=True)
class Contrast:
    """One pre-registered paired contrast A vs B at one budget on one measure, or over the run's
    budget grid (`budget == "auc"`: the area of the measure over `grid`)."""

    a: str
    b: str
    budget: float | str  # a fraction, or AUC
    measure: str
    test: str  # "McNemar exact" or the sign-flip test's method
    n: int
    b_count: int | None  # McNemar's b: examples where A succeeds and B does not (binary, no coin)
    c_count: int | None
    p_value: float  # two-sided, uncorrected
    rate_a: float  # the measure's mean for A (a drawn control: per-example means over draws)
    rate_b: float
    difference: float  # rate_a - rate_b: the mean of the per-example differences the test reads
    low: float  # 95% paired bootstrap interval of that difference
    high: float
    draws: tuple[DrawTest, ...] = ()  # against each draw of a drawn control
    p_holm: float = math.nan  # Holm-adjusted over the family it was given with
    grid: tuple[float, ...] = ()  # at AUC: the budgets the area spans

    @property
    def at(self) -> str:
        """Where it was read: `b = 0.2`, or `auc over 0.05-0.5`."""
        return f"{AUC} over {self.grid[0]:g}-{self.grid[-1]:g}" if self.budget == AUC else f"{self.budget:g}"

    @property
    def draws_separating(self) -> int:
        """Draws of the control whose own paired test gives p < 0.05."""
        return sum(d.p_value < 0.05 for d in self.draws)


def _check_control(a: str, b: str) -> None:
    """Refuse a pair whose drawn control does not belong to A: a coin matched to another selector, or
    a control of another unit (`random` draws single rows; `bcr` spends chunks)."""
    spec_a, spec_b = parse_selector(a), parse_selector(b)
    if spec_b.info.drawn and not spec_a.info.drawn:
        matched = f"coin:{spec_a.label}"
        if spec_b.matches is not None and spec_b.matches.label != spec_a.label:
            raise WorkbenchError(f"{b} is matched to {spec_b.matches.label}, not to {a}: use {a}:coin ({matched})")
        if spec_b.unit != spec_a.unit:
            raise WorkbenchError(f"{b} spends its rows in {spec_b.unit} units and {a} in {spec_a.unit} units: "
                                 f"the control of {a} is the coin of its own unit, {matched} ({a}:coin)")


def resolve_coin(a: str, b: str, labels) -> str:
    """B as the run labels it: `coin` becomes the coin matched to A; a coin of another unit than
    A's is refused, naming the matched one."""
    matched = f"coin:{parse_selector(a).label}"
    if b == "coin":
        if matched not in labels:
            raise WorkbenchError(f"the run has no {matched} (the coin matched to {a}); add it to --selectors "
                                 "and run again")
        return matched
    _check_control(a, b)
    return b


def parse_contrast(text: str, known=None) -> tuple[str, str, float | str]:
    """`A:B@b` or `A:B@auc` (a selector label may itself hold ':', as in bcr:grow; split at the ':'
    that names two known selectors, `coin` being the coin matched to A) -> (A, B, b or "auc").
    `known`: the run's selectors, named where A or B is no selector (else every registered one)."""
    body, at, budget = str(text).rpartition("@")
    if not at:
        raise WorkbenchError(f"a contrast is written A:B@BUDGET (e.g. cadence-grad:cacheblend@0.2), got {text!r}")
    try:
        value = AUC if budget.strip().lower() == AUC else float(budget)
    except ValueError:
        raise WorkbenchError(f"the budget of contrast {text!r} is neither a number nor {AUC!r}") from None
    if value != AUC and (not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise WorkbenchError(f"the budget of contrast {text!r} must be a fraction in [0, 1] or {AUC!r}")
    parts = body.split(":")
    for cut in range(1, len(parts)):
        left, right = ":".join(parts[:cut]), ":".join(parts[cut:])
        try:
            parse_selector(left)
            if right != "coin":
                parse_selector(right)
        except WorkbenchError:
            continue
        _check_pair(text, left, right)
        return left, right, value
    if len(parts) > 1:
        raise WorkbenchError(f"contrast {text!r}: {_not_a_selector(parts, known)}")
    raise WorkbenchError(f"contrast {text!r} does not name two selectors as A:B@BUDGET")


def _not_a_selector(parts: list[str], known) -> str:
    """Why no split of A:B names two selectors: the error of the cut whose left side parses with the
    longest left (its right side is the one that is none), else of a left side; a unit a selector
    cannot use before an unknown name, and `known` in place of the registry's list."""
    found = []  # (left side failed, -cut, message)
    for cut in range(1, len(parts)):
        left, right = ":".join(parts[:cut]), ":".join(parts[cut:])
        if left == "coin":
            found.append((True, -cut, "'coin' stands second, after the selector it controls (A:coin@BUDGET)"))
            continue
        try:
            parse_selector(left)
        except WorkbenchError as err:
            found.append((True, -cut, str(err)))
            continue
        try:
            if right != "coin":
                parse_selector(right)
        except WorkbenchError as err:
            found.append((False, -cut, str(err)))
    messages = [m for *_, m in sorted(found, key=lambda f: f[:2])]
    if not messages:
        return "does not name two selectors as A:B@BUDGET"
    first = next((m for m in messages if not m.startswith("unknown selector")), messages[0])
    if known is not None and first.startswith("unknown selector"):
        return first.split("; valid:")[0] + f"; this run's selectors: {', '.join(known)}"
    return first


def _check_pair(text: str, a: str, b: str) -> None:
    """Refuse a contrast whose drawn control comes first (its draws would be read as A's, and a
    control of another unit would pass unchecked) and one of a selector with itself; a control that
    is not A's is refused once the run is read (`resolve_coin`)."""
    spec_a = parse_selector(a)
    if spec_a.info.drawn:
        raise WorkbenchError(f"contrast {text!r} puts the drawn control {spec_a.label} first: write the selector "
                             f"first and its control second (B:{spec_a.label}@BUDGET)")
    if b != "coin" and parse_selector(b).label == spec_a.label:
        raise WorkbenchError(f"contrast {text!r} compares {spec_a.label} with itself")


def contrast_key(a: str, b: str, budget: float | str) -> tuple:
    """What a contrast tests, however it is spelled: the pair of labels (unordered: B:A is A:B's test
    with the sign turned) and the budget."""
    label_a = parse_selector(a).label
    label_b = f"coin:{label_a}" if b == "coin" else parse_selector(b).label
    return frozenset((label_a, label_b)), budget


def parse_family(texts) -> list[tuple[str, str, float | str]]:
    """Every contrast of a family parsed; one given twice (in any spelling or order) is refused: it
    would be tested twice and counted twice in the Holm correction."""
    parsed, seen = [], {}
    for text in texts:
        a, b, budget = parse_contrast(text)
        key = contrast_key(a, b, budget)
        if key in seen:
            raise WorkbenchError(f"contrast {text!r} is the same test as {seen[key]!r}; give each contrast once "
                                 f"(a family counts each test once in its Holm correction)")
        seen[key] = text
        parsed.append((a, b, budget))
    return parsed


def _cells(outcomes: pd.DataFrame, label: str, budget: float | str, measure: Measure) -> pd.DataFrame:
    """Examples x draws of one selector's measure at a budget, or of its area over the run's grid at
    AUC (one column for a selector that is not drawn)."""
    if measure.column not in outcomes:
        raise predates(measure.column, measure)
    if isinstance(budget, str):  # AUC
        return area_by_draw(outcomes[outcomes["selector"] == label], measure.column, budget_grid(outcomes))
    rows = outcomes[(outcomes["selector"] == label) & ((outcomes["budget"] - budget).abs() < 1e-9)]
    draw = rows["draw"].fillna(-1).astype(int) if "draw" in rows else pd.Series(-1, index=rows.index)
    values = rows[measure.column].astype(float)
    return pd.DataFrame({"example_id": rows["example_id"], "draw": draw, "value": values}).pivot(
        index="example_id", columns="draw", values="value")


def paired_test(a: np.ndarray, b: np.ndarray, binary: bool,
                lattice: int | None = None) -> tuple[int | None, int | None, float, str]:
    """(b, c, p, test) of one paired comparison of per-example values: McNemar where `binary` and both
    are 0/1, else the sign-flip test (a binary measure with fractional values, RULER's string match
    over several values, takes it too; `lattice`: its widest exact lattice, if not its own)."""
    if binary and np.isin(a, (0, 1)).all() and np.isin(b, (0, 1)).all():
        test = stats.mcnemar_exact(a.astype(bool), b.astype(bool))
        return test.b, test.c, test.p_value, "McNemar exact"
    result = stats.sign_flip_test(a, b, **({"max_denominator": lattice} if lattice else {}))
    return None, None, result.p_value, f"sign-flip {result.method}"


def paired_values(run: SweepRun, a: str, b: str, budget: float | str, measure: str) -> pd.Series:
    """Per example, A's value minus B's on the quantity `contrast` tests (a drawn control: its mean
    over draws; at AUC: the areas; a binary lower-is-better measure: its rate), indexed by example."""
    _, _, ids, ra, rb = _sides(run, a, b, budget, get_measure(measure))
    return pd.Series(ra - rb, index=ids)


def _sides(run: SweepRun, a: str, b: str, budget: float | str, m: Measure):
    """(A's and B's examples x draws tables, the shared example ids, A's and B's per-example rates)."""
    labels = set(run.outcomes["selector"])
    b = resolve_coin(a, b, labels)
    missing = [s for s in (a, b) if s not in labels]
    if missing:
        raise WorkbenchError(f"no outcomes for {', '.join(missing)}; the run has {', '.join(sorted(labels))}")
    over = isinstance(budget, str)
    if over and budget != AUC:
        raise WorkbenchError(f"a contrast's budget is a fraction in [0, 1] or {AUC!r}, got {budget!r}")
    budget = budget if over else float(budget)
    side = {s: _cells(run.outcomes, s, budget, m) for s in (a, b)}
    if any(t.empty for t in side.values()):
        grid = sorted(float(x) for x in set(run.outcomes["budget"]))
        nearest = "" if over or not grid else f" (the nearest: {min(grid, key=lambda x: abs(x - budget)):g})"
        where = "at every budget" if over else f"at budget {budget!r}"
        raise WorkbenchError(f"no outcomes {where} for {a} or {b}; the run's budgets are "
                             f"{', '.join(f'{x:g}' for x in grid)}{nearest}")
    ids = side[a].index.intersection(side[b].index)
    va, vb = side[a].loc[ids], side[b].loc[ids]
    if m.binary and not m.higher_is_better:  # a success is the absence of the event (no flip)
        va, vb = 1 - va, 1 - vb
    sign = -1.0 if m.binary and not m.higher_is_better else 1.0  # report the event's rate (flips), not its absence
    mean_a, mean_b = va.mean(axis=1).to_numpy(), vb.mean(axis=1).to_numpy()
    return va, vb, ids, sign * mean_a + (1 - sign) / 2, sign * mean_b + (1 - sign) / 2


def contrast(run: SweepRun, a: str, b: str, budget: float | str, measure: str = "flip") -> Contrast:
    """A against B at `budget` (or AUC) on `measure` (see the module docstring), uncorrected."""
    m = get_measure(measure)
    b = resolve_coin(a, b, set(run.outcomes["selector"]))
    over = isinstance(budget, str)
    va, vb, ids, ra, rb = _sides(run, a, b, budget, m)
    budget = budget if over else float(budget)
    mean_a, mean_b = va.mean(axis=1).to_numpy(), vb.mean(axis=1).to_numpy()
    drawn = va.shape[1] > 1 or vb.shape[1] > 1  # a coin: its mean over draws, by the sign-flip test
    if len(ids) < 2 and (drawn or over or not m.binary):
        raise WorkbenchError(f"{a} vs {b} at {budget if over else f'{budget:g}'} on {m.name}: a sign-flip test needs "
                             f"at least two examples both answered, the run has {len(ids)}")
    den = AREA_MAX_DENOMINATOR if over else None  # an area: the sign-flip test, exact on its lattice
    b_count, c_count, p, test = paired_test(mean_a, mean_b, m.binary and not drawn and not over, den)
    draws = ()
    if drawn:
        draws = tuple(DrawTest(int(d), *paired_test(va.iloc[:, min(i, va.shape[1] - 1)].to_numpy(),
                                                vb.iloc[:, min(i, vb.shape[1] - 1)].to_numpy(),
                                                m.binary and not over, den)[:3])
                      for i, d in enumerate(vb.columns if vb.shape[1] > 1 else va.columns))
    if len(ids) >= 2:
        diff, low, high = stats.paired_bootstrap_ci(ra, rb)
    else:
        diff, low, high = float(np.mean(ra - rb)), math.nan, math.nan
    return Contrast(a, b, budget, m.name, test, len(ids), b_count, c_count, p, float(ra.mean()),
                    float(rb.mean()), diff, low, high, draws, grid=budget_grid(run.outcomes) if over else ())


def _has_gold(examples: pd.DataFrame) -> bool:
    """Whether any example holds a gold answer (examples.parquet's `gold`: the answers joined by ' | ';
    a table without the column cannot say, and counts as holding one)."""
    if "gold" not in examples:
        return True
    return bool(examples["gold"].fillna("").astype(str).str.strip().ne("").any())


def contrast_family(run: SweepRun, texts, measure: str = "flip") -> list[Contrast]:
    """The contrasts given together, each with its Holm-adjusted p over the family."""
    found = [contrast(run, a, b, budget, measure) for a, b, budget in parse_family(texts)]
    if found and measure in GOLD_MEASURES and not _has_gold(run.examples):
        warnings.warn(WorkbenchWarning(f"the run's examples hold no gold answer, so {measure} is the same for every "
                                       f"selector and its contrasts cannot tell them apart; test flip or f1_to_dense "
                                       f"(against the dense answer) instead"), stacklevel=2)
    adjusted = stats.holm([c.p_value for c in found]) if found else []
    return [replace(c, p_holm=float(p)) for c, p in zip(found, adjusted)]
