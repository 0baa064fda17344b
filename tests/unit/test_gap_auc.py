"""Readings over the budget grid (issue 43): the share of the gap closed as an area, rows to a
target share with an interval, `A:B@auc` contrasts by the exact sign-flip test, the `retrieved`
measure, and runs made before it refused in one line."""

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import cli
from workbench.experiments.contrasts import contrast, contrast_family, paired_test, parse_contrast
from workbench.experiments.gap_auc import gap_auc_table, rows_to_target_table
from workbench.experiments.summary import summarize, tokens_to_target
from workbench.runstore import SweepRun, finished, new_manifest, write_manifest

GRID = (0.05, 0.1, 0.2, 0.3, 0.5)  # the study's grid: trapezoid weights / span are multiples of 1/18
IDS = [f"e{i}" for i in range(8)]
DRAWS = 5


def _retrieved(rng, shift: float) -> float:
    """A RULER string match over four values: a quarter at a time."""
    return float(np.clip(rng.integers(0, 5) / 4 + shift, 0, 1))


def make_run(new_columns: bool = True) -> SweepRun:
    """Eight examples at GRID: cadence, cacheblend and a five-draw random coin with fractional
    `retrieved` (quarters); em is retrieved == 1. Without `new_columns`: a run made before issue 43."""
    rng = np.random.default_rng(43)
    rows = []
    for label, shift, draws in (("cadence", 0.25, (None,)), ("cacheblend", 0.0, (None,)),
                                ("random", -0.25, range(DRAWS))):
        for ex in IDS:
            for draw in draws:
                for budget in GRID:
                    got = _retrieved(rng, shift)
                    rows.append({"example_id": ex, "selector": label, "unit": "single", "budget": budget,
                                 "draw": draw, "n_reused": 100, "n_recomputed": int(round(budget * 100))
                                 + int(rng.integers(0, 3)), "answer": "", "dense_answer": "",
                                 "flip": got < 1, "flip_strict": got < 1, "em": float(got == 1),
                                 "f1": got, "contains": got > 0, "dense_logprob": -1.0, "retrieved": got,
                                 "ran_on": bool(rng.integers(0, 2)), "answer_tokens": int(rng.integers(1, 9)),
                                 "seconds": 0.1})
    outcomes = pd.DataFrame(rows).astype({"draw": "Int64"})
    dense = [1.0, 1, 1, 0.75, 1, 1, 0.5, 1]
    spliced = [0.25, 0.5, 0, 0.75, 0.25, 1, 0, 0.5]
    examples = pd.DataFrame({"example_id": IDS, "folder": IDS, "question": "",
                             "dense_em": [float(d == 1) for d in dense], "spliced_em": [float(s == 1) for s in spliced],
                             "splice_flip": [True] * 8,
                             "dense_contains": [d > 0 for d in dense], "spliced_contains": [s > 0 for s in spliced],
                             "dense_retrieved": dense, "spliced_retrieved": spliced,
                             "spliced_ran_on": [False] * 8, "dense_answer_tokens": [3] * 8,
                             "spliced_answer_tokens": [4] * 8})
    if not new_columns:
        outcomes = outcomes.drop(columns=["retrieved", "ran_on", "answer_tokens"])
        examples = examples.drop(columns=[c for c in examples if "retrieved" in c or "ran_on" in c or "tokens" in c])
    manifest = {"failures": [], "model": {"name": "m"}, "args": {"dataset": "d"}}
    return SweepRun(Path("."), manifest, examples, outcomes)


def hand_areas(run: SweepRun, label: str, column: str = "retrieved") -> pd.Series:
    """Per example, by hand: the mean over draws at each budget, then sum of (b1 - b0)(x0 + x1) / 2
    over neighbouring budgets, over the span 0.45."""
    rows = run.outcomes[run.outcomes["selector"] == label]
    level = rows.groupby(["example_id", "budget"])[column].mean()
    out = {}
    for ex in IDS:
        x = [level[(ex, b)] for b in GRID]
        out[ex] = sum((GRID[j + 1] - GRID[j]) * (x[j] + x[j + 1]) / 2 for j in range(len(GRID) - 1)) / 0.45
    return pd.Series(out)


