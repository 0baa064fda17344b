"""`kvwb summary`: per selector and budget, accuracy, flips, gap recovered and paired tests.

Paired over examples throughout: McNemar counts the discordant split b/c (b = the selector
right where the comparison is wrong) and is reported before its p value, as BCR does (a drawn
control is tested on its mean over draws by the exact sign-flip test instead); p is
Holm-corrected within each budget, separately for the comparisons against the reference
selector and against dense. The reference defaults to the first of
`selectors.COMPARISON_PREFERENCE` the run has; a run with none of them has no reference
comparison, and the summary says so. The gap and the tests read exact match unless another
binary measure is asked for (`measure`: contains, retrieved), read against the examples'
`dense_<measure>` and `spliced_<measure>`.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from workbench import stats
from workbench.errors import WorkbenchError
from workbench.diagnosis.graded import GRADED_COLUMNS
from workbench.experiments.contrasts import GAP_MEASURES, Measure, get_measure, paired_test, predates
from workbench.runstore import SweepRun
from workbench.selectors import comparison_reference


def resolve_reference(run: SweepRun, reference: str | None) -> str | None:
    """The reference a summary compares against: the one asked for (it must be in the run), or
    the default one present, or None."""
    labels = list(dict.fromkeys(run.outcomes["selector"]))
    if reference is None:
        return comparison_reference(labels)
    if reference not in labels:
        raise WorkbenchError(f"reference selector {reference!r} is not in this run; it has {', '.join(labels)}")
    return reference


# Outcome columns averaged over a drawn control's draws (graded ones, and retrieved, ran_on,
# answer_tokens and the evidence's recall and precision, missing from older runs: NaN; the evidence
# columns are NaN too for an example without evidence in the pool, and their means skip it).
MEAN_COLUMNS = ("em", "f1", "contains", "flip", "flip_strict", "n_recomputed", "dense_logprob", *GRADED_COLUMNS,
                "retrieved", "ran_on", "answer_tokens", "evidence_recall", "evidence_precision")


def gap_measure(run: SweepRun, measure: str) -> Measure:
    """The measure a gap closed is read on, checked against the run: binary, higher is better, with
    its outcome column and the examples' dense and splice columns (a run made before: one line)."""
    m = get_measure(measure)
    if not (m.binary and m.higher_is_better) or m.column not in MEAN_COLUMNS:
        raise WorkbenchError(f"the gap closed is read on a binary measure where higher is better "
                             f"({', '.join(GAP_MEASURES)}); {measure!r} is not one")
    if m.column not in run.outcomes:
        raise predates(m.column, m)
    for side in ("dense", "spliced"):
        if f"{side}_{m.column}" not in run.examples:
            raise predates(f"{side}_{m.column}", m, "this run's examples table")
    return m


def gap_sides(run: SweepRun, m: Measure) -> pd.DataFrame:
    """Per example the measure for dense and the splice: example_id, dense_value, spliced_value."""
    return pd.DataFrame({"example_id": run.examples["example_id"].to_numpy(),
                         "dense_value": run.examples[f"dense_{m.column}"].astype(float).to_numpy(),
                         "spliced_value": run.examples[f"spliced_{m.column}"].astype(float).to_numpy()})


def per_example(outcomes: pd.DataFrame) -> pd.DataFrame:
    """One row per (example, selector, unit, budget): a drawn control's draws averaged (BCR's coin
    mean; no vote over draws). `draws` counts them; a selector that is not drawn has one, and its
    means are its outcome."""
    keys = ["example_id", "selector", "unit", "budget"]
    outcomes = outcomes.assign(**{c: np.nan for c in MEAN_COLUMNS if c not in outcomes})
    numeric = outcomes.astype({c: float for c in MEAN_COLUMNS})
    table = numeric.groupby(keys, sort=False).agg(
        **{c: (c, "mean") for c in MEAN_COLUMNS}, n_reused=("n_reused", "first"),
        draws=("em", "size")).reset_index()
    if "n_pool" in outcomes:
        table["n_pool"] = outcomes.groupby(keys, sort=False)["n_pool"].first().to_numpy()
    return table


