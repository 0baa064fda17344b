"""Tasks with gold that carries signal: HotpotQA's passage settings, the RULER-style generator,
the "all values present" scoring, and their options through `kvwb run` (manifest, resume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import byte_tokenizer, run_cli
from workbench.errors import WorkbenchError
from workbench.tasks import Example, all_present, check_dataset, load_dataset, load_example, score_answer
from workbench.tasks.ruler import NEEDLES, NOISE, TASKS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DISTRACTORS = FIXTURES / "hotpotqa_distractors.json"
TOK = byte_tokenizer()  # one token per byte: lengths are easy to reason about


def count(text: str) -> int:
    return len(TOK(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------- HotpotQA passage settings

def titles_of(example: Example) -> list[str]:
    return [p.split(":", 1)[0] for p in example.passages]


def test_hotpotqa_gold_keeps_the_paragraphs_supporting_facts_name_in_the_records_order():
    full = load_dataset(f"hotpotqa:{DISTRACTORS}")
    gold = load_dataset(f"hotpotqa:{DISTRACTORS}", passages="gold")
    for whole, kept in zip(full, gold):
        named = {title for title, _ in whole.meta["supporting_facts"]}
        assert titles_of(kept) == [t for t in titles_of(whole) if t in named]
        assert kept.meta["titles"] == titles_of(kept) and kept.meta["passage_setting"] == "gold"
        assert kept.meta["support_passages"] == list(range(len(named)))
        assert kept.question == whole.question and kept.gold == whole.gold
    assert "passage_setting" not in full[0].meta and load_dataset(f"hotpotqa:{DISTRACTORS}", passages="all") == full


def test_hotpotqa_gold_plus_k_draws_k_distractors_by_the_seed_in_the_records_order():
    full = {e.id: e for e in load_dataset(f"hotpotqa:{DISTRACTORS}")}
    draws = {}
    for seed in range(8):
        for example in load_dataset(f"hotpotqa:{DISTRACTORS}", passages="gold+2", data_seed=seed):
            whole = full[example.id]
            titles = titles_of(example)
            assert len(titles) == 4 and titles == [t for t in titles_of(whole) if t in titles]  # the record's order
            assert [titles[i] for i in example.meta["support_passages"]] == [
                t for t in titles_of(whole) if t in {title for title, _ in whole.meta["supporting_facts"]}]
            assert example.meta["data_seed"] == seed and example.meta["passage_setting"] == "gold+2"
            draws.setdefault(example.id, set()).add(tuple(titles))
    assert all(len(kinds) > 1 for kinds in draws.values())  # the seed draws the distractors
    again = load_dataset(f"hotpotqa:{DISTRACTORS}", passages="gold+2", data_seed=3)
    assert again == load_dataset(f"hotpotqa:{DISTRACTORS}", passages="gold+2", data_seed=3)
    assert load_example(f"hotpotqa:{DISTRACTORS}#hd-comparison-02", passages="gold+2", data_seed=3) == again[1]
    assert load_dataset(f"hotpotqa:{DISTRACTORS}", passages="gold+4")[0].passages == full["hd-bridge-01"].passages


@pytest.mark.parametrize("options, message", [
    ({"passages": "some"}, "passages must be 'all', 'gold' or 'gold\\+K'"),
    ({"passages": "gold+x"}, "got 'gold\\+x'"),
    ({"passages": 3}, "for hotpotqa data, got 3"),
    ({"passages": "gold", "data_seed": -1}, "data_seed must be an integer >= 0"),
    ({"needle_depth": 0.5}, "do not apply to 'hotpotqa' data"),
])
def test_hotpotqa_bad_settings_are_one_line(options, message):
    with pytest.raises(WorkbenchError, match=message) as err:
        load_dataset(f"hotpotqa:{DISTRACTORS}", **options)
    assert "\n" not in str(err.value)


def test_a_supporting_fact_naming_a_missing_title_is_refused_with_file_id_and_title(tmp_path):
    records = json.loads(DISTRACTORS.read_text())
    records[1]["supporting_facts"][1][0] = "Dorket Pres"
    path = tmp_path / "hp.json"
    path.write_text(json.dumps(records))
    with pytest.raises(WorkbenchError) as err:
        load_dataset(f"hotpotqa:{path}")
    assert str(err.value) == (f"{path}: record 1 (id 'hd-comparison-02'): supporting_facts name the title "
                              f"'Dorket Pres', which no paragraph of its context has")
    del records[1]["supporting_facts"]
    path.write_text(json.dumps(records))
    assert len(load_dataset(f"hotpotqa:{path}")) == 2  # none named: fine for all passages
    with pytest.raises(WorkbenchError, match="id 'hd-comparison-02'.: passages 'gold' needs supporting_facts"):
        load_dataset(f"hotpotqa:{path}", passages="gold")


# ----------------------------------------------------------------------------- RULER-style tasks

def needles_in(passage: str) -> list[str]:
    noise = set(NOISE)
    return [s for s in (part.strip() for part in passage.replace(". ", ".\n").splitlines()) if s and s not in noise]


@pytest.mark.parametrize("task", TASKS)
def test_ruler_examples_fill_the_target_with_each_needle_in_a_passage_of_its_own(task):
    target, passages = 900, 5
    examples = load_dataset(f"ruler:{task}", n=3, tokenizer=TOK, target_tokens=target, passages=passages)
    longest = max(count(s) for s in NOISE) + 1
    for example in examples:
        assert len(example.passages) == passages
        found = [needles_in(p) for p in example.passages]
        assert all(len(f) <= 1 for f in found) and sum(map(len, found)) == NEEDLES[task]
        assert [i for i, f in enumerate(found) if f] == sorted(example.meta["needle_passages"])
        total = sum(count(p) for p in example.passages)
        assert target - passages * longest < total <= target and example.meta["n_tokens"] == total
        text = " ".join(example.passages)
        assert all(g in text for g in example.gold) and example.meta["answer_lead"] and example.system
        assert example.scoring == ("all" if task in ("niah_multivalue", "variable_tracking") else "any")
    assert examples == load_dataset(f"ruler:{task}", n=3, tokenizer=TOK, target_tokens=target, passages=passages)
    assert load_example(f"ruler:{task}#2", tokenizer=TOK, target_tokens=target, passages=passages) == examples[2]
    other = load_dataset(f"ruler:{task}", n=3, tokenizer=TOK, target_tokens=target, passages=passages, data_seed=1)
    assert [e.gold for e in other] != [e.gold for e in examples]


def test_ruler_needle_depth_places_the_needle_and_spreads_by_default():
    def needle_passage(example):
        (passage,) = example.meta["needle_passages"]
        return passage

    kwargs = dict(tokenizer=TOK, target_tokens=600, passages=4)
    assert needle_passage(load_example("ruler:niah_single#0", needle_depth=0, **kwargs)) == 0
    assert needle_passage(load_example("ruler:niah_single#0", needle_depth=1, **kwargs)) == 3
    start = load_example("ruler:niah_single#0", needle_depth=0, **kwargs).passages[0]
    end = load_example("ruler:niah_single#0", needle_depth=1, **kwargs).passages[3]
    assert start.startswith("One of the special magic numbers") and end.endswith(
        load_example("ruler:niah_single#0", needle_depth=1, **kwargs).gold[0] + ".")
    spread = load_dataset("ruler:niah_single", n=11, **kwargs)
    assert [e.meta["needle_depth"] for e in spread] == pytest.approx([i / 10 for i in range(11)])
    assert [needle_passage(e) for e in spread] == sorted(needle_passage(e) for e in spread)
    assert {needle_passage(e) for e in spread} == {0, 1, 2, 3}


def test_variable_tracking_writes_the_chain_in_order_across_passages():
    example = load_example("ruler:variable_tracking#4", tokenizer=TOK, target_tokens=1000, passages=6)
    links = [n for p in example.passages for n in needles_in(p)]
    names = list(example.gold)
    value = example.question.split("value ")[1].split()[0]
    assert links == [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
    assert f"{len(names)} variables are assigned the value {value}" in example.meta["answer_lead"]


def test_multikey_asks_for_one_key_among_distractor_needles():
    example = load_example("ruler:niah_multikey#1", tokenizer=TOK, target_tokens=800)
    needles = [n for p in example.passages for n in needles_in(p)]
    key = example.question.split(" for ")[1].split(" mentioned")[0]
    asked = [n for n in needles if f" {key} " in n]
    assert len(needles) == 4 and asked == [f"One of the special magic numbers for {key} is: {example.gold[0]}."]
    assert example.passages[example.meta["needle_passages"][0]].count(key) == 1


@pytest.mark.parametrize("spec, options, kwargs, message", [
    ("ruler:niah_double", {}, {}, "unknown RULER task 'niah_double' in spec 'ruler:niah_double'; valid tasks: "
                                  "niah_single, niah_multikey"),
    ("ruler", {}, {}, "needs a task, as in 'ruler:niah_single'"),
    ("ruler:niah_single", {"needle_depth": 1.5}, {}, "needle_depth must be a number from 0 to 1"),
    ("ruler:niah_single", {"needle_depth": -0.1}, {}, "needle_depth must be a number from 0 to 1"),
    ("ruler:niah_single", {"target_tokens": 5000}, {"max_positions": 2048},
     "target_tokens 5000 cannot fit the model's context of 2048 tokens with ruler:niah_single's instruction"),
    ("ruler:niah_single", {"target_tokens": 0}, {}, "target_tokens must be an integer from 1"),
    ("ruler:niah_single", {"target_tokens": 60, "passages": 5}, {}, "target_tokens 60 is too short"),
    ("ruler:variable_tracking", {"passages": 3}, {}, "ruler:variable_tracking puts each of its 5 chain links in a "
                                                     "passage of its own: passages must be at least 5, got 3"),
    ("ruler:niah_single", {"passages": "gold"}, {}, "passages must be an integer >= 1 for ruler data"),
    ("ruler:niah_single", {"target_words": 10}, {}, "do not apply to 'ruler' data"),
    ("ruler:niah_single#x", {}, {}, "unknown ruler example id 'x'"),
])
def test_ruler_bad_options_are_one_line(spec, options, kwargs, message):
    with pytest.raises(WorkbenchError, match=message) as err:
        load_dataset(spec, n=2, tokenizer=TOK, **options, **kwargs)
    assert "\n" not in str(err.value)


def test_ruler_needs_the_models_tokenizer_but_its_options_are_checked_without_one():
    with pytest.raises(WorkbenchError, match="needs the model's tokenizer"):
        load_dataset("ruler:niah_single", n=1)
    check_dataset("ruler:niah_single", n=3, target_tokens=2048, passages=5)  # no tokenizer needed
    with pytest.raises(WorkbenchError, match="needle_depth"):
        check_dataset("ruler:niah_single", needle_depth=2)


# ----------------------------------------------------------------------------- "all values present"

def test_all_values_present_is_all_or_nothing_in_any_order():
    golds = ["8903385", "4653367", "1145980"]
    assert all_present("1145980, 8903385 and 4653367.", golds) == 1.0
    assert all_present("8903385, 4653367", golds) == 0.0
    assert all_present("89033851 4653367 1145980", golds) == 0.0  # whole words only
    em, f1, contains = score_answer("8903385 and 4653367", golds, "all")
    assert (em, contains) == (0.0, 1.0) and 0 < f1 < 1
    assert score_answer("8903385", ["8903385", "x"], "any") == (1.0, 1.0, 1.0)
    example = Example("m", ("p",), "q?", tuple(golds), meta={"scoring": "all"})
    assert example.score("4653367 1145980 8903385")[0] == 1.0 and example.score("8903385")[0] == 0.0
    with pytest.raises(WorkbenchError, match="meta\\['scoring'\\] must be one of any, all"):
        Example("m", ("p",), "q?", ("a",), meta={"scoring": "some"})


def test_a_diagnosis_scores_em_of_a_multi_value_example_as_all_values_present():
    from workbench.decode import Answer
    from workbench.diagnosis.run import _record

    example = load_example("ruler:niah_multivalue#0", tokenizer=TOK, target_tokens=800)
    named = Answer(" ".join(reversed(example.gold)) + ".", "", (), True)
    partial = Answer(", ".join(example.gold[:3]), "", (), True)
    assert (_record(named, example).em, _record(partial, example).em, _record(partial, example).contains) == (1, 0, 1)


# ----------------------------------------------------------------------------- through `kvwb run`

def test_run_records_the_hotpotqa_passage_setting_and_refuses_another_on_resume(tiny_llama, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: tiny_llama)
    out = tmp_path / "hp"
    argv = ["run", "--dataset", f"hotpotqa:{DISTRACTORS}", "--n", "2", "--selectors", "none,full", "--budgets",
            "0.2", "--max-new-tokens", "2", "--out", out]
    assert run_cli([*argv, "--passages", "gold+1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["args"]["dataset_options"] == {"passages": "gold+1"}
    capsys.readouterr()
    assert run_cli([*argv, "--passages", "gold"]) == 2
    assert "dataset_options.passages: 'gold+1' in the run vs 'gold' now" in capsys.readouterr().err


def test_run_over_ruler_records_its_options_and_refuses_others_on_resume(tiny_llama, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: tiny_llama)
    out = tmp_path / "ruler"
    argv = ["run", "--dataset", "ruler:niah_single", "--n", "2", "--selectors", "none,full", "--budgets", "0.2",
            "--max-new-tokens", "2", "--target-tokens", "600", "--passages", "3", "--out", out]
    assert run_cli(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["args"]["dataset_options"] == {"passages": 3, "target_tokens": 600}
    assert manifest["args"]["data_sha256"] is None
    capsys.readouterr()
    assert run_cli([*argv, "--target-tokens", "700"]) == 2  # the last --target-tokens counts
    assert "dataset_options.target_tokens: 600 in the run vs 700 now" in capsys.readouterr().err
    assert run_cli(["run", "--dataset", "ruler:niah_single", "--target-tokens", "5000", "--n", "1", "--selectors",
                    "none", "--out", tmp_path / "long"]) == 2
    err = capsys.readouterr().err
    assert "target_tokens 5000 cannot fit the model's context of 2048 tokens" in err and "Traceback" not in err
    assert not (tmp_path / "long").exists()


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "ruler:niah_tiny"], "unknown RULER task 'niah_tiny'"),
    (["--dataset", "ruler:niah_single", "--needle-depth", "1.5"], "needle_depth must be a number from 0 to 1"),
    (["--dataset", "ruler:niah_multivalue", "--passages", "2"], "passages must be at least 4, got 2"),
    (["--dataset", "synthetic", "--passages", "gold"], "do not apply to 'synthetic' data"),
])
def test_bad_task_options_fail_before_the_model_loads(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert run_cli(["run", *argv, "--n", "2", "--out", tmp_path / "r"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "r").exists()
