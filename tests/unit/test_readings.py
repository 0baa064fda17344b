"""Readings that say why (issue 43): retrieval apart from stopping, and where the evidence is.

`retrieved` follows RULER's string match (or word-boundary contains for QA data); `ran_on` says
the answer went on past dense's; the evidence rows of each data set decode back to exactly its
evidence text; a Diagnosis records evidence recall / precision per cell, average precision per
scorer and the question's attention on the evidence per layer, read from the answering pass
without changing it. Tiny models, seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import small_example, tiny_model
from workbench.byte_tokenizer import byte_tokenizer
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.diagnosis.evidence import average_precision, recall_precision
from workbench.diagnosis.graded import RAN_ON_MARGIN, ran_on
from workbench.errors import WorkbenchError
from workbench.layout import build_layout
from workbench.tasks import Example, load_dataset, synthetic_examples
from workbench.tasks.loaders import load_hotpotqa, load_jsonl
from workbench.tasks.metrics import retrieved_score, string_match_all, string_match_part

FIXTURES = Path(__file__).parents[1] / "fixtures"
TOKENIZER = byte_tokenizer()  # one token per byte: decoding rows gives back exactly their characters


# ---------------------------------------------------------------- retrieved

def test_string_match_all_is_rulers_share_of_values_as_case_folded_substrings():
    refs = ["AFZQX", "BYVTA", "QWFCJ", "ZXCRU"]
    assert string_match_all("they are: afzqx, QWFCJ and more", refs) == 0.5
    assert string_match_all("AFZQXBYVTA QWFCJ ZXCRU", refs) == 1.0  # substrings, not words (RULER's rule)
    assert string_match_all("nothing", refs) == 0.0
    assert string_match_all("anything", []) == 0.0
    assert string_match_all("  7331599\x00. The grass is green.", ["7331599"]) == 1.0  # postprocessed first


def test_string_match_part_is_any_value():
    assert string_match_part("the answer is Paris, France", ["paris", "lyon"]) == 1.0
    assert string_match_part("the answer is Rome", ["paris", "lyon"]) == 0.0


def test_contains_reads_whole_words_and_contains_all_every_value():
    assert retrieved_score("The city of Tressamor.", ["Tressamor"], "contains") == 1.0
    assert retrieved_score("1950", ["5"], "contains") == 0.0  # a substring is not a word
    assert retrieved_score("Ada and Bo", ["Ada", "Bo"], "contains_all") == 1.0
    assert retrieved_score("Ada alone", ["Ada", "Bo"], "contains_all") == 0.0
    with pytest.raises(WorkbenchError, match="unknown retrieval rule"):
        retrieved_score("x", ["x"], "fuzzy")


def test_each_data_set_reads_its_own_rule():
    ruler = load_dataset("ruler:niah_multivalue", n=1, tokenizer=TOKENIZER, target_tokens=900, passages=4)[0]
    assert ruler.retrieval == "string_match_all"
    assert ruler.retrieved(f"{ruler.gold[0]}, {ruler.gold[1]}") == 0.5  # two of the four values
    assert ruler.score(f"{ruler.gold[0]}, {ruler.gold[1]}")[0] == 0.0  # EM: all or nothing
    assert synthetic_examples(1)[0].retrieval == "contains"
    listed = Example("x", ("a b",), "q?", ("a", "b"), meta={"scoring": "all"})
    assert listed.retrieval == "contains_all"
    assert Example("x", ("a b",), "q?", ("a",), meta={"retrieval": "string_match_part"}).retrieval == "string_match_part"
    with pytest.raises(WorkbenchError, match="meta\\['retrieval'\\]"):
        Example("x", ("a b",), "q?", ("a",), meta={"retrieval": "fuzzy"})


# ---------------------------------------------------------------- ran_on

@pytest.mark.parametrize("text, n, expected", [
    ("1695484. There and back again. The grass is green.", 20, True),  # dense's answer, then more words
    ("1695484.", 8, False),  # dense's own answer
    ("1695484..", 9, False),  # a trailing full stop is not a run-on
    ("169", 3, False),  # shorter
    ("The special magic number is 1695484.", 7 + RAN_ON_MARGIN, False),  # longer, within the margin
    ("The special magic number is 1695484, I think.", 8 + RAN_ON_MARGIN + 1, True),  # past the margin
])
def test_ran_on_is_dense_then_more_words_or_past_the_margin(text, n, expected):
    assert ran_on(text, n, "1695484.", 8) is expected


def test_an_answer_cut_where_dense_was_cut_never_ran_on():
    dense = ": 7331599. The sky is blue. The sun is yellow. Here we go."  # dense ran to the limit too
    assert not ran_on(dense, 24, dense, 24)


# ---------------------------------------------------------------- evidence rows

def decoded(layout) -> str:
    return TOKENIZER.decode(layout.ids[layout.evidence])


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "niah_multivalue", "variable_tracking"])
def test_ruler_evidence_rows_are_exactly_the_queried_needles(task):
    example = load_dataset(f"ruler:{task}", n=3, tokenizer=TOKENIZER, target_tokens=1200, passages=5)[2]
    layout = build_layout(TOKENIZER, example)
    spans = [example.passages[p][a:b] for p, a, b in example.evidence]
    assert decoded(layout) == "".join(spans)
    if task == "niah_multikey":  # the queried key's needle alone, not the three others
        assert len(spans) == 1 and example.question.split(" for ")[1].split(" ")[0] in spans[0]
    if task in ("niah_single", "niah_multikey", "niah_multivalue"):
        assert sorted(s.rsplit(" ", 1)[1].rstrip(".") for s in spans) == sorted(example.gold)
    else:
        assert len(spans) == 5 and all(s.startswith("VAR ") for s in spans)


def test_hotpotqa_evidence_rows_are_its_supporting_sentences_in_every_passage_setting():
    records = json.loads((FIXTURES / "hotpotqa_sample.json").read_text())
    for passages in ("all", "gold"):
        for record, example in zip(records, load_hotpotqa(FIXTURES / "hotpotqa_sample.json", passages=passages)):
            sentences = {title: [s.strip() for s in ss] for title, ss in record["context"]}
            want = [sentences[title][i] for title, i in record["supporting_facts"] if i < len(sentences[title])]
            got = [example.passages[p][a:b] for p, a, b in example.evidence]
            assert sorted(got) == sorted(want), (passages, record["_id"])
            layout = build_layout(TOKENIZER, example)
            assert decoded(layout) == "".join(got)


def test_synthetic_evidence_is_the_supporting_facts():
    for example in synthetic_examples(8, filler_sentences=2):
        got = [example.passages[p][a:b] for p, a, b in example.evidence]
        assert sorted(p for p, _, _ in example.evidence) == sorted(example.meta["support_passages"])
        if example.meta["type"] == "bridge":
            coach = example.meta["bridge_entity"]
            assert got[0 if example.evidence[0][0] == example.meta["support_passages"][0] else 1].endswith(
                f"coached by {coach}.")
            assert any(g.startswith(f"{coach} was born in the city of {example.gold[0]}") for g in got)


def test_jsonl_evidence_spans_are_checked(tmp_path):
    good = {"id": "a", "passages": ["Alpha beta.", "Gamma delta."], "question": "q?", "answers": ["x"],
            "evidence": [[1, 0, 5]]}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(good) + "\n")
    (example,) = load_jsonl(path)
    assert example.evidence == ((1, 0, 5),)
    assert decoded(build_layout(TOKENIZER, example)) == "Gamma"
    for bad, message in (([[2, 0, 5]], "passage 2 does not exist"), ([[0, 3, 99]], "are not a span"),
                         ([[0, 1]], "three integers"), ("0:5", "must be a list")):
        path.write_text(json.dumps({**good, "evidence": bad}) + "\n")
        with pytest.raises(WorkbenchError, match=message):
            load_jsonl(path)


def test_an_example_without_evidence_has_none():
    assert small_example().evidence is None
    assert build_layout(TOKENIZER, small_example()).evidence is None


# ---------------------------------------------------------------- measures against the evidence

def test_average_precision_by_hand():
    scores = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert average_precision(scores, torch.tensor([False, True, False, True])) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert average_precision(scores, torch.tensor([True, True, False, False])) == 1.0
    assert math.isnan(average_precision(scores, torch.zeros(4, dtype=torch.bool)))


def test_recall_and_precision():
    evidence = torch.tensor([5, 6, 7, 8])
    assert recall_precision(torch.tensor([5, 6, 20]), evidence) == {"evidence_recall": 0.5,
                                                                     "evidence_precision": pytest.approx(2 / 3)}
    empty = recall_precision(torch.tensor([], dtype=torch.long), evidence)
    assert empty["evidence_recall"] == 0.0 and math.isnan(empty["evidence_precision"])
    assert all(math.isnan(v) for v in recall_precision(torch.tensor([5]), None).values())


def evidence_example() -> Example:
    """The small example with its supporting facts (passages 1 and 2) marked as evidence."""
    ex = small_example()
    return Example(ex.id, ex.passages, ex.question, ex.gold,
                   meta={"evidence": [[0, 0, len(ex.passages[0])], [1, 0, len(ex.passages[1])]]})


CONFIG = DiagnoseConfig(selectors=("none", "full", "cacheblend", "cadence-grad", "random"), budgets=(0.2, 0.5),
                        coin_draws=2, pool="all", max_new_tokens=4, attribution=False)


@pytest.fixture(scope="module", params=["llama", "gemma3_text"])
def diagnosed(request):
    torch.set_num_threads(1)
    model = tiny_model(request.param)
    return model, diagnose(model, evidence_example(), CONFIG, progress=False), \
        diagnose(model, small_example(), CONFIG, progress=False)


def test_full_recomputes_all_the_evidence_and_none_none_of_it(diagnosed):
    _, d, _ = diagnosed
    o = d.outcomes.set_index(["selector", "budget"])
    assert (o.loc["full", "evidence_recall"] == 1.0).all() and (o.loc["none", "evidence_recall"] == 0.0).all()
    assert d.outcomes["evidence_recall"].between(0, 1).all()
    assert {"retrieved", "ran_on", "answer_tokens"} <= set(d.outcomes.columns)
    assert d.tokens["evidence"].sum() == len(d.context.evidence) > 0


def test_reading_the_evidence_leaves_every_outcome_as_it_was(diagnosed):
    """The attention readers are read-only hooks on the answering pass: the outcomes of the example
    with evidence equal those of the same example without it, bit for bit."""
    _, with_evidence, without = diagnosed
    drop = ["evidence_recall", "evidence_precision", "seconds"]
    pd.testing.assert_frame_equal(with_evidence.outcomes.drop(columns=drop), without.outcomes.drop(columns=drop),
                                  check_exact=True)
    assert without.outcomes["evidence_recall"].isna().all()
    assert without.evidence_ranking.empty and without.evidence_attention.empty


def test_the_attention_on_the_evidence_is_dense_for_full_and_the_splice_for_none(diagnosed):
    model, d, _ = diagnosed
    a = d.evidence_attention
    by = {key: group.sort_values("layer")[["mass_last", "mass_mean"]].to_numpy()
          for key, group in a.groupby(["cell", "budget"], dropna=False)}
    dense = a[a["cell"] == "dense"].sort_values("layer")[["mass_last", "mass_mean"]].to_numpy()
    spliced = a[a["cell"] == "spliced"].sort_values("layer")[["mass_last", "mass_mean"]].to_numpy()
    assert len(dense) == model.adapter.n_layers
    assert torch.allclose(torch.tensor(by[("full", 0.5)]), torch.tensor(dense), atol=1e-5)
    assert torch.allclose(torch.tensor(by[("none", 0.5)]), torch.tensor(spliced), atol=1e-6)
    assert ((a["mass_mean"] >= 0) & (a["mass_mean"] <= 1)).all()
    assert dense[0] == pytest.approx(spliced[0], abs=1e-5)  # layer 0 is exact in the splice


def test_dense_attention_on_the_evidence_equals_hfs_eager_attention():
    """An independent reading: HF's eager attention over the dense ids, summed over the evidence
    rows, averaged over heads and the suffix rows (and the last suffix row alone)."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    d = diagnose(model, evidence_example(), CONFIG.with_(selectors=("none",), budgets=(0.2,)), progress=False)
    layout = d.ctx.layout
    model.hf.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = model.hf(layout.ids[None], output_attentions=True)
    finally:
        model.hf.config._attn_implementation = "sdpa"
    start = layout.suffix_start
    dense = d.evidence_attention[d.evidence_attention["cell"] == "dense"].sort_values("layer")
    for layer, probs in enumerate(out.attentions):  # [1, head, query, key]
        mass = probs[0, :, start:, layout.evidence].sum(-1)  # [head, suffix]
        assert dense["mass_mean"].iloc[layer] == pytest.approx(float(mass.mean()), abs=1e-5)
        assert dense["mass_last"].iloc[layer] == pytest.approx(float(mass[:, -1].mean()), abs=1e-5)


