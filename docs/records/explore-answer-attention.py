"""The answer-attention pilot (results-log 2026-12-07-answer-attention-pilot-preregistration.md): dense's
recorded answer teacher-forced under dense, the splice, CADENCE-Grad's and CacheBlend's cells at b = 0.2, on
the first N examples of SmolLM2's 10.12w run; per example and cache, the attention mass on the passages
outside the evidence ("filler") and on the evidence, mean over answer tokens, layers and heads (and by layer
thirds). Writes OUT/pilot.parquet (one row per example, cache and layer band) and prints the test.

    KVWB_THREADS=1 .venv/bin/python docs/records/explore-answer-attention.py runs/study-10.12w-mv1024-smollm2 40 OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

import workbench as wb
from workbench.diagnosis.answer_attention import answer_attention
from workbench.diagnosis.reopen import cell_rows, reopen_context
from workbench.experiments.answer_sources import answer_sources
from workbench.runstore import load_sweep
from workbench.stats.bootstrap import paired_bootstrap_ci
from workbench.stats.paired import sign_flip_test

BUDGET, CELLS, STEPS = 0.2, ("cadence-grad", "cacheblend"), 48
BANDS = {"all": (0, 29), "0-9": (0, 9), "10-19": (10, 19), "20-29": (20, 29)}


def per_example(model, run, example_id: str) -> list[dict]:
    d = run.diagnosis(example_id)
    ctx = reopen_context(model, d)
    answer = list(d.answers.dense.token_ids)[:STEPS]
    rows = []
    for selector in CELLS:
        picked, mask = cell_rows(ctx, d, selector, BUDGET)
        t = answer_attention(ctx, answer, rows=picked, context=mask, max_steps=STEPS)
        t["cache"] = t["cache"].replace({"repaired": selector})
        if selector != CELLS[0]:
            t = t[t["cache"] == selector]  # dense and the splice once
        t["filler"] = t["same_passage"] + t["other_passages"]
        for band, (lo, hi) in BANDS.items():
            at = t[(t["layer"] >= lo) & (t["layer"] <= hi)].groupby("cache")[["filler", "evidence"]].mean()
            rows += [{"example_id": example_id, "cache": c, "band": band, **r} for c, r in at.to_dict("index").items()]
    return rows


def main(folder: str, n: int, out: str) -> None:
    run = load_sweep(folder)
    model = wb.load_model(run.manifest.model.get("source") or "smollm2-135m")
    ids = [str(i) for i in run.examples["example_id"].astype(str)][:n]
    table = pd.DataFrame([row for i in tqdm(ids, desc="examples") for row in per_example(model, run, i)])
    Path(out).mkdir(parents=True, exist_ok=True)
    table.to_parquet(Path(out) / "pilot.parquet")
    every = table[table["band"] == "all"].pivot(index="example_id", columns="cache", values=["filler", "evidence"])
    a, b = every[("filler", "cadence-grad")].to_numpy(), every[("filler", "cacheblend")].to_numpy()
    test = sign_flip_test(a, b)
    _, low, high = paired_bootstrap_ci(a, b)
    print(f"filler mass, cadence-grad vs cacheblend (n = {len(a)}): {a.mean():.4f} vs {b.mean():.4f}, "
          f"A higher {int((a > b).sum())} / B higher {int((a < b).sum())}, diff {np.mean(a - b):+.4f} "
          f"[{low:+.4f}, {high:+.4f}], sign-flip p = {test.p_value:.3g} ({test.method})")
    print(table.groupby(["band", "cache"])[["filler", "evidence"]].mean().round(4).to_string())
    sources = answer_sources(run)
    recites = sources[(sources["selector"] == "cadence-grad") & ((sources["budget"] - BUDGET).abs() < 1e-9)]
    recites = recites.set_index("example_id")["recites_context"].reindex(every.index)
    print("cadence-grad's filler mass by whether its own answer recites the filler:")
    print(every[("filler", "cadence-grad")].groupby(recites.to_numpy()).agg(["count", "mean"]).round(4).to_string())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