def enumerated_p(d) -> float:
    """Two-sided sign-flip p over all 2^n sign patterns (zeros included: their sign changes nothing)."""
    observed = abs(sum(d))
    hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_the_gap_auc_is_the_share_closed_by_the_per_example_areas_and_the_area_of_the_gap_curve():
    run = make_run()
    table = gap_auc_table(run, "retrieved").set_index("selector")
    dense, splice = run.examples["dense_retrieved"].to_numpy(), run.examples["spliced_retrieved"].to_numpy()
    for label in ("cadence", "cacheblend", "random"):
        a = hand_areas(run, label).reindex(IDS).to_numpy()
        by_hand = (a.mean() - splice.mean()) / (dense.mean() - splice.mean())
        row = table.loc[label]
        assert row["n"] == 8 and row["area"] == pytest.approx(a.mean()) and row["auc"] == pytest.approx(by_hand)
        assert (row["auc_low"], row["auc_high"]) == pytest.approx(wb.stats.gap_closed_ci(a, splice, dense)[1:])
        # the same number: the trapezoid area of the aggregate gap curve (summarize's, per budget) over its span
        curve = summarize(run, measure="retrieved").query("selector == @label").set_index("budget")["gap_recovered"]
        g = [curve[b] for b in GRID]
        area_of_curve = sum((GRID[j + 1] - GRID[j]) * (g[j] + g[j + 1]) / 2 for j in range(4)) / 0.45
        assert row["auc"] == pytest.approx(area_of_curve)
    assert table.attrs["measure"] == "retrieved" and table.attrs["grid"] == GRID
    em = gap_auc_table(run).set_index("selector")  # em by default, against dense_em and spliced_em
    a = hand_areas(run, "cadence", "em").to_numpy()
    d, s = run.examples["dense_em"].to_numpy(), run.examples["spliced_em"].to_numpy()
    assert em.loc["cadence", "auc"] == pytest.approx((a.mean() - s.mean()) / (d.mean() - s.mean()))


def test_rows_to_target_matches_tokens_to_target_and_brackets_it():
    run = make_run()
    summary = summarize(run, measure="retrieved")
    points = tokens_to_target(summary, run.examples, share_of_dense=0.5).set_index("selector")
    table = rows_to_target_table(run, "retrieved", share_of_dense=0.5).set_index("selector")
    for label in ("cadence", "cacheblend", "random"):
        point = points.loc[label, "rows_to_0.5_dense_retrieved"]
        row = table.loc[label]
        assert row["rows"] == (np.inf if pd.isna(point) else pytest.approx(point))
        assert row["rows_low"] <= row["rows"] <= row["rows_high"]
    # by hand for cadence: the fewest mean rows among budgets whose mean retrieved reaches half of dense's
    cad = run.outcomes[run.outcomes["selector"] == "cadence"].groupby("budget")[["retrieved", "n_recomputed"]].mean()
    target = 0.5 * run.examples["dense_retrieved"].mean()
    assert table.loc["cadence", "rows"] == pytest.approx(cad[cad["retrieved"] >= target]["n_recomputed"].min())


def test_a_fractional_binary_measure_takes_the_exact_sign_flip_test():
    a = np.array([1, 0.75, 0.5, 1, 0, 0.25, 1, 1])
    b = np.array([0.5, 0.75, 0, 1, 0.25, 0, 0.5, 1])
    b_count, c_count, p, test = paired_test(a, b, binary=True)
    assert b_count is None and c_count is None and test == "sign-flip exact (lattice)"
    assert p == pytest.approx(enumerated_p(a - b))
    assert paired_test(np.array([1.0, 1, 0]), np.array([0.0, 1, 0]), binary=True)[3] == "McNemar exact"


def test_summarize_reads_the_gap_and_the_tests_on_retrieved():
    run = make_run()
    table = summarize(run, measure="retrieved")
    assert table.attrs["measure"] == "retrieved"
    dense, splice = run.examples["dense_retrieved"].mean(), run.examples["spliced_retrieved"].mean()
    row = table.query("selector == 'cadence' and budget == 0.2").iloc[0]
    got = run.outcomes.query("selector == 'cadence' and budget == 0.2").set_index("example_id")["retrieved"]
    assert row["retrieved"] == pytest.approx(got.mean())
    assert row["gap_recovered"] == pytest.approx((got.mean() - splice) / (dense - splice))
    assert row["dense_p"] == pytest.approx(enumerated_p(got.reindex(IDS).to_numpy()
                                                        - run.examples["dense_retrieved"].to_numpy()))
    assert row["test"].startswith("sign-flip") and pd.isna(row["dense_b"])
    em = summarize(run)  # the default stays on exact match
    assert em.attrs["measure"] == "em" and not em["gap_recovered"].equals(table["gap_recovered"])
    assert {"retrieved", "ran_on", "answer_tokens"} <= set(em.columns)
    with pytest.raises(wb.WorkbenchError, match="binary measure where higher is better"):
        summarize(run, measure="f1_to_dense")


def test_a_run_made_before_the_columns_is_refused_in_one_line():
    old = make_run(new_columns=False)
    table = summarize(old)
    assert table[["retrieved", "ran_on", "answer_tokens"]].isna().all().all()  # empty, not zero
    for call in (lambda: summarize(old, measure="retrieved"), lambda: gap_auc_table(old, "retrieved"),
                 lambda: contrast(old, "cadence", "cacheblend", "auc", "retrieved"),
                 lambda: contrast(old, "cadence", "cacheblend", 0.2, "ran_on")):
        with pytest.raises(wb.WorkbenchError, match="made before that outcome was recorded") as err:
            call()
        assert "\n" not in str(err.value)
    one_budget = SweepRun(old.folder, old.manifest, old.examples, old.outcomes[old.outcomes["budget"] == 0.2])
    with pytest.raises(wb.WorkbenchError, match="at least two"):
        gap_auc_table(one_budget)


