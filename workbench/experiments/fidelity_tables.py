"""The fidelity probe's summary tables: transfer per condition with Wilson intervals, the
floor and reference anchors, the sender-pool augmentation with its control-subtracted lift, and
the genuine mix's threshold as numbers with bootstrap intervals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from workbench.runstore.kinds import FIDELITY_TABLES as TABLES  # noqa: F401  (the folder's tables)
from workbench.stats import wilson_interval

KEY_COLUMNS = ["condition", "variant", "target_cos", "alpha", "layers", "rank", "pool"]
THRESHOLD_RESAMPLES = 2000


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
    return {"conditions": table, "anchors": anchors.reset_index(drop=True), "augmentation": augmentation,
            "thresholds": thresholds(answers)}


def _crossing(alphas: np.ndarray, curve: np.ndarray, level: float) -> float:
    """The alpha at which `curve` (over ascending `alphas`) first reaches `level`, linearly
    interpolated between grid points; NaN when it never does."""
    above = np.nonzero(curve >= level)[0]
    if not above.size:
        return math.nan
    i = int(above[0])
    if i == 0:
        return float(alphas[0])
    a0, a1, c0, c1 = alphas[i - 1], alphas[i], curve[i - 1], curve[i]
    return float(a0 + (level - c0) / (c1 - c0) * (a1 - a0)) if c1 != c0 else float(a1)


def _at(alphas: np.ndarray, values: np.ndarray, alpha: float) -> float:
    return float(np.interp(alpha, alphas, values)) if math.isfinite(alpha) else math.nan


def thresholds(answers: pd.DataFrame, seed: int = 0, resamples: int = THRESHOLD_RESAMPLES) -> pd.DataFrame:
    """Per genuine-mix variant: the alpha at which transfer crosses half of the reference's, and
    the mean key cosine there over the fact's rows and over all substituted rows, each with a
    95% bootstrap interval over examples (percentiles of `resamples` resamples)."""
    genuine = answers[answers["condition"] == "genuine"]
    reference = answers[answers["condition"] == "reference"].set_index("example")["correct"].astype(float)
    examples = reference.index.to_numpy()
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(examples), size=(resamples, len(examples)))  # [resample, example]
    rows = []
    for variant, part in genuine.groupby("variant", sort=False):
        wide = {col: part.pivot_table(index="example", columns="alpha", values=col, aggfunc="mean")
                .reindex(examples) for col in ("correct", "key_cos_fact", "key_cos")}
        alphas = wide["correct"].columns.to_numpy(float)  # ascending
        values = {col: w.to_numpy(float) for col, w in wide.items()}  # [example, alpha]

        def estimate(idx: np.ndarray) -> tuple[float, float, float]:
            level = 0.5 * reference.to_numpy()[idx].mean()
            alpha = _crossing(alphas, values["correct"][idx].mean(0), level)
            return (alpha, _at(alphas, values["key_cos_fact"][idx].mean(0), alpha),
                    _at(alphas, values["key_cos"][idx].mean(0), alpha))

        point = estimate(np.arange(len(examples)))
        boot = np.array([estimate(idx) for idx in draws])  # [resample, 3]
        low, high = np.nanpercentile(boot, 2.5, axis=0), np.nanpercentile(boot, 97.5, axis=0)
        rows.append({"variant": variant, "n": len(examples), "half_reference": 0.5 * float(reference.mean()),
                     "alpha": point[0], "alpha_low": low[0], "alpha_high": high[0],
                     "key_cos_fact": point[1], "key_cos_fact_low": low[1], "key_cos_fact_high": high[1],
                     "key_cos": point[2], "key_cos_low": low[2], "key_cos_high": high[2],
                     "never_crossed": float(np.isnan(boot[:, 0]).mean())})
    return pd.DataFrame(rows, columns=["variant", "n", "half_reference", "alpha", "alpha_low", "alpha_high",
                                       "key_cos_fact", "key_cos_fact_low", "key_cos_fact_high", "key_cos",
                                       "key_cos_low", "key_cos_high", "never_crossed"])