def test_scorers_rank_the_evidence_beside_chance(diagnosed):
    _, d, _ = diagnosed
    r = d.evidence_ranking
    assert {"cacheblend", "cadence-grad"} <= set(r.loc[r["kind"] == "selector", "scorer"])
    assert "full" not in set(r["scorer"]) and "random" not in set(r["scorer"])  # they rank nothing
    assert r["average_precision"].between(0, 1).all()
    assert (r["chance"] == r["n_evidence"] / r["n_pool"]).all()


def test_the_package_face_diagnoses_as_the_readme_shows():
    """`wb.diagnose(model, example, ...)` (README's API example; it raised AttributeError before)."""
    import workbench as wb

    torch.set_num_threads(1)
    d = wb.diagnose(tiny_model("llama"), evidence_example(), selectors=("cacheblend",), budgets=(0.2,),
                    max_new_tokens=3, progress=False)
    assert isinstance(d, wb.Diagnosis) and d.outcomes["evidence_recall"].notna().all()


def test_a_diagnosis_saved_before_retrieved_existed_reads_it_from_its_answers():
    """A committed record (2026-12-03) has no `retrieved`: reading it computes the column from each
    answer's text and the example, exactly what a run today records."""
    from workbench.diagnosis import Diagnosis

    folder = Path(__file__).parents[2] / "docs" / "records" / "study-ruler-mk512-smollm2" / "diagnoses" / "0"
    d = Diagnosis.load(folder)
    assert d.outcomes["retrieved"].tolist() == [d.example.retrieved(a) for a in d.outcomes["answer"]]
    assert d.answers.spliced.retrieved == d.example.retrieved(d.answers.spliced.text)