def test_auc_contrasts_parse_and_nonsense_is_refused():
    assert parse_contrast("cadence-grad:cacheblend@auc") == ("cadence-grad", "cacheblend", "auc")
    assert parse_contrast("bcr:grow:coin@AUC") == ("bcr:grow", "coin", "auc")
    assert parse_contrast("cadence-grad:cacheblend@0.2") == ("cadence-grad", "cacheblend", 0.2)
    for bad in ("cadence-grad:cacheblend@1.5", "cadence-grad:cacheblend@foo", "cadence-grad:cacheblend@"):
        with pytest.raises(wb.WorkbenchError, match="budget of contrast"):
            parse_contrast(bad)


def test_an_auc_contrast_is_the_exact_sign_flip_test_on_the_areas():
    run = make_run()
    c = contrast(run, "cadence", "cacheblend", "auc", "retrieved")
    d = (hand_areas(run, "cadence") - hand_areas(run, "cacheblend")).reindex(IDS).to_numpy()
    assert c.budget == "auc" and c.grid == GRID and c.at == "auc over 0.05-0.5" and c.n == 8
    assert c.test.startswith("sign-flip exact") and c.b_count is None
    assert c.p_value == pytest.approx(enumerated_p(d), abs=1e-12)
    assert c.difference == pytest.approx(d.mean())
    # against the coin: per example its mean over draws at each budget, then the area (on 1/360: a wide lattice)
    coin = contrast(run, "cadence", "random", "auc", "retrieved")
    d = (hand_areas(run, "cadence") - hand_areas(run, "random")).reindex(IDS).to_numpy()
    assert coin.test == "sign-flip exact (lattice)" and coin.p_value == pytest.approx(enumerated_p(d), abs=1e-12)
    assert len(coin.draws) == DRAWS and all(0 < t.p_value <= 1 and t.b_count is None for t in coin.draws)
    # flips (lower is better): the area of the flip rate, read as rates as at a budget
    flips = contrast(run, "cadence", "cacheblend", "auc", "flip")
    assert flips.rate_a == pytest.approx(hand_areas(run, "cadence", "flip").mean())
    family = contrast_family(run, ["cadence:cacheblend@auc", "cadence:random@auc"], "retrieved")
    assert [f.p_holm for f in family] == pytest.approx(list(wb.stats.holm([f.p_value for f in family])))


def test_the_wide_lattice_is_exact():
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 361, 12) / 360, rng.integers(0, 361, 12) / 360
    wide = wb.stats.sign_flip_test(a, b, max_denominator=5040)
    assert wide.method == "exact (lattice)" and wide.p_value == pytest.approx(enumerated_p(a - b), abs=1e-12)
    assert wb.stats.sign_flip_test(a, b).method == "exact (enumeration)"  # the default is unchanged


def write_folder(run: SweepRun, out: Path) -> Path:
    """The run as a sweep folder `kvwb summary` reads."""
    out.mkdir()
    write_manifest(out, finished(new_manifest("sweep", {"name": "m"}, {"dataset": "d"})))
    run.examples.to_parquet(out / "examples.parquet", index=False)
    run.outcomes.to_parquet(out / "outcomes.parquet", index=False)
    for ex in IDS:
        (out / "diagnoses" / ex).mkdir(parents=True)
        (out / "diagnoses" / ex / "diagnosis.json").write_text(json.dumps({}))
    return out


def test_kvwb_summary_prints_the_auc_contrast_and_the_grid_readings(tmp_path, capsys):
    folder = write_folder(make_run(), tmp_path / "run")
    assert cli.main(["summary", str(folder), "--measure", "retrieved", "--contrast", "cadence:cacheblend@auc",
                     "--contrast", "cadence:random@0.2"]) == 0
    printed = capsys.readouterr().out
    assert "the gap and the tests read retrieved" in printed
    assert "gap_auc" in printed and "rows_to_0.9_dense_retrieved" in printed
    assert "| cadence vs cacheblend | auc over 0.05-0.5 | retrieved | 8 | sign-flip exact (lattice) |" in printed
    assert "At auc: per example the area" in printed
    # a run made before issue 43 as `load_sweep` reads it: `retrieved` recovered from the stored answers,
    # a cell's `ran_on` and `answer_tokens` missing (its token ids were not kept)
    run = make_run()
    read_back = SweepRun(run.folder, run.manifest, run.examples,
                         run.outcomes.drop(columns=["ran_on", "answer_tokens"]))
    old = write_folder(read_back, tmp_path / "old")
    assert cli.main(["summary", str(old), "--measure", "ran_on", "--contrast", "cadence:cacheblend@auc"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no 'ran_on' column" in err and "made before" in err and len(err.splitlines()) == 1
    assert cli.main(["summary", str(old), "--measure", "retrieved", "--contrast", "cadence:cacheblend@auc"]) == 0
    printed = capsys.readouterr().out
    assert "gap_auc" in printed and "| ran_on |" not in printed  # a column the run lacks is not shown
