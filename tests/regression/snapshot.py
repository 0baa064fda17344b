"""A behaviour snapshot of a small sweep: answers, flips, rows per selector and budget, and the
summary's numbers. The files under tests/fixtures/regression/ were taken with the first version
(commit 61e5dbf) before the architecture rework; `test_regression.py` recomputes them.

The honest-readings rework (issue 13) changed four defaults on purpose; `LEGACY` sets them
back where a setting exists (the candidate pool, the grow cap, the chunk scope, one coin draw).
The coin is now seeded per example and the Holm family counts every comparison, so the
`random` rows and the Holm-corrected p values are no longer compared."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.summary import summarize
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import load_sweep

FIXTURES = Path(__file__).parent.parent / "fixtures" / "regression"
SELECTORS = ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad",
             "bcr", "bcr:grow", "bcr:single", "qattn")
SUMMARY_COLUMNS = ["selector", "budget", "n", "em", "flip_rate", "gap_recovered", "ref_b", "ref_c", "ref_p",
                   "ref_p_holm", "dense_b", "dense_c", "dense_p", "dense_p_holm"]
LEGACY = dict(pool="all", grow_max_span=None, chunk_scope="passage", coin_draws=1)
CHANGED_ON_PURPOSE = {"selectors": ("random",), "summary_columns": ("ref_p_holm", "dense_p_holm")}


def snapshot(model, golden: dict, out: Path) -> dict:
    """Run the sweep `golden` describes and return the same record."""
    config = SweepConfig(dataset=golden["dataset"], n=golden["n"], diagnose=DiagnoseConfig.of(
        selectors=tuple(golden["selectors"]), budgets=tuple(golden["budgets"]), seed=golden["seed"],
        max_new_tokens=golden["max_new_tokens"], attribution=False, **LEGACY))
    run_sweep(model, config, out, progress=False)
    run = load_sweep(out)
    examples = []
    for example_id in run.example_ids:
        d = run.diagnosis(example_id)
        sel = d.selections.set_index(["selector", "budget"])
        cells = [{"selector": r.selector, "budget": float(r.budget), "answer": r.answer, "flip": bool(r.flip),
                  "flip_strict": bool(r.flip_strict), "em": float(r.em), "dense_logprob": float(r.dense_logprob),
                  "positions": [int(p) for p in sel.loc[(r.selector, r.budget), "positions"]]}
                 for r in d.outcomes.itertuples(index=False)]
        examples.append({"id": example_id,
                         "dense": {"text": d.answers.dense.text, "token_ids": list(d.answers.dense.token_ids)},
                         "spliced": {"text": d.answers.spliced.text, "token_ids": list(d.answers.spliced.token_ids)},
                         "cells": cells})
    summary = json.loads(summarize(run, reference="cacheblend")[SUMMARY_COLUMNS].to_json(orient="records"))
    return {**{k: golden[k] for k in ("dataset", "n", "budgets", "selectors", "max_new_tokens", "seed")},
            "examples": examples, "summary": summary}
