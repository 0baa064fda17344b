"""`experiments.answer_sources`: each answer word traced to the evidence, the prompt, the passages around
the evidence, the passages without any, or nowhere; the per-cell table of a run; and, on the committed
10.12w record, the flag equal to the readings' hand count of the haystack's five filler sentences."""

from __future__ import annotations

import math

import pytest

from workbench import cli
from workbench.errors import WorkbenchError
from workbench.experiments.answer_sources import (
    SOURCES, SourceTexts, answer_sources, answer_sources_table, recited_note,
)
from workbench.runstore import load_sweep
from workbench.tasks import Example

NEEDLE = "The key of rook is 4417."
FILLER = " The grass is green. The sky is blue."


def _example(**meta) -> Example:
    """A needle (the evidence) beside filler in passage 0; passage 1 is filler and a distractor fact."""
    passages = [NEEDLE + FILLER, "Here we go. Larch Hall stands in Vell."]
    return Example(id="x", passages=passages, question="What is the key of rook?", gold=["4417"],
                   meta={"evidence": [[0, 0, len(NEEDLE)]], "answer_lead": "The key of rook is", **meta})


def _traced(answer: str) -> list[tuple[str, str]]:
    return [(word, source) for word, source, _ in SourceTexts(_example()).trace(answer)]


def test_each_word_goes_to_the_source_of_its_longest_run():
    assert _traced("4417. The grass is green") == [
        ("4417", "evidence"), ("the", "same_passage"), ("grass", "same_passage"), ("is", "same_passage"),
        ("green", "same_passage")]
    assert _traced("Larch Hall stands in Vell, 9") == [
        *[(w, "other_passages") for w in ("larch", "hall", "stands", "in", "vell")], ("9", "new")]


def test_a_tie_goes_to_the_evidence_then_the_prompt():
    # "the key of rook is" is as long in the needle as in the answer lead: the evidence's
    assert {s for _, s in _traced("The key of rook is")} == {"evidence"}
    # "what" is the question's alone; "is" is everywhere, and its longest run here is with "what"
    assert _traced("what is") == [("what", "prompt"), ("is", "prompt")]


def test_a_run_of_three_in_the_evidence_keeps_its_words_against_a_longer_one_elsewhere():
    city = Example(id="c", passages=["Ann lives in New York City.", "Bo moved to New York City in May."],
                   question="Where does Ann live?", gold=["New York City"], meta={"evidence": [[0, 0, 27]]})
    traced = SourceTexts(city).trace("moved to New York City")
    assert [(w, s, n) for w, s, n in traced] == [("moved", "other_passages", 5), ("to", "other_passages", 5),
                                                 ("new", "evidence", 3), ("york", "evidence", 3),
                                                 ("city", "evidence", 3)]
    # below three words the longest run takes them: "new york" is two in the evidence, "to new york" three there
    assert SourceTexts(city).sources("to new york")["other_passages"] == 1.0


def test_runs_do_not_cross_an_evidence_edge():
    # "4417 the" spans the needle's end and the filler's start: two runs of one word each
    traced = SourceTexts(_example()).trace("4417 the grass")
    assert [(w, s, n) for w, s, n in traced] == [("4417", "evidence", 1), ("the", "same_passage", 2),
                                                 ("grass", "same_passage", 2)]


def test_reciting_takes_three_consecutive_words_credited_outside_the_evidence():
    texts = SourceTexts(_example())
    assert texts.sources("4417, the sky is blue")["recites_context"] is True
    assert texts.sources("4417, the sky")["recites_context"] is False  # a run of two
    assert texts.sources("The key of rook is 4417")["recites_context"] is False
    # a distractor holds all four words, the question three of them: only "industry" is credited outside
    hedge = Example(id="h", passages=["Ann runs the fund.", "The hedge fund industry grew."],
                    question="What is the hedge fund?", gold=["x"], meta={"evidence": [[0, 0, 18]]})
    traced = SourceTexts(hedge).trace("The hedge fund industry")
    assert [s for _, s, _ in traced] == ["prompt", "prompt", "prompt", "other_passages"]
    assert SourceTexts(hedge).sources("The hedge fund industry")["recites_context"] is False  # one word outside
    assert texts.recited("there, there, there, there") == []  # filler words found one at a time
    shares = texts.sources("4417 here we go 12")
    assert shares["words"] == 5 and math.isclose(sum(shares[s] for s in SOURCES), 1.0)
    assert shares["other_passages"] == pytest.approx(3 / 5) and shares["new"] == pytest.approx(1 / 5)


def test_an_empty_answer_has_no_shares_and_recites_nothing():
    out = SourceTexts(_example()).sources("  ...")
    assert out["words"] == 0 and all(math.isnan(out[s]) for s in SOURCES) and out["recites_context"] is False


