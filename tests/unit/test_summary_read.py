"""`kvwb summary --contrast ... --read K` prints, after each contrast, a seeded sample of the examples
where A and B differ on the quantity the contrast tests, with their answers (experiments.behind)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from workbench.cli.main import main as kvwb
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.behind import examples_behind
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import load_sweep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_llama):
    out = tmp_path_factory.mktemp("read") / "tiny"
    config = SweepConfig(dataset=f"jsonl:{FIXTURE}", n=3, diagnose=DiagnoseConfig(
        selectors=("none", "full", "cacheblend", "random"), budgets=(0.2, 0.5), max_new_tokens=4, attribution=False))
    run_sweep(tiny_llama, config, out, progress=False)
    return load_sweep(out)


def _at(run, label, budget):
    o = run.outcomes
    return o[(o["selector"] == label) & ((o["budget"] - budget).abs() < 1e-9)].set_index("example_id")


def test_the_counts_and_the_sample_are_the_differing_examples_with_their_answers(run):
    a, b = _at(run, "none", 0.5), _at(run, "full", 0.5)
    flips = (a["flip"].astype(float) - b["flip"].astype(float))
    differing = set(flips[flips != 0].index)
    assert differing, "the fixture must give a splice that flips somewhere (none vs full)"
    behind = examples_behind(run, "none:full@0.5", "flip", k=2)
    assert (behind.a_higher, behind.b_higher) == (int((flips > 0).sum()), int((flips < 0).sum()))
    shown = behind.shown
    assert len(shown) == min(2, len(differing)) and set(shown["example_id"]) <= differing
    for row in shown.itertuples(index=False):
        assert row.budget == 0.5
        assert row[shown.columns.get_loc("none")] == a.loc[row.example_id, "answer"].replace("\n", " ⏎ ")[:120]
        assert row[shown.columns.get_loc("full")] == b.loc[row.example_id, "answer"].replace("\n", " ⏎ ")[:120]
    assert examples_behind(run, "none:full@0.5", "flip", k=2).shown.equals(shown)  # seeded: the same sample


def test_at_auc_each_example_is_shown_where_the_two_differ_most(run):
    """Values set by hand so the widest gap is at the second budget for q1 and at the first for q2."""
    o = run.outcomes.copy()
    none, full = o["selector"] == "none", o["selector"] == "full"
    o.loc[full, "f1_to_dense"] = 1.0
    for example, at_02, at_05 in (("q1", 0.5, 0.0), ("q2", 0.0, 0.5), ("q3", 1.0, 1.0)):
        for budget, value in ((0.2, at_02), (0.5, at_05)):
            o.loc[none & (o["example_id"] == example) & ((o["budget"] - budget).abs() < 1e-9), "f1_to_dense"] = value
    behind = examples_behind(replace(run, outcomes=o), "none:full@auc", "f1_to_dense", k=4)
    assert behind.at == "auc over 0.2-0.5" and (behind.a_higher, behind.b_higher) == (0, 2)  # q3: no difference
    assert dict(zip(behind.shown["example_id"], behind.shown["budget"])) == {"q1": 0.5, "q2": 0.2}
    shown = behind.shown.set_index("example_id")
    assert shown.loc["q1", "none f1_to_dense"] == 0.0 and shown.loc["q2", "none f1_to_dense"] == 0.0


def test_the_cli_prints_them_after_each_contrast_and_refuses_read_without_one(run, capsys):
    folder = str(run.folder)
    assert kvwb(["summary", folder, "--measure", "flip", "--contrast", "none:full@0.5",
                 "--contrast", "cacheblend:random@0.2", "--read", "3"]) == 0
    out = capsys.readouterr().out
    assert "Behind none vs full at 0.5 on flip: of 3 examples" in out
    assert "Behind cacheblend vs random at 0.2 on flip" in out
    assert kvwb(["summary", folder, "--read", "3"]) != 0
    assert "give --contrast or --preregistered" in capsys.readouterr().err
    assert kvwb(["summary", folder, "--contrast", "none:full@0.5", "--read", "-1"]) != 0
    assert ">= 0" in capsys.readouterr().err


def test_a_bar_inside_a_cell_keeps_the_markdown_table_whole():
    import pandas as pd

    from workbench.report.markdown import markdown_table

    row = markdown_table(pd.DataFrame({"gold": ["Heskara Mills | Heskara"], "n": [1]})).splitlines()[2]
    assert row == "| Heskara Mills \\| Heskara | 1 |"  # three cells' bars, the gold's escaped


def test_an_answer_of_no_token_is_shown_as_ended_at_once():
    """`kvwb summary --read` shows a cell that ended at once (an end of turn first) as such, not as an
    empty cell, which reads as a value missing; a draw-less missing count shows the text."""
    from types import SimpleNamespace

    import pandas as pd

    from workbench.experiments.behind import _cell_answer, _shown
    from workbench.experiments.blank_answers import ENDED_AT_ONCE

    outcomes = pd.DataFrame({"selector": ["a", "b", "c"], "example_id": "e0", "budget": 0.2,
                             "answer": ["", "x", ""], "answer_tokens": [0, 1, None]})
    run = SimpleNamespace(outcomes=outcomes)
    shown = {label: _shown(*_cell_answer(run, label, "e0", 0.2)) for label in ("a", "b", "c", "missing")}
    assert shown == {"a": f"({ENDED_AT_ONCE})", "b": "x", "c": "", "missing": ""}


def test_the_note_quotes_what_each_answer_shown_recites(recited_run, run):
    """On a run whose examples define evidence, the `note` column quotes the stretches of the passages
    outside it that each answer shown reads back (conftest's `recited_run`: the splice and CacheBlend
    scripted to answer " grass is green", the filler beside the needle); a run without evidence has
    no such column."""
    from conftest import RECITED_SAID

    recited = load_sweep(recited_run)
    o = recited.outcomes.copy()
    o["f1_to_dense"] = (o["selector"] == "cacheblend").astype(float)  # so that the two differ on example r
    behind = examples_behind(replace(recited, outcomes=o), "cacheblend:none@0.2", "f1_to_dense", k=1)
    quoted = f'recites the passages: "{RECITED_SAID.strip()}"'
    assert behind.shown["note"].tolist() == [f"cacheblend {quoted}; none {quoted}"]
    assert behind.shown["cacheblend"].tolist() == [RECITED_SAID.strip()]  # the answer as stored
    assert "note" not in examples_behind(run, "none:full@0.5", "flip", k=2).shown


def test_run_example_reads_the_folder_of_the_example_asked_for(tmp_path):
    """`answer_lines.run_example` finds an example by its id, compared as text ("2" is not "10", nor row 0),
    and names the file it cannot read."""
    import json
    from types import SimpleNamespace

    import pandas as pd

    from workbench.errors import WorkbenchError
    from workbench.experiments.answer_lines import run_example

    examples = pd.DataFrame({"example_id": [10, 2], "folder": ["f10", "f2"]})
    for example_id, folder in (("10", "f10"), ("2", "f2")):
        (tmp_path / "diagnoses" / folder).mkdir(parents=True)
        (tmp_path / "diagnoses" / folder / "diagnosis.json").write_text(json.dumps(
            {"example": {"id": example_id, "passages": [f"passage of {example_id}"], "question": "q"}}))
    run = SimpleNamespace(examples=examples, folder=tmp_path)
    assert run_example(run, "2").passages == ("passage of 2",)
    assert run_example(run, 10).id == "10"
    with pytest.raises(WorkbenchError, match="no finished example '3'"):
        run_example(run, "3")
    (tmp_path / "diagnoses" / "f2" / "diagnosis.json").write_text("{")
    with pytest.raises(WorkbenchError, match="diagnosis.json is unreadable"):
        run_example(run, "2")
