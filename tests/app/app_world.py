"""The app tests' run folders, built once per test session (`app_world` in tests/conftest.py):
small runs of every kind (small_runs.py), broken and reference-less copies, and examples whose
text holds markdown."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from apptest import LEAK
from small_runs import build_more_runs, build_runs, save_diagnosis
from workbench.tasks import Example


def build_world(base: Path) -> dict:
    """Folders: model/, runs/ (tiny, curve, fid, one, pipe, pipe-rep, one-budget, wide, pipe-all, gemma,
    killed, tiny-copy), bad/ (broken runs), noref/, empty/, leak/, long/."""
    world = build_more_runs(build_runs(base))
    base, runs = world["base"], world["runs"]
    bad = base / "bad"
    (bad / "broken").mkdir(parents=True)
    shutil.copy(runs / "tiny" / "manifest.json", bad / "broken" / "manifest.json")
    shutil.copytree(runs / "tiny", bad / "old")
    old = pd.read_parquet(bad / "old" / "outcomes.parquet").drop(columns=["flip_strict"])
    old.to_parquet(bad / "old" / "outcomes.parquet", index=False)
    shutil.copytree(runs / "tiny", runs / "tiny-copy")
    noref = base / "noref" / "bounds"  # a sweep without cacheblend and random: no default reference
    shutil.copytree(runs / "tiny", noref)
    outcomes = pd.read_parquet(noref / "outcomes.parquet")
    outcomes[~outcomes["selector"].isin(["cacheblend", "random"])].to_parquet(noref / "outcomes.parquet", index=False)
    (base / "empty").mkdir()
    leak = Example("leaky", ("Varek Olundi is coached by Mira Tessk.", f"Mira Tessk {LEAK} lives in Tressamor."),
                   f"Where does the coach live? {LEAK}", (f"Tressamor {LEAK}",))
    save_diagnosis(world["tiny_model"], leak, base / "leak" / "leaky")
    filler = " ".join(f"Mira Tessk walked to market number {i} and bought bread." for i in range(14))
    long = Example("long", ("Varek Olundi is coached by Mira Tessk. " + filler, "Mira Tessk lives in Tressamor. " + filler),
                   "Where does the coach live?", ("Tressamor",))
    save_diagnosis(world["tiny_model"], long, base / "long" / "long")
    return {**world, "bad": bad, "noref": noref.parent, "empty": base / "empty", "leak": base / "leak",
            "long": base / "long"}
