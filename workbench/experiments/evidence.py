"""A sweep's evidence readings (`diagnosis.evidence`) over its examples.

    recall = evidence_recall_table(summary)       # selector x budget: mean evidence recall
    ranking, attention = evidence_tables(run)      # per scorer: mean AP; per cache and layer: mass
    by_layer = attention_by_layer(attention, 0.2)  # layer x cache (dense, splice, each selector at b)
    per_example(run, "evidence_attention")         # the attention table per example, before the means

The per-cell recall and precision are in every sweep's outcomes (`summarize` averages them over the
examples with evidence in the pool); the ranking and attention tables live in each example's
diagnosis folder and are read here (runs made before 2026-12-05, and records that did not keep
them, have none: empty tables).
"""

from __future__ import annotations

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.runstore import SweepRun

RANKING_SUMMARY = ("scorer", "kind", "n", "average_precision", "chance", "lift")
ATTENTION_SUMMARY = ("cell", "budget", "layer", "n", "mass_last", "mass_mean")
SPLICE_AND_DENSE = ("dense", "spliced", "none", "full")


def evidence_recall_table(summary: pd.DataFrame, column: str = "evidence_recall") -> pd.DataFrame:
    """Selector x budget of a `summarize` table's mean `column` (NaN where no example has evidence)."""
    if column not in summary:
        raise WorkbenchError(f"this summary has no {column!r}: the run was made before evidence was recorded")
    return summary.pivot(index="selector", columns="budget", values=column).reindex(
        list(dict.fromkeys(summary["selector"])))


def per_example(run: SweepRun, name: str) -> pd.DataFrame:
    """The per-example table `name` ("evidence_ranking", "evidence_attention") of every example that kept
    it, with its `example_id` (empty where none did)."""
    frames = []
    for example_id, folder in zip(run.examples["example_id"].astype(str), run.examples["folder"]):
        path = run.folder / "diagnoses" / str(folder) / f"{name}.parquet"
        if path.is_file():
            frames.append(pd.read_parquet(path).assign(example_id=example_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def evidence_tables(run: SweepRun) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per scorer: the mean average precision over examples, chance beside it and their ratio;
    per cache, budget and layer: the mean attention mass on the evidence, a drawn control's draws
    averaged per example first). Empty where no example kept them."""
    ranking, attention = per_example(run, "evidence_ranking"), per_example(run, "evidence_attention")
    if not ranking.empty:
        ranking = ranking.groupby(["scorer", "kind"], sort=False).agg(
            n=("average_precision", "count"), average_precision=("average_precision", "mean"),
            chance=("chance", "mean")).reset_index()
        ranking["lift"] = ranking["average_precision"] / ranking["chance"]
    if not attention.empty:
        keys = ["cell", "budget", "layer"]
        attention = attention.assign(budget=attention["budget"].astype(float))
        by_example = attention.groupby(["example_id", *keys], dropna=False, sort=False)[
            ["mass_last", "mass_mean"]].mean().reset_index()
        attention = by_example.groupby(keys, dropna=False, sort=False).agg(
            n=("mass_mean", "count"), mass_last=("mass_last", "mean"), mass_mean=("mass_mean", "mean")).reset_index()
    return (ranking.reindex(columns=RANKING_SUMMARY) if not ranking.empty else pd.DataFrame(columns=RANKING_SUMMARY),
            attention if not attention.empty else pd.DataFrame(columns=ATTENTION_SUMMARY))


def attention_by_layer(attention: pd.DataFrame, budget: float, mass: str = "mass_mean") -> pd.DataFrame:
    """Layer x cache of `evidence_tables`' attention: `mass` under dense, the splice and each selector
    at `budget` (columns in that order; `none` and `full`, the splice and dense again, left out as the
    figure leaves them), one row per layer; the examples each mean is over are the table's `n`."""
    if mass not in ("mass_mean", "mass_last"):
        raise WorkbenchError(f"mass is mass_mean or mass_last, not {mass!r}")
    budgets = attention["budget"].astype(float)
    at = attention[budgets.isna() | ((budgets - budget).abs() < 1e-9)]
    if at["budget"].notna().sum() == 0:
        held = sorted(float(b) for b in attention["budget"].dropna().unique())
        raise WorkbenchError(f"no repaired cell's attention at b = {budget:g}; the run's budgets: "
                             f"{', '.join(f'{b:g}' for b in held) or 'none'}")
    cells = list(dict.fromkeys(at["cell"]))  # `none` and `full` are the splice and dense again: left out
    cells = [c for c in ("dense", "spliced") if c in cells] + [c for c in cells if c not in SPLICE_AND_DENSE]
    table = at.pivot(index="layer", columns="cell", values=mass)
    return table.reindex(columns=cells).rename_axis(columns=None).reset_index()