def rate_interval(values) -> tuple[float, float]:
    """95% interval of a mean rate over examples: Wilson for 0/1 outcomes, else (a drawn control's
    per-example means over draws) a bootstrap interval over examples."""
    values = np.asarray(values, dtype=float)
    if np.isin(values, (0.0, 1.0)).all():
        return stats.wilson_interval(int(values.sum()), len(values))
    if len(values) < 2:
        return (np.nan, np.nan)
    return stats.paired_bootstrap_ci(values, np.zeros_like(values))[1:]


def _draw_spread(outcomes: pd.DataFrame, label: str, budget: float, column: str) -> float:
    """Standard deviation over draws of the per-draw rate (0 for a selector that is not drawn)."""
    rows = outcomes[(outcomes["selector"] == label) & (outcomes["budget"] == budget)]
    if "draw" not in rows or rows["draw"].isna().all():
        return 0.0
    return float(rows.groupby("draw")[column].mean().std(ddof=1))


def summarize(run: SweepRun, reference: str | None = None, measure: str = "em") -> pd.DataFrame:
    """One row per (selector, budget) with intervals, flips, gap recovered and McNemar tests.

    Drawn controls (the coin) are averaged over draws per example (`per_example`): rates are coin
    means, their intervals are bootstrap intervals over examples, and the paired tests against the
    reference and against dense are exact sign-flip tests on those means (b / c missing: they
    belong to one draw); `em_draw_sd` / `flip_draw_sd` give the spread between draws. A selector
    that is not drawn gets Wilson intervals and exact McNemar b / c and p. Tests are on exact match;
    p is Holm-corrected within each budget over every comparison of the family, those with no
    discordant pair included (p = 1). `reference` None picks the default one present (see
    `resolve_reference`); when the run has none, the `ref_*` columns are missing values. The
    graded outcomes against dense (`diagnosis.graded`) are averaged beside them. `measure` (default
    em; `GAP_MEASURES`, see `gap_measure`) is what the gap and the tests read, against the examples'
    `dense_<measure>` and `spliced_<measure>`; `table.attrs["measure"]` records it."""
    m = gap_measure(run, measure)
    col = m.column
    out = per_example(run.outcomes).merge(gap_sides(run, m), on="example_id")
    labels = list(dict.fromkeys(out["selector"]))
    reference = resolve_reference(run, reference)
    rows = []
    for budget, at_budget in out.groupby("budget", sort=True):
        ref = at_budget[at_budget["selector"] == reference].set_index("example_id")[col]
        for label in labels:
            cell = at_budget[at_budget["selector"] == label].set_index("example_id")
            if cell.empty:
                continue
            n, em, flip_rate = len(cell), float(cell["em"].mean()), float(cell["flip"].mean())
            value = cell[col].to_numpy(float)
            dense_acc, splice_acc = cell["dense_value"].mean(), cell["spliced_value"].mean()
            binary = int(cell["draws"].max()) == 1  # a coin's draw means take the sign-flip test
            vs_ref = (paired_test(value, ref.reindex(cell.index).to_numpy(float), binary)
                      if reference is not None else (pd.NA, pd.NA, np.nan, ""))
            vs_dense = paired_test(value, cell["dense_value"].to_numpy(float), binary)
            rows.append({
                "selector": label, "unit": cell["unit"].iloc[0], "budget": budget, "n": n,
                "draws": int(cell["draws"].max()), "em": em, **_interval("em", cell["em"]),
                "em_draw_sd": _draw_spread(run.outcomes, label, budget, "em"), "f1": cell["f1"].mean(),
                "contains": cell["contains"].mean(), "retrieved": cell["retrieved"].mean(),
                "ran_on": cell["ran_on"].mean(), "answer_tokens": cell["answer_tokens"].mean(),
                "evidence_recall": cell["evidence_recall"].mean(),
                "evidence_precision": cell["evidence_precision"].mean(),
                "n_with_evidence": int(cell["evidence_recall"].notna().sum()),
                "n_with_precision": int(cell["evidence_precision"].notna().sum()),  # those that recomputed a row
                "flip_rate": flip_rate, **_interval("flip", cell["flip"]),
                "flip_draw_sd": _draw_spread(run.outcomes, label, budget, "flip"),
                "flip_strict_rate": cell["flip_strict"].mean(),
                "gap_recovered": stats.share_of_gap_recovered(float(value.mean()), splice_acc, dense_acc),
                **_gap_interval(cell, col),
                "rows_per_example": cell["n_recomputed"].mean(),
                "share_recomputed": (cell["n_recomputed"] / cell.get("n_pool", cell["n_reused"])).mean(),
                "dense_logprob": cell["dense_logprob"].mean(),
                **{c: cell[c].mean() for c in GRADED_COLUMNS},
                **_interval("f1_to_dense", cell["f1_to_dense"]), **_interval("first_token_agree",
                                                                              cell["first_token_agree"]),
                "ref_b": _count(vs_ref[0]), "ref_c": _count(vs_ref[1]), "ref_p": vs_ref[2],
                "dense_b": _count(vs_dense[0]), "dense_c": _count(vs_dense[1]), "dense_p": vs_dense[2],
                "test": vs_dense[3],
            })
    table = pd.DataFrame(rows)
    table.attrs["reference"] = reference
    table.attrs["measure"] = m.name
    for prefix in ("ref", "dense") if reference is not None else ("dense",):
        table[f"{prefix}_p_holm"] = np.nan
        for budget, idx in table.groupby("budget").groups.items():
            family = [i for i in idx if not (prefix == "ref" and table.at[i, "selector"] == reference)]
            if family:
                table.loc[family, f"{prefix}_p_holm"] = stats.holm(table.loc[family, f"{prefix}_p"].to_numpy())
    if reference is None:
        table["ref_p_holm"] = np.nan
    return table


