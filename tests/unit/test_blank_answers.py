"""`experiments.blank_answers`: answers that name nothing, the artefact a first-line rule can hide.
On tables by hand, then on two tiny sweeps of the same data whose cells answer a scripted ":", line
break, "BC" (gold "BC"): under the first-line rule every cell's answer is ":" and the summary says
so, with the option that reads past the line; scored whole, no cell is blank. A third sweep's cells
end at once (an end-of-turn token first): blank under any rule, and the summary says that instead."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import workbench as wb
from test_answer_lines import _scripted
from test_whole_answer import B, C, NL, TOK
from workbench.diagnosis import DiagnoseConfig
from workbench.engine.decode import stop_token_ids
from workbench.experiments.blank_answers import BLANK_SHARE, blank_sentence, blank_table, ended_at_once, is_blank
from workbench.experiments.summary import summarize, tokens_to_target
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.report import sweep_summary_markdown
from workbench.runstore import load_sweep
from workbench.tasks import Example

COLON = TOK(":", add_special_tokens=False)["input_ids"][0]


@pytest.mark.parametrize("text, blank", [("", True), (":", True), (" - .", True), ("1.", False), ("A", False),
                                         ("é", False), (None, False), (float("nan"), False)])
def test_a_blank_answer_has_no_letter_or_digit(text, blank):
    assert is_blank(text) is blank


def _cells():
    """Two examples; `a` answers ":" (two tokens) once and "x" once, `b` never blank; a drawn `c` whose
    draw 1 ends at once (no token) on both examples; dense names something on example 0 only."""
    dense = {"e0": "x", "e1": ""}
    rows = [("a", 0.2, None, "e0", ":", 2), ("a", 0.2, None, "e1", "x", 1), ("b", 0.2, None, "e0", "x", 1),
            ("b", 0.2, None, "e1", "x", 1), ("c", 0.2, 0, "e0", "x", 1), ("c", 0.2, 0, "e1", "x", 1),
            ("c", 0.2, 1, "e0", "", 0), ("c", 0.2, 1, "e1", "", 0), ("none", 0.2, None, "e0", ":", 2)]
    outcomes = pd.DataFrame(rows, columns=["selector", "budget", "draw", "example_id", "answer", "answer_tokens"])
    outcomes["dense_answer"] = outcomes["example_id"].map(dense)
    examples = pd.DataFrame({"example_id": ["e0", "e1"], "dense_answer": ["x", ""], "spliced_answer": [":", ":"],
                             "spliced_answer_tokens": [2, 2]})
    return outcomes, examples


def test_the_table_counts_blank_answers_where_dense_names_something():
    table = blank_table(*_cells()).set_index("selector")
    assert "none" not in table.index  # the splice's cache again: the splice's row says it
    assert table.loc["a", "blank_share"] == 0.5 and table.loc["b", "blank_share"] == 0
    assert table.loc["c", "blank_share"] == 0.25 and table.loc["c", "cells"] == 4  # e1's blank: dense's is too
    assert table.loc["splice", "blank_share"] == 0.5 and pd.isna(table.loc["splice", "budget"])
    # of the blank cells, those that ended at once: a's and the splice's ":" did not, c's "" did
    assert table.loc["a", "ended_share"] == 0 and table.loc["c", "ended_share"] == 1
    assert pd.isna(table.loc["b", "ended_share"]) and table.loc["splice", "ended_share"] == 0
    assert ended_at_once(table.reset_index()) == pytest.approx(1 / 3)  # one blank cell each in a, c and the splice


def test_the_sentence_says_which_blank_answers_ended_at_once():
    outcomes, examples = _cells()
    mixed = blank_sentence(blank_table(outcomes, examples), whole=False)
    assert "33% of the blank answers ended at once" in mixed and "--no-stop-at-newline" in mixed
    unknown = blank_sentence(blank_table(outcomes.drop(columns="answer_tokens"),
                                         examples.drop(columns="spliced_answer_tokens")), whole=False)
    assert "ended at once" not in unknown and "--no-stop-at-newline" in unknown  # an older record
    ended = blank_table(outcomes.assign(answer_tokens=0), examples.assign(spliced_answer_tokens=0))
    line = blank_sentence(ended, whole=False)
    assert "Every blank answer here ended at once" in line and "--no-stop-at-newline" not in line
    # the splice's count known, the cells' not (a record from before `answer_tokens`): nothing pooled
    splice_only = blank_table(outcomes.drop(columns="answer_tokens"), examples.assign(spliced_answer_tokens=0))
    assert pd.isna(ended_at_once(splice_only))
    line = blank_sentence(splice_only, whole=False)
    assert "ended at once" not in line and "--no-stop-at-newline" in line
    # a blank cell whose count is missing (a resumed run's older cells): its row's share is unknown
    partial = outcomes.assign(answer_tokens=outcomes["answer_tokens"].where(outcomes["selector"] != "c"))
    assert pd.isna(blank_table(partial, examples).set_index("selector").loc["c", "ended_share"])


def test_the_sentence_names_who_answers_blank_most_and_how_to_read_past_the_line():
    table = blank_table(*_cells())
    line = blank_sentence(table, whole=False)
    assert line.index("a 50% at b = 0.2") < line.index("splice 50%") < line.index("c 25% at b = 0.2")
    assert "b 0%" not in line and "--no-stop-at-newline" in line
    whole = blank_sentence(table, whole=True)
    assert "--no-stop-at-newline" not in whole and "scored whole" in whole
    assert blank_sentence(table.assign(blank_share=BLANK_SHARE / 2), whole=False) == ""
    assert "<a> 50%" in blank_sentence(table, whole=False, name=lambda s: f"<{s}>")
    assert blank_sentence(blank_table(pd.DataFrame({"selector": []}), pd.DataFrame()), whole=False) == ""


def _named_by_dense(model) -> list[Example]:
    """Two examples of one byte length (one position is every example's last suffix row) on which the
    tiny model's own (dense) first-line answer names something: a blank cell then counts."""
    found = []
    for i in range(10):
        example = Example(id=f"e{i}", passages=[f"Pass{i} one is here.", f"Pass{i} two is there."],
                          question=f"What is thing {i}?", gold=["BC"])
        ctx = wb.build_context(model, example)
        if not is_blank(ctx.generate(ctx.dense, 4, stop_at_newline=True).text):
            found.append(example)
    assert len(found) >= 2, "the tiny model answers blank on most of these examples: choose others"
    return found[:2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("blank")
    data = root / "d.jsonl"
    examples = _named_by_dense(tiny_llama)
    data.write_text("\n".join(json.dumps({"id": e.id, "passages": list(e.passages), "question": e.question,
                                           "answers": list(e.gold)}) for e in examples))
    first = wb.build_context(tiny_llama, examples[0]).layout.n_tokens - 1
    made = {}
    end = min(stop_token_ids(tiny_llama))
    for name, rule, script in ((True, True, (COLON, NL, B, C)), (False, False, (COLON, NL, B, C)),
                               ("ended", True, (end,))):
        config = SweepConfig(dataset=f"jsonl:{data}", n=2, diagnose=DiagnoseConfig(
            selectors=("none", "full", "cacheblend"), budgets=(0.2,), max_new_tokens=4, attribution=False,
            stop_at_newline=rule))
        run_sweep(tiny_llama, config, root / f"stop-{name}", progress=False, hooks=_scripted(first, script))
        made[name] = load_sweep(root / f"stop-{name}")
    return made


def _summary(run) -> str:
    table = summarize(run)
    return sweep_summary_markdown(run, table, tokens_to_target(table, run.examples, 0.9, 0.1))


def test_a_first_line_runs_summary_names_its_blank_answers(runs):
    run = runs[True]
    assert set(run.outcomes["answer"]) == {":"}  # the first line of ":\nBC"
    assert not run.examples["dense_answer"].map(is_blank).any()  # the tiny model's own answers name something
    blank = blank_table(run.outcomes, run.examples).set_index("selector")["blank_share"]
    assert blank["cacheblend"] == 1 and blank["splice"] == 1
    assert "cacheblend 100% at b = 0.2" in _summary(run) and "--no-stop-at-newline" in _summary(run)
    assert "Blank answers" not in _summary(runs[False])  # ":\nBC" names the gold: not blank
    assert blank_table(run.outcomes, run.examples)["ended_share"].eq(0).all()  # ":" is a token, then a line break


def test_a_runs_summary_says_its_blank_answers_ended_at_once(runs):
    """Cells whose first token ends the turn: blank under either rule, and reading past the line break
    would change nothing, so the summary says so rather than offering --no-stop-at-newline."""
    run = runs["ended"]
    assert set(run.outcomes["answer"]) == {""} and run.outcomes["answer_tokens"].eq(0).all()
    table = blank_table(run.outcomes, run.examples).set_index("selector")
    assert table.loc["cacheblend", "ended_share"] == 1 and table.loc["splice", "ended_share"] == 1
    summary = _summary(run)
    assert "Every blank answer here ended at once" in summary and "--no-stop-at-newline" not in summary


def test_a_table_without_cells_has_the_splices_row_alone():
    _, examples = _cells()
    table = blank_table(pd.DataFrame(), examples)
    assert list(table["selector"]) == ["splice"] and table["blank_share"].iloc[0] == 0.5