def test_an_example_without_evidence_or_with_an_empty_list_is_refused():
    bare = Example(id="y", passages=["Some text here."], question="What?", gold=["text"])
    for example in (bare, Example(id="z", passages=bare.passages, question="What?", gold=["text"],
                                  meta={"evidence": []})):
        with pytest.raises(WorkbenchError, match="defines no evidence"):
            SourceTexts(example)


def test_overlapping_evidence_spans_are_one_piece():
    # [0, 12) and [6, 24) overlap: "of rook is" crosses the first span's end and is still one evidence run
    example = _example(evidence=[[0, 0, 12], [0, 6, len(NEEDLE)]])
    assert SourceTexts(example).trace("key of rook is 4417") == [(w, "evidence", 5)
                                                                 for w in ("key", "of", "rook", "is", "4417")]


@pytest.fixture(scope="module")
def run(evidence_run):
    return load_sweep(evidence_run)


def test_a_run_is_read_over_its_examples_with_evidence_and_dense_and_the_splice_first(run):
    cells = answer_sources(run)
    assert cells.attrs["left_out"] == 1 and set(cells["example_id"]) == {"in_pool", "first_only"}
    assert list(cells["selector"][:4]) == ["dense", "dense", "splice", "splice"]
    with_words = cells[cells["words"] > 0]
    assert (with_words[list(SOURCES)].sum(axis=1) - 1).abs().max() < 1e-12
    table = answer_sources_table(run).set_index(["selector", "budget"])
    assert table.loc[("random", 0.2), "cells"] == 4  # two examples x two draws, pooled
    mine = cells[(cells["selector"] == "cacheblend") & (cells["budget"] == 0.5)]
    assert table.loc[("cacheblend", 0.5), "recites_context"] == mine["recites_context"].mean()
    assert table.loc[("cacheblend", 0.5), "answered"] == (mine["words"] > 0).sum()
    assert cells["words"].dtype == int and cells["recites_context"].dtype == bool
    assert table.loc[("cacheblend", 0.5), "evidence"] == pytest.approx(mine.loc[mine["words"] > 0, "evidence"].mean())


def test_a_run_without_recorded_evidence_is_not_read(run):
    from dataclasses import replace

    from workbench.experiments.answer_sources import run_has_evidence

    assert run_has_evidence(run)
    assert not run_has_evidence(replace(run, examples=run.examples.drop(columns="n_evidence")))
    assert not run_has_evidence(replace(run, examples=run.examples.assign(n_evidence=None)))


def test_kvwb_summary_prints_where_the_words_come_from(run, capsys):
    assert cli.main(["summary", str(run.folder)]) == 0
    out = capsys.readouterr().out
    assert "Where the answers' words come from at b = 0.2" in out
    assert "1 example(s) define no evidence and are left out of both tables." in out


def test_what_an_answer_recites_is_quoted_each_stretch_once():
    texts = SourceTexts(_example())
    assert texts.recited("4417, the grass is green, 9, the sky is blue") == ["the grass is green", "the sky is blue"]
    example = _example()
    assert recited_note(example, "the sky is blue, 4417, the sky is blue") == 'recites the passages: "the sky is blue"'
    three = "the grass is green 1 the sky is blue 2 here we go"
    assert recited_note(example, three) == 'recites the passages: "the grass is green", "the sky is blue", …'
    assert recited_note(example, "4417") == recited_note(example, float("nan")) == recited_note(None, "x") == ""


def test_the_report_quotes_what_each_answer_recites(recited_run):
    from workbench.report.html import diagnosis_to_html

    page = diagnosis_to_html(load_sweep(recited_run).diagnosis("r"))
    assert page.count("<i>recites the passages: &quot;grass is green&quot;</i>") == 3  # the splice, none, cacheblend


FILLER_SENTENCES = ("the grass is green", "the sky is blue", "the sun is yellow", "here we go", "there and back again")


def test_on_the_10_12w_record_reciting_is_the_readings_hand_count_of_the_filler(restore_record, tmp_path):
    """The 10.12w readings counted, by hand, the answers that contain one of RULER's five filler
    sentences; on that record the traced flag agrees answer for answer, at every budget."""
    cells = answer_sources(load_sweep(restore_record("study-10.12w-mv1024-smollm2", tmp_path)))
    by_hand = cells["answer"].str.lower().map(lambda a: any(s in a for s in FILLER_SENTENCES))
    assert len(cells) == 200 * (2 + 5 * 15)  # dense, the splice, ten selectors and five coin draws x 5 budgets
    assert (cells["recites_context"] == by_hand).all()
    at = cells[cells["budget"] == 0.2].groupby("selector")["recites_context"].mean()
    assert at["cadence-grad"] == pytest.approx(0.415) and at["cacheblend"] == 0
