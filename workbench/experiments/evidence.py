"""A sweep's evidence readings (`diagnosis.evidence`) over its examples.

    recall = evidence_recall_table(summary)       # selector x budget: mean evidence recall
    ranking, attention = evidence_tables(run)      # per scorer: mean AP; per cache and layer: mass

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


def evidence_recall_table(summary: pd.DataFrame, column: str = "evidence_recall") -> pd.DataFrame:
    """Selector x budget of a `summarize` table's mean `column` (NaN where no example has evidence)."""
    if column not in summary:
        raise WorkbenchError(f"this summary has no {column!r}: the run was made before evidence was recorded")
    return summary.pivot(index="selector", columns="budget", values=column).reindex(
        list(dict.fromkeys(summary["selector"])))


def _read(run: SweepRun, name: str) -> pd.DataFrame:
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
    ranking, attention = _read(run, "evidence_ranking"), _read(run, "evidence_attention")
    if not ranking.empty:
        ranking = ranking.groupby(["scorer", "kind"], sort=False).agg(
            n=("average_precision", "count"), average_precision=("average_precision", "mean"),
            chance=("chance", "mean")).reset_index()
        ranking["lift"] = ranking["average_precision"] / ranking["chance"]
    if not attention.empty:
        keys = ["cell", "budget", "layer"]
        attention = attention.assign(budget=attention["budget"].astype(float))
        per_example = attention.groupby(["example_id", *keys], dropna=False, sort=False)[
            ["mass_last", "mass_mean"]].mean().reset_index()
        attention = per_example.groupby(keys, dropna=False, sort=False).agg(
            n=("mass_mean", "count"), mass_last=("mass_last", "mean"), mass_mean=("mass_mean", "mean")).reset_index()
    return (ranking.reindex(columns=RANKING_SUMMARY) if not ranking.empty else pd.DataFrame(columns=RANKING_SUMMARY),
            attention if not attention.empty else pd.DataFrame(columns=ATTENTION_SUMMARY))
