"""`kvwb summary`: per selector and budget, accuracy, flips, gap recovered and paired tests.

Paired over examples throughout: McNemar counts the discordant split b/c (b = the selector
right where the comparison is wrong) and is reported before its p value, as BCR does; p is
Holm-corrected within each budget, separately for the comparisons against the reference
selector and against dense. The reference defaults to the first of
`selectors.COMPARISON_PREFERENCE` the run has; a run with none of them has no reference
comparison, and the summary says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench import stats
from workbench.errors import WorkbenchError
from workbench.runstore import SweepRun
from workbench.selectors import comparison_reference, parse_selector


def resolve_reference(run: SweepRun, reference: str | None) -> str | None:
    """The reference a summary compares against: the one asked for (it must be in the run), or
    the default one present, or None."""
    labels = list(dict.fromkeys(run.outcomes["selector"]))
    if reference is None:
        return comparison_reference(labels)
    if reference not in labels:
        raise WorkbenchError(f"reference selector {reference!r} is not in this run; it has {', '.join(labels)}")
    return reference


def per_example(outcomes: pd.DataFrame) -> pd.DataFrame:
    """One row per (example, selector, unit, budget): a drawn control's draws collapsed.

    `em`, `f1`, `flip`, `flip_strict`, `n_recomputed`, `dense_logprob` are means over draws (BCR's
    coin mean); `em_major` and `flip_major` are the majority over draws (binary, for paired
    tests); `draws` counts them. A selector that is not drawn has one draw: the means are its
    outcome and the majorities equal it."""
    keys = ["example_id", "selector", "unit", "budget"]
    if "contains" not in outcomes:  # runs made before the third score
        outcomes = outcomes.assign(contains=np.nan)
    table = outcomes.groupby(keys, sort=False).agg(
        em=("em", "mean"), f1=("f1", "mean"), contains=("contains", "mean"), flip=("flip", "mean"),
        flip_strict=("flip_strict", "mean"),
        n_recomputed=("n_recomputed", "mean"), n_reused=("n_reused", "first"),
        dense_logprob=("dense_logprob", "mean"), draws=("em", "size")).reset_index()
    if "n_pool" in outcomes:
        table["n_pool"] = outcomes.groupby(keys, sort=False)["n_pool"].first().to_numpy()
    table["em_major"] = table["em"] > 0.5
    table["flip_major"] = table["flip"] > 0.5
    return table


def _draw_spread(outcomes: pd.DataFrame, label: str, budget: float, column: str) -> float:
    """Standard deviation over draws of the per-draw rate (0 for a selector that is not drawn)."""
    rows = outcomes[(outcomes["selector"] == label) & (outcomes["budget"] == budget)]
    if "draw" not in rows or rows["draw"].isna().all():
        return 0.0
    return float(rows.groupby("draw")[column].mean().std(ddof=1))


def summarize(run: SweepRun, reference: str | None = None) -> pd.DataFrame:
    """One row per (selector, budget) with intervals, flips, gap recovered and McNemar tests.

    Drawn controls (the coin) are collapsed per example (`per_example`): `em` and `flip_rate`
    are coin means, the Wilson intervals and the paired tests use the per-example majority, and
    `em_draw_sd` / `flip_draw_sd` give the spread between draws. McNemar is on exact match
    against the reference selector and against dense; p is Holm-corrected within each budget
    over every comparison of the family, those with no discordant pair included (p = 1).
    `reference` None picks the default one present (see `resolve_reference`); when the run has
    none, the `ref_*` columns are missing values."""
    examples = run.examples[["example_id", "dense_em", "spliced_em"]]
    out = per_example(run.outcomes).merge(examples, on="example_id")
    labels = list(dict.fromkeys(out["selector"]))
    reference = resolve_reference(run, reference)
    rows = []
    for budget, at_budget in out.groupby("budget", sort=True):
        ref = at_budget[at_budget["selector"] == reference].set_index("example_id")["em_major"]
        for label in labels:
            cell = at_budget[at_budget["selector"] == label].set_index("example_id")
            if cell.empty:
                continue
            n, em, flip_rate = len(cell), float(cell["em"].mean()), float(cell["flip"].mean())
            em_low, em_high = stats.wilson_interval(int(cell["em_major"].sum()), n)
            flip_low, flip_high = stats.wilson_interval(int(cell["flip_major"].sum()), n)
            dense_acc, splice_acc = cell["dense_em"].mean(), cell["spliced_em"].mean()
            vs_ref = (stats.mcnemar_exact(cell["em_major"], ref.reindex(cell.index).astype(bool))
                      if reference is not None else None)
            vs_dense = stats.mcnemar_exact(cell["em_major"], cell["dense_em"].astype(bool))
            rows.append({
                "selector": label, "unit": cell["unit"].iloc[0], "budget": budget, "n": n,
                "draws": int(cell["draws"].max()), "em": em, "em_low": em_low, "em_high": em_high,
                "em_draw_sd": _draw_spread(run.outcomes, label, budget, "em"), "f1": cell["f1"].mean(),
                "contains": cell["contains"].mean(),
                "flip_rate": flip_rate, "flip_low": flip_low, "flip_high": flip_high,
                "flip_draw_sd": _draw_spread(run.outcomes, label, budget, "flip"),
                "flip_strict_rate": cell["flip_strict"].mean(),
                "gap_recovered": stats.share_of_gap_recovered(em, splice_acc, dense_acc),
                "rows_per_example": cell["n_recomputed"].mean(),
                "share_recomputed": (cell["n_recomputed"] / cell.get("n_pool", cell["n_reused"])).mean(),
                "dense_logprob": cell["dense_logprob"].mean(),
                "ref_b": vs_ref.b if vs_ref else pd.NA, "ref_c": vs_ref.c if vs_ref else pd.NA,
                "ref_p": vs_ref.p_value if vs_ref else np.nan,
                "dense_b": vs_dense.b, "dense_c": vs_dense.c, "dense_p": vs_dense.p_value,
            })
    table = pd.DataFrame(rows)
    table.attrs["reference"] = reference
    for prefix in ("ref", "dense") if reference is not None else ("dense",):
        table[f"{prefix}_p_holm"] = np.nan
        for budget, idx in table.groupby("budget").groups.items():
            family = [i for i in idx if not (prefix == "ref" and table.at[i, "selector"] == reference)]
            if family:
                table.loc[family, f"{prefix}_p_holm"] = stats.holm(table.loc[family, f"{prefix}_p"].to_numpy())
    if reference is None:
        table["ref_p_holm"] = np.nan
    return table


@dataclass(frozen=True)
class Contrast:
    """One pre-registered paired contrast A vs B at one budget, uncorrected."""

    a: str
    b: str
    budget: float
    measure: str  # "flip": agreement with dense (the primary measure); "em": exact match with gold
    n: int
    b_count: int  # examples where A succeeds and B does not (McNemar's b)
    c_count: int  # examples where B succeeds and A does not
    p_value: float  # exact two-sided McNemar p
    rate_a: float  # A's flip rate (or EM), draws averaged
    rate_b: float
    difference: float  # rate_a - rate_b
    low: float  # 95% paired bootstrap interval of the difference
    high: float


def contrast(run: SweepRun, a: str, b: str, budget: float, measure: str = "flip") -> Contrast:
    """The exact McNemar test of A against B at `budget` on per-example outcomes (a drawn control
    by its majority over draws), with the difference of rates and a paired bootstrap interval."""
    if measure not in ("flip", "em"):
        raise WorkbenchError(f"measure must be 'flip' or 'em', got {measure!r}")
    table = per_example(run.outcomes)
    at = table[(table["budget"] - float(budget)).abs() < 1e-9]
    missing = [s for s in (a, b) if s not in set(at["selector"])]
    if missing:
        raise WorkbenchError(f"no outcomes for {', '.join(missing)} at budget {budget:g}; the run has "
                             f"{', '.join(dict.fromkeys(table['selector']))} at {sorted(set(table['budget']))}")
    side = {s: at[at["selector"] == s].set_index("example_id") for s in (a, b)}
    ids = side[a].index.intersection(side[b].index)
    col, rate = ("flip_major", "flip") if measure == "flip" else ("em_major", "em")
    success = {s: ~side[s].loc[ids, col] if measure == "flip" else side[s].loc[ids, col] for s in (a, b)}
    test = stats.mcnemar_exact(success[a].to_numpy(), success[b].to_numpy())
    ra, rb = side[a].loc[ids, rate].to_numpy(float), side[b].loc[ids, rate].to_numpy(float)
    diff, low, high = stats.paired_bootstrap_ci(ra, rb) if len(ids) >= 2 else (float(ra.mean() - rb.mean()),
                                                                                np.nan, np.nan)
    return Contrast(a, b, float(budget), measure, len(ids), test.b, test.c, test.p_value, float(ra.mean()),
                    float(rb.mean()), diff, low, high)


def parse_contrast(text: str) -> tuple[str, str, float]:
    """`A:B@b` (a selector label may itself hold ':', as in bcr:grow; split at the ':' that names
    two known selectors) -> (A, B, b)."""
    body, at, budget = str(text).rpartition("@")
    if not at:
        raise WorkbenchError(f"a contrast is written A:B@BUDGET (e.g. cadence-grad:cacheblend@0.2), got {text!r}")
    try:
        value = float(budget)
    except ValueError:
        raise WorkbenchError(f"the budget of contrast {text!r} is not a number") from None
    parts = body.split(":")
    for cut in range(1, len(parts)):
        left, right = ":".join(parts[:cut]), ":".join(parts[cut:])
        try:
            parse_selector(left), parse_selector(right)
        except WorkbenchError:
            continue
        return left, right, value
    raise WorkbenchError(f"contrast {text!r} does not name two selectors as A:B@BUDGET")


def attribution_table(run: SweepRun) -> pd.DataFrame:
    """Per example, the AtP check's Spearman rho for K+V, K only and V only (runs made with
    --attribution); empty when the run did not compute it."""
    rows = []
    for example_id in run.example_ids:
        doc = json.loads((run.diagnosis_folder(example_id) / "diagnosis.json").read_text())
        attribution = doc.get("attribution") or (  # schema 1 kept it in info
            {"correlations": doc["info"].get("attribution_correlations")} if "info" in doc else None)
        corr = (attribution or {}).get("correlations") or {}
        if corr:
            rows.append({"example_id": example_id, **{f"rho_{kind}": c["rho"] for kind, c in corr.items()},
                         "n_tokens": corr["kv"]["n"]})
    return pd.DataFrame(rows)


def tokens_to_target(summary: pd.DataFrame, examples: pd.DataFrame, share_of_dense: float = 0.9,
                     max_flip_rate: float = 0.2) -> pd.DataFrame:
    """Fewest rows recomputed per example at which each selector reaches a target.

    Targets: EM at least `share_of_dense` of dense EM; flip rate at most `max_flip_rate`.
    NaN where no budget of the run reaches it (CADENCE reports "297 tokens to reach 60%").
    """
    dense = examples["dense_em"].mean()
    rows = []
    for label, cells in summary.groupby("selector", sort=False):
        acc = cells[cells["em"] >= share_of_dense * dense]["rows_per_example"]
        flip = cells[cells["flip_rate"] <= max_flip_rate]["rows_per_example"]
        rows.append({"selector": label, f"rows_to_{share_of_dense:g}_dense_em": acc.min() if len(acc) else np.nan,
                     f"rows_to_flip_rate_{max_flip_rate:g}": flip.min() if len(flip) else np.nan})
    return pd.DataFrame(rows)
