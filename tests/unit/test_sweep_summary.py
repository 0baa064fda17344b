"""Sweeps into a run store (resume, idempotence, failures), the summary and the flip tables."""

import json
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from conftest import tiny_model
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments import flips
from workbench.experiments import sweep as sweep_module
from workbench.experiments.summary import summarize, tokens_to_target
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import SweepRun, load_sweep, new_manifest

DATA = f"jsonl:{Path(__file__).parents[1] / 'fixtures' / 'sample.jsonl'}"
DIAGNOSE = DiagnoseConfig(selectors=("none", "full", "random", "cacheblend", "densedev"), budgets=(0.2, 0.5),
                          max_new_tokens=4, attribution=False)
CONFIG = SweepConfig(dataset=DATA, n=3, diagnose=DIAGNOSE)
OUTCOME_COLUMNS = {"example_id", "selector", "unit", "budget", "draw", "pool", "n_pool", "n_spent_exact", "n_reused", "n_recomputed", "answer",
                   "dense_answer", "flip", "flip_strict", "em", "f1", "dense_logprob", "seconds"}


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def finished(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "r1"
    run_sweep(model, CONFIG, out, progress=False)
    return out


def test_a_run_writes_manifest_examples_outcomes_and_diagnoses(finished):
    manifest = json.loads((finished / "manifest.json").read_text())
    assert manifest["kind"] == "sweep" and manifest["status"] == "complete" and manifest["failures"] == []
    assert manifest["model"]["fingerprint"]["spec"] == "tiny-llama" and "torch" in manifest["versions"]
    assert manifest["start"] and manifest["end"]
    run = load_sweep(finished)
    assert len(run.examples) == 3 and OUTCOME_COLUMNS <= set(run.outcomes.columns)
    assert len(run.outcomes) == 3 * (4 + 5) * 2  # the coin is drawn five times per example and budget
    assert len(list((finished / "diagnoses").iterdir())) == 3
    assert run.examples["folder"].tolist() == ["q1", "q2", "q3"]


def test_a_store_that_cannot_be_written_ends_the_run_interrupted_with_the_error(model, tmp_path, monkeypatch):
    """An error outside any one example (here the disk, on the second save) ends the session:
    the error is raised, and the manifest says `interrupted` with it instead of staying `running`."""
    from workbench.runstore.writers import SweepStore

    real, saves = SweepStore.save, []

    def save(self, diagnosis, order):
        saves.append(diagnosis.example_id)
        if len(saves) == 2:
            raise OSError(28, "No space left on device")
        return real(self, diagnosis, order)

    monkeypatch.setattr(SweepStore, "save", save)
    with pytest.raises(OSError, match="No space left"):
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["end"] is not None
    assert manifest["details"]["error"] == "OSError: [Errno 28] No space left on device"
    assert manifest["details"]["n_done"] == 1 and load_sweep(tmp_path / "r").example_ids == ["q1"]


def test_running_a_finished_run_again_recomputes_nothing(model, finished, monkeypatch):
    monkeypatch.setattr(sweep_module, "diagnose", lambda *a, **k: pytest.fail("recomputed an example"))
    run_sweep(model, CONFIG, finished, progress=False)


def test_a_killed_run_resumes_where_it_stopped_and_matches_a_fresh_one(model, finished, tmp_path, monkeypatch):
    real, calls = sweep_module.diagnose, []

    def dies_on_second(model, example, *args, **kwargs):
        calls.append(example.id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(model, example, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "diagnose", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "error" not in manifest["details"]  # Ctrl-C is no error
    calls.clear()
    monkeypatch.setattr(sweep_module, "diagnose", lambda m, e, *a, **k: (calls.append(e.id), real(m, e, *a, **k))[1])
    run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    assert len(calls) == 2  # the first example was kept
    timing = ["seconds"]
    resumed = load_sweep(tmp_path / "r").outcomes.drop(columns=timing)
    fresh = load_sweep(finished).outcomes.drop(columns=timing)
    # first_kl of the full cell is float32 noise between two exact paths (~1e-7 nats), and it moves
    # with how the examples' prefills were batched; every other column is equal bit for bit.
    pd.testing.assert_frame_equal(resumed.drop(columns="first_kl"), fresh.drop(columns="first_kl"))
    assert (resumed["first_kl"] - fresh["first_kl"]).abs().max() < 1e-6


def test_other_arguments_on_an_existing_run_are_refused_with_the_differences(model, finished):
    other = SweepConfig(**{**CONFIG.__dict__, "diagnose": DIAGNOSE.with_(seed=7, budgets=(0.3,))})
    with pytest.raises(wb.WorkbenchError, match=r"diagnose\.budgets: \[0\.2, 0\.5\] in the run vs \[0\.3\] now; diagnose\.seed: 0 in the run vs 7 now"):
        run_sweep(model, other, finished, progress=False)


def test_a_crashing_example_is_recorded_and_the_run_goes_on(model, tmp_path, monkeypatch):
    real = sweep_module.diagnose

    def fails_on_q2(model, example, *args, **kwargs):
        if example.id == "q2":
            raise RuntimeError("boom")
        return real(model, example, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "diagnose", fails_on_q2)
    run_sweep(model, CONFIG, tmp_path / "r", progress=False)
    run = load_sweep(tmp_path / "r")
    assert run.n_failed == 1 and run.manifest.failures[0]["error"] == "RuntimeError: boom"
    assert sorted(run.examples["example_id"]) == ["q1", "q3"]


def test_bad_run_folders_and_sizes_get_clear_errors(model, tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text(json.dumps(new_manifest("curve", None, {})))
    with pytest.raises(wb.WorkbenchError, match="a 'curve' run, not a 'sweep' run"):
        run_sweep(model, CONFIG, tmp_path / "other", progress=False)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{not json")
    with pytest.raises(wb.WorkbenchError, match="corrupt"):
        load_sweep(tmp_path / "bad")
    with pytest.raises(wb.WorkbenchError, match="3"):
        run_sweep(model, SweepConfig(**{**CONFIG.__dict__, "n": 10}), tmp_path / "big", progress=False)
    with pytest.raises(wb.WorkbenchError, match="not a run folder"):
        load_sweep(tmp_path)


def hand_run() -> SweepRun:
    """Four examples with known outcomes: dense right on 0-2, splice right on 0 only."""
    examples = pd.DataFrame({"example_id": ["a", "b", "c", "d"], "dense_em": [1.0, 1, 1, 0],
                             "spliced_em": [1.0, 0, 0, 0], "splice_flip": [False, True, True, True]})
    rows = []
    table = {  # selector: (em per example, flip per example, rows)
        "none": ([1, 0, 0, 0], [0, 1, 1, 1], 0),
        "cacheblend": ([1, 1, 0, 0], [0, 0, 1, 1], 10),
        "cadence": ([1, 1, 1, 1], [0, 0, 0, 1], 10),
    }
    for label, (ems, fl, n_rows) in table.items():
        for ex, em, f in zip("abcd", ems, fl):
            rows.append({"example_id": ex, "selector": label, "unit": "single", "budget": 0.2, "n_reused": 50,
                         "n_recomputed": n_rows, "answer": "", "dense_answer": "", "flip": bool(f),
                         "flip_strict": bool(f), "em": float(em), "f1": float(em), "dense_logprob": -1.0,
                         "seconds": 0.1})
    return SweepRun(Path("."), {"failures": [], "model": {"name": "m"}, "args": {"dataset": "d"}}, examples,
                    pd.DataFrame(rows))


def test_summary_numbers_by_hand():
    table = summarize(hand_run(), reference="cacheblend").set_index("selector")
    cad = table.loc["cadence"]
    assert cad["em"] == 1.0 and cad["flip_rate"] == 0.25
    # vs cacheblend: cadence right & cacheblend wrong on c, d -> b = 2, c = 0; exact p = 2 * 0.5^2 = 0.5
    assert (cad["ref_b"], cad["ref_c"]) == (2, 0) and cad["ref_p"] == pytest.approx(0.5)
    # vs dense: cadence right where dense wrong on d -> b = 1, c = 0, p = 1
    assert (cad["dense_b"], cad["dense_c"]) == (1, 0)
    # gap recovered: (1.0 - 0.25) / (0.75 - 0.25) = 1.5; cacheblend (0.5 - 0.25) / 0.5 = 0.5
    assert cad["gap_recovered"] == pytest.approx(1.5)
    assert table.loc["cacheblend", "gap_recovered"] == pytest.approx(0.5)
    # its paired bootstrap interval, from the same three columns per example
    assert tuple(table.loc["cacheblend", ["gap_recovered_low", "gap_recovered_high"]]) == pytest.approx(
        wb.stats.gap_closed_ci([1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0])[1:])
    assert table.loc["none", ["gap_recovered", "gap_recovered_low", "gap_recovered_high"]].tolist() == [0, 0, 0]
    # Holm over the two tested comparisons against cacheblend at this budget (none: b=0,c=1 p=1; cadence p=0.5)
    assert cad["ref_p_holm"] == pytest.approx(1.0)
    low, high = table.loc["none", ["em_low", "em_high"]]
    assert low < 0.25 < high


def test_tokens_to_target_and_flip_tables():
    run = hand_run()
    targets = tokens_to_target(summarize(run), run.examples, share_of_dense=1.0, max_flip_rate=0.3).set_index("selector")
    assert targets.loc["cadence"].tolist() == [10.0, 10.0]
    assert pd.isna(targets.loc["none"].iloc[0])
    matrix = flips.flip_matrix(run.outcomes, 0.2)
    assert matrix.loc["b"].tolist() == [True, False, False]
    res = flips.rescues(run.outcomes, 0.2).set_index("selector")
    assert res.loc["cadence", "rescued_examples"] == ["b", "c"] and res.loc["cacheblend", "rescued"] == 1
    overlap = flips.rescue_overlap(run.outcomes, 0.2)
    assert overlap.loc["cadence", "cacheblend"] == 1 and overlap.loc["cadence", "cadence"] == 2
    rates = flips.flip_rates(run.outcomes).set_index("selector")
    assert rates.loc["none", "flips"] == 3


def test_rescues_against_a_coin_count_its_draws_never_a_vote():
    """Against a drawn baseline an example counts by the share of the baseline's draws that flip:
    a coin flipping on 1 of 3 draws is not read as "not flipped" (the majority), nor as flipped."""
    run = hand_run()
    coin = [{"example_id": ex, "selector": "random", "unit": "single", "budget": 0.2, "draw": d, "n_reused": 50,
             "n_recomputed": 10, "answer": "", "dense_answer": "", "flip": f, "flip_strict": f, "em": float(not f),
             "f1": float(not f), "dense_logprob": -1.0, "seconds": 0.1}
            for ex, flips_by_draw in zip("abcd", ([True, False, False], [True, True, True], [False] * 3, [True] * 3))
            for d, f in enumerate(flips_by_draw)]
    outcomes = pd.concat([run.outcomes.assign(draw=pd.NA), pd.DataFrame(coin)], ignore_index=True)
    res = flips.rescues(outcomes, 0.2, baseline="random").set_index("selector")
    # cadence flips only on d: it rescues a (1/3 of the coin's draws flip there), b (all) and nothing on c
    assert res.loc["cadence", "rescued"] == pytest.approx(1 / 3 + 1)
    assert res.loc["cadence", "rescued_examples"] == ["a", "b"]
    # cacheblend flips on c and d: it breaks c, where no draw of the coin flips
    assert res.loc["cacheblend", "broken"] == pytest.approx(1.0) and res.loc["cacheblend", "broken_examples"] == ["c"]
    # a deterministic baseline reads as before: the splice flipped b, c, d
    assert flips.rescues(outcomes, 0.2).set_index("selector").loc["cadence", "rescued_examples"] == ["b", "c"]


def test_the_token_exact_toggle_reaches_the_rescues_and_the_graded_table():
    outcomes = hand_run().outcomes.copy()
    at = (outcomes["selector"] == "cadence") & (outcomes["example_id"] == "b")
    outcomes.loc[at, "flip_strict"] = True  # b: same answer after normalization, not token for token
    normal, strict = (flips.rescues(outcomes, 0.2, strict=s).set_index("selector") for s in (False, True))
    assert normal.loc["cadence", "rescued_examples"] == ["b", "c"] and strict.loc["cadence", "rescued_examples"] == ["c"]
    assert flips.rescue_overlap(outcomes, 0.2, strict=True).loc["cadence", "cadence"] == 1
    rates = {s: flips.graded_rates(outcomes, strict=s).set_index("selector").loc["cadence", "flip_rate"]
             for s in (False, True)}
    assert rates == {False: 0.25, True: 0.5}


def test_without_a_reference_selector_the_comparison_is_left_out():
    run = hand_run()
    only = SweepRun(run.folder, run.manifest, run.examples, run.outcomes[run.outcomes["selector"] == "cadence"])
    table = summarize(only)
    assert table.attrs["reference"] is None and table["ref_b"].isna().all() and table["ref_p_holm"].isna().all()
    assert summarize(run).attrs["reference"] == "cacheblend"
    with pytest.raises(wb.WorkbenchError, match="'bcr' is not in this run"):
        summarize(run, reference="bcr")


def drawn_run() -> SweepRun:
    """hand_run plus a coin with three draws: flips on a in draws 0 and 1, on b in draw 2 only."""
    run = hand_run()
    rows = []
    for ex, flips in zip("abcd", ([1, 1, 0], [0, 0, 1], [0, 0, 0], [1, 1, 1])):
        for draw, f in enumerate(flips):
            rows.append({**run.outcomes.iloc[0].to_dict(), "example_id": ex, "selector": "random", "draw": draw,
                         "flip": bool(f), "flip_strict": bool(f), "em": float(not f)})
    outcomes = pd.concat([run.outcomes.assign(draw=pd.NA), pd.DataFrame(rows)], ignore_index=True)
    return SweepRun(run.folder, run.manifest, run.examples, outcomes)


def test_a_drawn_coin_is_averaged_never_voted_and_tested_on_its_mean_and_per_draw():
    run = drawn_run()
    table = summarize(run, reference="cacheblend").set_index("selector")
    coin = table.loc["random"]
    assert coin["draws"] == 3 and coin["flip_rate"] == pytest.approx((2 + 1 + 0 + 3) / 12)
    assert coin["flip_draw_sd"] == pytest.approx(pd.Series([2 / 4, 2 / 4, 2 / 4]).std())  # per-draw rates
    assert pd.isna(coin["ref_b"]) and coin["test"].startswith("sign-flip")  # b / c belong to one draw
    assert flips.flip_matrix(run.outcomes, 0.2)["random"].tolist() == pytest.approx([2 / 3, 1 / 3, 0, 1])
    from workbench.experiments.contrasts import contrast
    c = contrast(run, "cadence", "random", 0.2)
    # success = no flip. cadence: 1,1,1,0; the coin's means: 1/3, 2/3, 1, 0 -> d = 2/3, 1/3, 0, 0.
    # Exact sign-flip null of 2 + 1 (in thirds): sums +-3, +-1, each 1/4; |S| >= 3 has p = 1/2.
    assert c.n == 4 and c.b_count is None and c.p_value == pytest.approx(0.5) and c.test.startswith("sign-flip")
    assert c.difference == pytest.approx(0.25 - 0.5) and c.low <= c.difference <= c.high
    # per draw, McNemar on successes: draws 0 and 1 flip a (b = 1), draw 2 flips b (b = 1); c = 0
    assert [(d.draw, d.b_count, d.c_count) for d in c.draws] == [(0, 1, 0), (1, 1, 0), (2, 1, 0)]
    assert c.draws_separating == 0


def test_holm_counts_comparisons_without_discordant_pairs():
    """cadence vs cacheblend: b = 2, c = 0, p = 0.5. Alone in its family Holm leaves 0.5; a twin of
    the reference (no discordant pair, p = 1) makes a family of two, and Holm gives 1.0."""
    run = hand_run()
    kept = run.outcomes[run.outcomes["selector"] != "none"]
    alone = summarize(SweepRun(run.folder, run.manifest, run.examples, kept), "cacheblend").set_index("selector")
    assert alone.loc["cadence", "ref_p_holm"] == pytest.approx(0.5)
    twin = kept[kept["selector"] == "cacheblend"].assign(selector="twin")
    both = SweepRun(run.folder, run.manifest, run.examples, pd.concat([kept, twin], ignore_index=True))
    table = summarize(both, reference="cacheblend").set_index("selector")
    assert (table.loc["twin", "ref_b"], table.loc["twin", "ref_c"]) == (0, 0)
    assert table.loc["cadence", "ref_p_holm"] == pytest.approx(1.0) and table.loc["twin", "ref_p_holm"] == 1.0


def test_contrast_specs_parse_units_and_refuse_nonsense():
    from workbench.experiments.contrasts import parse_contrast

    assert parse_contrast("cadence-grad:cacheblend@0.2") == ("cadence-grad", "cacheblend", 0.2)
    assert parse_contrast("bcr:grow:random@0.3") == ("bcr:grow", "random", 0.3)
    assert parse_contrast("bcr:coin@0.2") == ("bcr", "coin", 0.2)
    assert parse_contrast("bcr:grow:coin:bcr:grow@0.2") == ("bcr:grow", "coin:bcr:grow", 0.2)
    for bad in ("cadence-grad:cacheblend", "a:b@0.2", "cadence:random@x", "bcr:coin@1.5", "bcr:coin@nan"):
        with pytest.raises(wb.WorkbenchError):
            parse_contrast(bad)


def coin_run() -> SweepRun:
    """hand_run's cacheblend spent in chunks, its matched coin (3 draws) and a single-row coin."""
    run = hand_run()
    base = run.outcomes[run.outcomes["selector"] == "cacheblend"].assign(selector="cacheblend:chunk", unit="chunk")
    rows = []
    for label, unit in (("coin:cacheblend:chunk", "chunk"), ("random", "single")):
        for ex, flips in zip("abcd", ([1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1])):
            for draw, f in enumerate(flips):
                rows.append({**base.iloc[0].to_dict(), "example_id": ex, "selector": label, "unit": unit,
                             "draw": draw, "flip": bool(f), "flip_strict": bool(f), "em": float(not f)})
    outcomes = pd.concat([run.outcomes.assign(draw=pd.NA), base.assign(draw=pd.NA), pd.DataFrame(rows)],
                         ignore_index=True)
    return SweepRun(run.folder, run.manifest, run.examples, outcomes)


def test_a_coin_of_another_unit_is_refused_and_coin_names_the_matched_one():
    from workbench.experiments.contrasts import contrast

    run = coin_run()
    with pytest.raises(wb.WorkbenchError, match=r"coin:cacheblend:chunk"):
        contrast(run, "cacheblend:chunk", "random", 0.2)  # single rows against chunks
    with pytest.raises(wb.WorkbenchError, match=r"no coin:cadence"):
        contrast(run, "cadence", "coin", 0.2)
    c = contrast(run, "cacheblend:chunk", "coin", 0.2)
    assert c.b == "coin:cacheblend:chunk" and len(c.draws) == 3
    assert contrast(run, "cacheblend", "random", 0.2).b == "random"  # the same unit is a fair coin


def test_holm_over_the_contrast_family_equals_a_hand_computation():
    from workbench.experiments.contrasts import contrast_family

    run = coin_run()
    family = contrast_family(run, ["cadence:cacheblend@0.2", "cadence:none@0.2", "cacheblend:chunk:coin@0.2"])
    raw = [c.p_value for c in family]
    # McNemar on no-flip: cadence vs cacheblend b = 1 (c), c = 0 -> 1.0; vs none b = 2 (b, c), c = 0 -> 0.5
    # the coin: cacheblend:chunk succeeds on a, b; the coin's means there 0, 1/3: d = 1, 2/3 -> exact p = 1/2
    assert raw == [pytest.approx(1.0), pytest.approx(0.5), pytest.approx(0.5)]
    order = sorted(range(3), key=lambda i: raw[i])
    by_hand, running = [0.0] * 3, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        by_hand[i] = running
    assert [c.p_holm for c in family] == pytest.approx(by_hand)


def test_graded_measures_take_the_sign_flip_test():
    from workbench.experiments.contrasts import contrast

    run = hand_run()
    run.outcomes["f1_to_dense"] = run.outcomes["em"] * 0.9 + 0.05
    c = contrast(run, "cadence", "cacheblend", 0.2, measure="f1_to_dense")
    # differences 0, 0, 0.9, 0.9: two non-zero equal differences, p = 2 / 4 exactly
    assert c.b_count is None and c.p_value == pytest.approx(0.5) and c.difference == pytest.approx(0.45)
    with pytest.raises(wb.WorkbenchError, match="first_kl"):
        contrast(run, "cadence", "cacheblend", 0.2, measure="first_kl")  # not recorded in this run



def test_the_protocols_bf16_check_compares_two_runs_of_one_sweep(model, finished, tmp_path, monkeypatch, capsys):
    """docs/PROTOCOLS.md's bf16-against-fp32 snippet runs as written on a bf16 rerun of the sweep,
    and what it prints is what the two folders hold."""
    import re

    import torch

    bf16 = tmp_path / "runs" / "big"
    run_sweep(tiny_model("llama", dtype=torch.bfloat16), CONFIG, bf16, progress=False)
    (tmp_path / "runs" / "big-fp32").symlink_to(finished)
    text = (Path(__file__).parents[2] / "docs" / "PROTOCOLS.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "big-fp32" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "PROTOCOLS.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    a, b = load_sweep(bf16), load_sweep(finished)
    differ = (a.examples.set_index("example_id")["dense_answer"] != b.examples.set_index("example_id")["dense_answer"])
    assert printed[0] == f"dense answers that differ: {differ.sum()} of 3"
    assert printed[1].startswith("flips that differ: ") and 0 <= float(printed[1].split()[-1]) <= 1
    assert a.manifest.model["dtype"] == "bfloat16" and b.manifest.model["dtype"] == "float32"


def test_a_coin_is_tested_by_the_sign_flip_test_even_when_its_draws_agree():
    from workbench.experiments.contrasts import contrast

    run = drawn_run()
    same = run.outcomes.copy()
    same.loc[same["selector"] == "random", "flip"] = same.loc[same["selector"] == "random", "example_id"].isin(["d"])
    agreeing = SweepRun(run.folder, run.manifest, run.examples, same)  # every draw flips d only
    c = contrast(agreeing, "cadence", "random", 0.2)
    assert c.test.startswith("sign-flip") and c.b_count is None and len(c.draws) == 3
    coin = summarize(agreeing, reference="cacheblend").set_index("selector").loc["random"]
    assert pd.isna(coin["ref_b"]) and coin["test"].startswith("sign-flip")


def test_graded_rates_sit_beside_the_flip_rate_and_average_a_coins_draws():
    run = drawn_run()
    outcomes = run.outcomes.assign(f1_to_dense=(~run.outcomes["flip"]).astype(float))
    table = flips.graded_rates(outcomes).set_index("selector")
    assert table.loc["random", "flip_rate"] == pytest.approx(6 / 12)
    assert table.loc["random", "f1_to_dense"] == pytest.approx(1 - 6 / 12)  # draws averaged, then examples
    assert table.loc["cadence", "f1_to_dense"] == pytest.approx(0.75)
    assert table["first_kl"].isna().all()  # not recorded in this run: empty, not zero
