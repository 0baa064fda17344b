"""The fidelity probe's summary tables: transfer per condition with Wilson intervals, the
floor and reference anchors, and the sender-pool augmentation with its control-subtracted lift."""

from __future__ import annotations

import math

import pandas as pd

from workbench.runstore.kinds import FIDELITY_TABLES as TABLES  # noqa: F401  (the folder's tables)
from workbench.stats import wilson_interval

KEY_COLUMNS = ["condition", "variant", "target_cos", "alpha", "layers", "rank", "pool"]


def summarize(answers: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """conditions (one row per condition), anchors (floor, reference), augmentation (per pool N)."""
    grouped = answers.groupby(KEY_COLUMNS, dropna=False, sort=False)
    table = grouped.agg(n=("correct", "size"), correct=("correct", "sum"), key_cos=("key_cos", "mean"),
                        value_cos=("value_cos", "mean"), key_cos_fact=("key_cos_fact", "mean"),
                        key_cos_floor=("key_cos_floor", "mean"), weight=("weight", "mean")).reset_index()
    table["correct"] = table["correct"].astype(int)
    table["transfer"] = table["correct"] / table["n"]
    bounds = [wilson_interval(int(c), int(n)) for c, n in zip(table["correct"], table["n"])]
    table["low"] = [b[0] for b in bounds]
    table["high"] = [b[1] for b in bounds]
    anchors = table[table["condition"].isin(["floor", "reference"])][["condition", "n", "correct", "transfer", "low", "high"]]
    anchor = dict(zip(anchors["condition"], anchors["transfer"]))
    aug = table[table["condition"] == "augment"]
    rows = []
    for size, part in aug.groupby("pool", sort=True):
        got = dict(zip(part["variant"], part["transfer"]))
        controls = {k: v for k, v in got.items() if k != "sender"}
        strongest = max(controls, key=controls.get) if controls else ""
        control = controls.get(strongest, math.nan)
        rows.append({"pool": int(size), "sender": got.get("sender", math.nan),
                     "masked_sender": got.get("masked_sender", math.nan),
                     "distractors_only": got.get("distractors_only", math.nan),
                     "strongest_control": strongest, "control": control,
                     "lift": got.get("sender", math.nan) - control,
                     "floor": anchor.get("floor", math.nan), "reference": anchor.get("reference", math.nan)})
    augmentation = pd.DataFrame(rows, columns=["pool", "sender", "masked_sender", "distractors_only",
                                               "strongest_control", "control", "lift", "floor", "reference"])
    return {"conditions": table, "anchors": anchors.reset_index(drop=True), "augmentation": augmentation}
