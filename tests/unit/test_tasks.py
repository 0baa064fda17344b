"""Data layer: Example validation, loaders, spec strings, synthetic generator, metrics."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.tasks import (
    dataset_kinds,
    register_dataset,
    Example,
    best_em_f1,
    contains_answer,
    exact_match,
    f1_score,
    load_dataset,
    load_example,
    normalize_answer,
    parse_dataset_spec,
    synthetic_examples,
)
from workbench.tasks.loaders import load_2wiki, load_hotpotqa, load_jsonl
from workbench.tasks.spec import DatasetSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOTPOT = FIXTURES / "hotpotqa_sample.json"
WIKI = FIXTURES / "2wiki_sample.json"
JSONL = FIXTURES / "sample.jsonl"


def hotpot_record(**overrides):
    record = {"_id": "r1", "question": "Where?", "answer": "Tressamor",
              "context": [["A", ["Varek was born in Tressamor."]], ["B", ["Filler."]]]}
    record.update(overrides)
    return record


def write_json(tmp_path: Path, records, name="data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path


def write_jsonl(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def jsonl_line(**overrides) -> str:
    record = {"id": "a", "passages": ["P one."], "question": "Q?", "answers": ["x"]}
    record.update(overrides)
    return json.dumps(record)


# --- Example -------------------------------------------------------------------------------

def test_example_coerces_lists_and_round_trips():
    example = Example(id="e", passages=["one", "two"], question="q?", gold=["x", "y"],
                      system="sys", meta={"k": (1, 2)})
    assert example.passages == ("one", "two") and example.gold == ("x", "y")
    assert example.meta == {"k": [1, 2]}
    data = json.loads(json.dumps(example.to_dict()))
    assert Example.from_dict(data) == example
    hash(example)


@pytest.mark.parametrize("kwargs, message", [
    ({"passages": []}, "at least one passage"),
    ({"passages": ["fine", "  "]}, "passage 1 is empty"),
    ({"passages": "a string"}, "list of strings"),
    ({"passages": ["ok", 3]}, r"passages\[1\] must be a string"),
    ({"question": " "}, "question"),
    ({"id": ""}, "id"),
    ({"gold": ["x", ""]}, "gold answer 1 is empty"),
    ({"meta": {"f": object()}}, "JSON"),
    ({"system": 5}, "system"),
])
def test_example_rejects_bad_fields(kwargs, message):
    fields = {"id": "e", "passages": ["p"], "question": "q?", "gold": ()} | kwargs
    with pytest.raises(WorkbenchError, match=message):
        Example(**fields)


def test_example_allows_unknown_answer():
    assert Example(id="e", passages=["p"], question="q?", gold=[]).gold == ()


# --- metrics -------------------------------------------------------------------------------

def test_normalize_answer():
    assert normalize_answer("The  Cat!") == "cat"
    assert normalize_answer("  An apple, a PEAR.") == "apple pear"
    assert normalize_answer("theater") == "theater"


def test_exact_match_and_f1():
    assert exact_match("the Cat.", "cat") == 1.0
    assert exact_match("cats", "cat") == 0.0
    assert f1_score("big red dog", "red dog") == pytest.approx(0.8)
    assert f1_score("blue", "red dog") == 0.0
    assert f1_score("the", "a") == 1.0  # both normalise to empty
    assert f1_score("the", "dog") == 0.0
    assert f1_score("dog dog", "dog") == pytest.approx(2 / 3)


def test_contains_matches_whole_words_only():
    assert contains_answer("in New York City.", ["New York"]) == 1.0
    assert contains_answer("The city of Tressamor.", ["Tressamor"]) == 1.0
    assert contains_answer("1950", ["5"]) == 0.0  # a raw substring test matched this
    assert contains_answer("Newark", ["New"]) == 0.0
    assert contains_answer("born in 1950.", ["1950", "x"]) == 1.0
    assert contains_answer("anything", ["the"]) == 0.0  # a gold that normalises to nothing never matches


def test_best_em_f1_over_aliases():
    assert best_em_f1("Heskara", ["Heskara Mills", "Heskara"]) == (1.0, 1.0)
    em, f1 = best_em_f1("Heskara", ["Heskara Mills"])
    assert em == 0.0 and f1 == pytest.approx(2 / 3)
    assert best_em_f1("anything", []) == (0.0, 0.0)


# --- loaders on the fixtures ---------------------------------------------------------------

def test_load_hotpotqa_fixture():
    examples = load_hotpotqa(HOTPOT)
    assert [e.id for e in examples] == ["hp-bridge-0001", "hp-comparison-0002", "hp-yesno-0003"]
    first = examples[0]
    assert first.passages[1] == ("Varek Olundi: Varek Olundi was born in the city of Tressamor. "
                                 "He played as a defender before coaching.")
    assert first.gold == ("Tressamor",)
    assert first.meta["support_passages"] == [0, 1]
    assert first.meta["type"] == "bridge" and first.meta["source"] == "hotpotqa"


def test_load_2wiki_fixture_with_aliases():
    examples = load_2wiki(WIKI)
    assert len(examples) == 3
    assert examples[0].gold == ("Toren Velmark", "T. Velmark")
    assert examples[1].gold == ("The Quiet Orchard",)
    assert examples[2].gold == ("Aldo Korbrandt",)
    assert examples[0].meta["evidences"][0] == ["Glass Harbour", "director", "Ilsa Velmark"]


def test_load_jsonl_fixture():
    examples = load_jsonl(JSONL)
    assert [e.id for e in examples] == ["q1", "q2", "q3"]  # the blank line is skipped
    assert examples[0].meta == {"type": "bridge"}
    assert examples[1].system == "You answer from the passages only."
    assert examples[1].gold == ("Heskara Mills", "Heskara")
    assert examples[2].gold == ()


# --- loader errors -------------------------------------------------------------------------

def test_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope.json"
    for loader in (load_hotpotqa, load_2wiki, load_jsonl):
        with pytest.raises(WorkbenchError, match="nope.json: no such file"):
            loader(missing)


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n{"_id": "a",\n "question": }\n]')
    with pytest.raises(WorkbenchError, match=r"bad\.json: invalid JSON at line 3"):
        load_hotpotqa(path)


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path, [jsonl_line(), "", '{"id": "b", "passages": ['])
    with pytest.raises(WorkbenchError, match=r"data\.jsonl: line 3: invalid JSON"):
        load_jsonl(path)


@pytest.mark.parametrize("record, message", [
    (hotpot_record(question=7),
     r"record 0 \(id 'r1'\): field 'question' must be a string"),
    ({k: v for k, v in hotpot_record().items() if k != "answer"},
     r"record 0 \(id 'r1'\): missing field 'answer'"),
    ({k: v for k, v in hotpot_record().items() if k != "_id"},
     r"record 0: missing field '_id'"),
    (hotpot_record(context=[["A", "not a list"]]), r"field 'context'\[0\]"),
    (hotpot_record(context=[]), "at least one passage"),
    (hotpot_record(context=[["", ["  "]]]), "passage 0 is empty"),
    ("just a string", "record 0: expected a JSON object"),
])
def test_hotpotqa_record_errors(tmp_path, record, message):
    path = write_json(tmp_path, [record])
    with pytest.raises(WorkbenchError, match=message) as info:
        load_hotpotqa(path)
    assert "data.json" in str(info.value)


def test_json_loader_rejects_non_list_and_empty(tmp_path):
    with pytest.raises(WorkbenchError, match="expected a JSON list"):
        load_hotpotqa(write_json(tmp_path, {"_id": "a"}))
    with pytest.raises(WorkbenchError, match="no records"):
        load_hotpotqa(write_json(tmp_path, [], name="empty.json"))


def test_2wiki_alias_type_error(tmp_path):
    path = write_json(tmp_path, [hotpot_record(answer_aliases=["ok", 3])])
    with pytest.raises(WorkbenchError, match=r"field 'answer_aliases'\[1\] must be a string"):
        load_2wiki(path)


@pytest.mark.parametrize("line, message", [
    (jsonl_line(passages=[]), r"line 1 \(id 'a'\): field 'passages' is an empty list"),
    (jsonl_line(passages=["ok", " "]), "passage 1 is empty"),
    (jsonl_line(answers="x"), "field 'answers' must be a list"),
    (jsonl_line(meta=[1]), "field 'meta' must be an object"),
    (json.dumps({"id": "a", "passages": ["p"], "answers": []}), "missing field 'question'"),
])
def test_jsonl_record_errors(tmp_path, line, message):
    with pytest.raises(WorkbenchError, match=message):
        load_jsonl(write_jsonl(tmp_path, [line]))


def test_duplicate_ids(tmp_path):
    with pytest.raises(WorkbenchError, match=r"duplicate id 'a' \(line 1 and line 3\)"):
        load_jsonl(write_jsonl(tmp_path, [jsonl_line(), jsonl_line(id="b"), jsonl_line()]))
    path = write_json(tmp_path, [hotpot_record(), hotpot_record()])
    with pytest.raises(WorkbenchError, match=r"duplicate id 'r1' \(record 0 and record 1\)"):
        load_hotpotqa(path)


# --- spec strings ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("synthetic", DatasetSpec("synthetic")),
    ("synthetic:7", DatasetSpec("synthetic", 7)),
    ("synthetic#3", DatasetSpec("synthetic", None, "3")),
    ("hotpotqa:data/dev.json", DatasetSpec("hotpotqa", Path("data/dev.json"))),
    ("2wiki:x.json#ab", DatasetSpec("2wiki", Path("x.json"), "ab")),
    ("jsonl:dir#1/f.jsonl#q#2", DatasetSpec("jsonl", Path("dir#1/f.jsonl#q"), "2")),
])
def test_parse_spec_and_round_trip(text, expected):
    parsed = parse_dataset_spec(text)
    assert parsed == expected
    assert str(parsed) == text
    assert parse_dataset_spec(str(parsed)) == parsed


@pytest.mark.parametrize("text, message", [
    ("squad:x.json", "unknown data set kind 'squad'.*synthetic, hotpotqa, 2wiki, jsonl"),
    ("synthetic:abc", "bad seed 'abc'"),
    ("synthetic:-1", "bad seed"),
    ("hotpotqa", "needs a path"),
    ("jsonl:", "needs a path"),
    ("synthetic#", "empty example id"),
    ("", "non-empty string"),
])
def test_parse_spec_errors(text, message):
    with pytest.raises(WorkbenchError, match=message):
        parse_dataset_spec(text)


def test_dataset_kinds():
    assert dataset_kinds() == ("synthetic", "hotpotqa", "2wiki", "jsonl", "musique", "ruler")


def test_a_registered_kind_is_parsed_loaded_and_listed_in_the_cli_help(monkeypatch, tmp_path):
    from workbench.cli import build_parser
    from workbench.tasks import spec

    monkeypatch.setattr(spec, "_DATASETS", spec._DATASETS.copy())  # leave the real registry untouched
    made = lambda i, parsed, tokenizer=None, max_positions=None, width=2: Example(
        str(i), [f"passage {i}.{j}" for j in range(width)], f"question {parsed.arg}?", ["a"])
    register_dataset("toy", lambda parsed, n, **kw: [made(i, parsed, **kw) for i in range(n)], arg="NAME",
                     generated=True, parse_arg=lambda arg, text: arg or "plain", load_one=made, options=("width",))
    assert "toy" in dataset_kinds()
    assert [e.id for e in load_dataset("toy:x", n=3, width=1)] == ["0", "1", "2"]
    assert list(load_example("toy:x#4", width=3).passages) == ["passage 4.0", "passage 4.1", "passage 4.2"]
    with pytest.raises(WorkbenchError, match=r"option\(s\) \['types'\] do not apply to 'toy' data; its options: width"):
        load_dataset("toy:x", n=1, types=("a",))
    with pytest.raises(WorkbenchError, match="unknown toy example id 'q'"):
        load_example("toy:x#q")
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "toy:NAME" in " ".join(run_help.split())
    with pytest.raises(WorkbenchError, match="a generated kind needs load_one"):
        register_dataset("toy2", lambda parsed, n, **kw: [], generated=True)
    with pytest.raises(WorkbenchError, match="lower-case words"):
        register_dataset("Bad Kind", lambda parsed, n, **kw: [])


def test_load_dataset_files_and_n():
    assert len(load_dataset(f"hotpotqa:{HOTPOT}")) == 3
    assert [e.id for e in load_dataset(f"jsonl:{JSONL}", n=2)] == ["q1", "q2"]
    with pytest.raises(WorkbenchError, match="asked for 5 examples but the file has only 3"):
        load_dataset(f"2wiki:{WIKI}", n=5)
    with pytest.raises(WorkbenchError, match="integer >= 1"):
        load_dataset(f"jsonl:{JSONL}", n=0)
    with pytest.raises(WorkbenchError, match="missing.json: no such file"):
        load_dataset("hotpotqa:/no/such/dir/missing.json")
    with pytest.raises(WorkbenchError, match="do not apply to .jsonl. data"):
        load_dataset(f"jsonl:{JSONL}", filler_sentences=2)


def test_load_dataset_synthetic():
    assert len(load_dataset("synthetic")) == 100
    examples = load_dataset("synthetic:4", n=3, distractors=0)
    assert examples == synthetic_examples(3, seed=4, distractors=0)
    with pytest.raises(WorkbenchError, match="do not apply to .synthetic. data"):
        load_dataset("synthetic", n=2, fillers=3)


def test_id_selects_one_example():
    assert load_dataset(f"jsonl:{JSONL}#q2", n=50) == [load_jsonl(JSONL)[1]]
    assert load_example(f"2wiki:{WIKI}#2w-0003").gold == ("Aldo Korbrandt",)
    assert load_example("synthetic#3") == synthetic_examples(4)[3]
    assert load_example("synthetic:9#1", filler_sentences=1) == \
        synthetic_examples(2, seed=9, filler_sentences=1)[1]


def test_load_example_generates_only_the_one(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("generated a whole data set")

    monkeypatch.setattr("workbench.tasks.spec.synthetic_examples", refuse)
    assert load_example("synthetic#40").id == "40"


def test_load_example_errors():
    with pytest.raises(WorkbenchError, match="names no example"):
        load_example(f"jsonl:{JSONL}")
    with pytest.raises(WorkbenchError, match="no example with id 'zz'.*3 ids include 'q1', 'q2'"):
        load_example(f"jsonl:{JSONL}#zz")
    with pytest.raises(WorkbenchError, match="unknown synthetic example id 'x'"):
        load_example("synthetic#x")
    with pytest.raises(WorkbenchError, match="unknown synthetic example id '03'"):
        load_example("synthetic#03")


# --- synthetic generator -------------------------------------------------------------------

def test_synthetic_deterministic_and_seeded():
    first = synthetic_examples(20, seed=5)
    assert first == synthetic_examples(20, seed=5)
    assert first != synthetic_examples(20, seed=6)
    assert [e.id for e in first] == [str(i) for i in range(20)]
    assert synthetic_examples(8, seed=5) == first[:8]  # example i does not depend on n


def test_synthetic_pinned_across_machines():
    example = synthetic_examples(1, seed=0)[0]
    assert example.question == "In which city was the coach of Nyven Marvath born?"
    assert example.gold == ("Zeroreach",)


def test_synthetic_gold_and_distractors():
    for example in synthetic_examples(200, seed=1):
        (gold,) = example.gold
        meta = example.meta
        assert gold in example.passages[meta["answer_passage"]]
        assert meta["answer_passage"] in meta["support_passages"]
        assert sorted(meta["support_passages"] + meta["distractor_passages"]) == \
            list(range(len(example.passages)))
        for index in meta["distractor_passages"]:
            assert gold not in example.passages[index]
        if meta["type"] == "bridge":
            hop, answer = meta["support_passages"]
            subject, bridge = meta["subject"], meta["bridge_entity"]
            assert f"{subject} is coached by {bridge}." in example.passages[hop]
            assert f"{bridge} was born in the city of {gold}." in example.passages[answer]
        if meta["type"] == "comparison":
            values, entities = meta["values"], meta["entities"]
            earlier_or_taller = min if meta["attribute"] == "founded" else max
            assert gold == entities[values.index(earlier_or_taller(values))]
            assert all(name in example.question for name in entities)


def test_synthetic_mix_lengths_and_order():
    examples = synthetic_examples(400, seed=2)
    counts = Counter(e.meta["type"] for e in examples)
    assert 0.4 < counts["bridge"] / 400 < 0.6
    assert 0.15 < counts["comparison"] / 400 < 0.35 and 0.15 < counts["onehop"] / 400 < 0.35
    assert {len(e.passages) for e in examples} == {3, 4}
    words = [len(p.split()) for e in examples for p in e.passages]
    assert min(words) >= 12 and max(words) <= 60
    bridges = [e.meta["support_passages"] for e in examples if e.meta["type"] == "bridge"]
    assert sum(hop < answer for hop, answer in bridges) / len(bridges) > 0.75


def test_synthetic_options():
    only = synthetic_examples(30, seed=3, types=("onehop",), distractors=0)
    assert all(e.meta["type"] == "onehop" and len(e.passages) == 1 for e in only)
    five = synthetic_examples(10, types="comparison", distractors=3)
    assert {len(e.passages) for e in five} == {5}


def test_synthetic_filler_lengthens_contexts():
    def total_words(example):
        return sum(len(p.split()) for p in example.passages)

    plain = synthetic_examples(10, seed=4)
    filled = synthetic_examples(10, seed=4, filler_sentences=3)
    targeted = synthetic_examples(10, seed=4, target_words=400)
    for a, b, c in zip(plain, filled, targeted):
        assert total_words(b) > total_words(a) + 3 * len(a.passages) * 4
        assert 400 <= total_words(c) < 420
        assert b.question == a.question and b.gold == a.gold and b.meta == a.meta
        assert all(long.startswith(short) for short, long in zip(a.passages, b.passages))
        (gold,) = a.gold
        assert all(gold not in c.passages[i] for i in c.meta["distractor_passages"])


@pytest.mark.parametrize("kwargs, message", [
    ({"n": -1}, "integer >= 0"),
    ({"n": 2, "seed": "x"}, "seed"),
    ({"n": 2, "types": ("bridge", "trivia")}, "question types"),
    ({"n": 2, "types": ()}, "question types"),
    ({"n": 2, "distractors": -1}, "distractors"),
    ({"n": 2, "filler_sentences": 1.5}, "filler_sentences"),
    ({"n": 2, "target_words": 0}, "target_words"),
])
def test_synthetic_rejects_bad_options(kwargs, message):
    with pytest.raises(WorkbenchError, match=message):
        synthetic_examples(**kwargs)


# ----------------------------------------------------------------------------- MuSiQue (CacheBlend's retrieval set)

MUSIQUE = FIXTURES / "musique_sample.json"


def test_musique_loads_passages_in_retrieval_order_with_the_instruction():
    from workbench.tasks.musique import INSTRUCTION

    examples = load_dataset(f"musique:{MUSIQUE}")
    assert [e.id for e in examples] == ["musique-900", "musique-901", "musique-902"]
    first = examples[0]
    assert len(first.passages) == 3 and first.passages[1].startswith("mira tessk is a novelist")
    assert first.gold == ("Tressamor",) and first.system == INSTRUCTION
    assert load_dataset(f"musique:{MUSIQUE}", max_passages=2)[1].passages == examples[1].passages[:2]
    assert load_dataset(f"musique:{MUSIQUE}", instruction="Answer in five words.")[0].system == "Answer in five words."
    assert load_example(f"musique:{MUSIQUE}#musique-902").gold == ("Hollen Brave",)


def test_musique_cuts_passages_at_a_word_boundary_with_the_models_tokenizer():
    from conftest import byte_tokenizer

    tok = byte_tokenizer()  # one token per byte
    cut = load_dataset(f"musique:{MUSIQUE}", max_passage_tokens=40, tokenizer=tok)[0].passages[0]
    full = load_dataset(f"musique:{MUSIQUE}")[0].passages[0]
    assert len(cut) <= 40 and full.startswith(cut) and full[len(cut)] == " "
    with pytest.raises(WorkbenchError, match="needs the model's tokenizer"):
        load_dataset(f"musique:{MUSIQUE}", max_passage_tokens=40)
    with pytest.raises(WorkbenchError, match="passage 0 is .* tokens, longer than the model's context of 64"):
        load_dataset(f"musique:{MUSIQUE}", tokenizer=tok, max_positions=64)


@pytest.mark.parametrize("entry, match", [
    ({"id": "x", "question": "q", "answers": ["a"]}, r"entry 0: missing field\(s\) \['ctxs'\]"),
    ({"id": "x", "question": "q", "answers": ["a"], "ctxs": []}, "entry 0 .id 'x'.: field 'ctxs' must be a non-empty"),
    ({"id": "x", "question": "q", "answers": [3], "ctxs": [{"text": "t"}]}, "'answers' must be a list of strings"),
    ({"id": "x", "question": "q", "answers": ["a"], "ctxs": [{"title": ""}]}, r"ctxs\[0\] must be an object"),
])
def test_musique_bad_entries_are_named(tmp_path, entry, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(WorkbenchError, match=match) as err:
        load_dataset(f"musique:{path}")
    assert "bad.json" in str(err.value)
    with pytest.raises(WorkbenchError, match="do not apply to 'musique' data"):
        load_dataset(f"musique:{MUSIQUE}", target_words=10)


# --- issue 29: text the loaders took wrongly -------------------------------------------------

def test_jsonl_lines_end_at_newline_only(tmp_path):
    """json.dumps(..., ensure_ascii=False) writes U+2028 raw; str.splitlines() broke the record there
    and valid JSONL was refused as "invalid JSON" (29.13)."""
    text = "one\u2028two\x85three\u2029four\x0cfive\x1cend"
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "passages": [text], "question": "Q\u2028?", "answers": ["x"]},
                               ensure_ascii=False) + "\r\n" + jsonl_line(id="b") + "\n", encoding="utf-8")
    examples = load_jsonl(path)
    assert [e.id for e in examples] == ["a", "b"]
    assert examples[0].passages == (text,) and examples[0].question == "Q\u2028?"


@pytest.mark.parametrize("field, value, where", [
    ("passages", ["fine", "bad \udc80 text"], "passages[1] holds '\\udc80' at character 4"),
    ("question", "Who\ud800?", "question holds '\\ud800' at character 3"),
    ("answers", ["\udfff"], "gold[0] holds '\\udfff' at character 0"),
    ("system", "sys \udc80", "system holds '\\udc80'"),
])
def test_an_escaped_lone_surrogate_is_refused_at_load_with_file_line_id_and_field(tmp_path, field, value, where):
    """`"\\udc80"` loaded, then every example failed after the model loaded, in the tokenizer (29.14)."""
    path = write_jsonl(tmp_path, [jsonl_line(id="ok"), jsonl_line(id="q7", **{field: value})])
    with pytest.raises(WorkbenchError) as raised:
        load_jsonl(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: line 2 (id 'q7'): ") and where in message and "\n" not in message
    hotpot = write_json(tmp_path, [hotpot_record(question="Who\ud800?")])
    with pytest.raises(WorkbenchError, match=r"record 0 \(id 'r1'\): .*question holds"):
        load_hotpotqa(hotpot)


def test_a_musique_passage_with_a_lone_surrogate_is_refused_before_a_tokenizer_reads_it(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"id": "m1", "question": "q", "answers": ["a"],
                                 "ctxs": [{"title": "T", "text": "fine"}, {"title": "T", "text": "bad \udc80"}]}]))
    with pytest.raises(WorkbenchError, match=r"entry 0 \(id 'm1'\): ctxs\[1\] holds '\\udc80'"):
        load_dataset(f"musique:{path}", tokenizer=object(), max_passage_tokens=8)


def test_an_id_holding_a_hash_can_be_chosen(tmp_path):
    """`--example "jsonl:F#q#1"` said "F#q: no such file" (29.15): the spec is split at the last '#'
    that leaves an existing file."""
    path = write_jsonl(tmp_path, [jsonl_line(id="q#1"), jsonl_line(id="q"), jsonl_line(id="#")])
    assert load_example(f"jsonl:{path}#q#1").id == "q#1"
    assert load_example(f"jsonl:{path}#q").id == "q"
    assert load_example(f"jsonl:{path}##").id == "#"
    named = tmp_path / "runs#2.jsonl"  # a file whose own name holds '#'
    named.write_text(path.read_text())
    assert len(load_dataset(f"jsonl:{named}")) == 3
    assert load_example(f"jsonl:{named}#q#1").id == "q#1"
    with pytest.raises(WorkbenchError, match=r"no example with id 'q#9'"):
        load_example(f"jsonl:{path}#q#9")
    with pytest.raises(WorkbenchError, match=r"nothere\.jsonl#q: no such file"):
        load_example(f"jsonl:{tmp_path}/nothere.jsonl#q#1")
