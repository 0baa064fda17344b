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

import numpy as np
import pandas as pd

from workbench import stats
from workbench.errors import WorkbenchError
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


def summarize(run: SweepRun, reference: str | None = None) -> pd.DataFrame:
    """One row per (selector, budget) with intervals, flips, gap recovered and McNemar tests.

    `reference` None picks the default one present (see `resolve_reference`); when the run has
    none, the `ref_*` columns are missing values."""
    out = run.outcomes.merge(run.examples[["example_id", "dense_em", "spliced_em"]], on="example_id")
    labels = list(dict.fromkeys(out["selector"]))
    reference = resolve_reference(run, reference)
    rows = []
    for budget, at_budget in out.groupby("budget", sort=True):
        ref = at_budget[at_budget["selector"] == reference].set_index("example_id")["em"]
        for label in labels:
            cell = at_budget[at_budget["selector"] == label].set_index("example_id")
            if cell.empty:
                continue
            n, correct, flips = len(cell), int(cell["em"].sum()), int(cell["flip"].sum())
            em_low, em_high = stats.wilson_interval(correct, n)
            flip_low, flip_high = stats.wilson_interval(flips, n)
            dense_acc, splice_acc = cell["dense_em"].mean(), cell["spliced_em"].mean()
            vs_ref = (stats.mcnemar_exact(cell["em"].astype(bool), ref.reindex(cell.index).astype(bool))
                      if reference is not None else None)
            vs_dense = stats.mcnemar_exact(cell["em"].astype(bool), cell["dense_em"].astype(bool))
            rows.append({
                "selector": label, "unit": cell["unit"].iloc[0], "budget": budget, "n": n,
                "em": correct / n, "em_low": em_low, "em_high": em_high, "f1": cell["f1"].mean(),
                "flip_rate": flips / n, "flip_low": flip_low, "flip_high": flip_high,
                "flip_strict_rate": cell["flip_strict"].mean(),
                "gap_recovered": stats.share_of_gap_recovered(correct / n, splice_acc, dense_acc),
                "rows_per_example": cell["n_recomputed"].mean(),
                "share_recomputed": (cell["n_recomputed"] / cell["n_reused"]).mean(),
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
            tested = [i for i in idx if table.at[i, f"{prefix}_b"] + table.at[i, f"{prefix}_c"] > 0
                      and not (prefix == "ref" and table.at[i, "selector"] == reference)]
            if tested:
                table.loc[tested, f"{prefix}_p_holm"] = stats.holm(table.loc[tested, f"{prefix}_p"].to_numpy())
    if reference is None:
        table["ref_p_holm"] = np.nan
    return table


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