def _gap_interval(cell: pd.DataFrame, column: str) -> dict:
    """The paired bootstrap interval of the share of the measure's gap closed (NaN without a gap)."""
    if len(cell) < 2:
        return {"gap_recovered_low": np.nan, "gap_recovered_high": np.nan}
    _, low, high = stats.gap_closed_ci(cell[column].to_numpy(float), cell["spliced_value"].to_numpy(float),
                                       cell["dense_value"].to_numpy(float))
    return {"gap_recovered_low": low, "gap_recovered_high": high}


def _interval(prefix: str, values: pd.Series) -> dict:
    if values.isna().any():  # a run made before the graded outcomes
        return {f"{prefix}_low": np.nan, f"{prefix}_high": np.nan}
    low, high = rate_interval(values.to_numpy(float))
    return {f"{prefix}_low": low, f"{prefix}_high": high}


def _count(value):
    """A McNemar count, or a missing value where the test was not McNemar."""
    return pd.NA if value is None or value is pd.NA else int(value)


def run_caveats(examples: pd.DataFrame) -> dict:
    """What a reader must know before the numbers, from examples.parquet: examples computed under hooks
    (`hooked_examples`, `hooks`: the first one's record) and examples whose records held fewer
    distractors than `gold+K` asked (`distractors_short_examples`, `distractors_short_max`); the
    keys that apply only (the text summary's header lines, the CSV's columns)."""
    out = {}
    if "hooks" in examples and examples["hooks"].notna().any():
        hooked = examples["hooks"].dropna().astype(str)
        out.update(hooked_examples=len(hooked), hooks=hooked.iloc[0])
    if "distractors_short" in examples:
        short = pd.to_numeric(examples["distractors_short"], errors="coerce")
        if (short > 0).any():
            out.update(distractors_short_examples=int((short > 0).sum()), distractors_short_max=int(short.max()))
    return out


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

    Targets: the summary's measure (`attrs["measure"]`, EM by default) at least `share_of_dense` of
    dense's; flip rate at most `max_flip_rate`. NaN where no budget of the run reaches it (CADENCE
    reports "297 tokens to reach 60%").
    """
    m = get_measure(summary.attrs.get("measure", "em"))
    dense = examples[f"dense_{m.column}"].astype(float).mean()
    rows = []
    for label, cells in summary.groupby("selector", sort=False):
        acc = cells[cells[m.column] >= share_of_dense * dense]["rows_per_example"]
        flip = cells[cells["flip_rate"] <= max_flip_rate]["rows_per_example"]
        rows.append({"selector": label,
                     f"rows_to_{share_of_dense:g}_dense_{m.name}": acc.min() if len(acc) else np.nan,
                     f"rows_to_flip_rate_{max_flip_rate:g}": flip.min() if len(flip) else np.nan})
    return pd.DataFrame(rows)
