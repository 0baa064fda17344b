"""The explorer on kept records (docs/records/keep.py: each example's outcomes only) and "Against
another run" across runs of different data: no exception, one line on what a record lacks, pairs
made by the example's content (question and passages), never by id alone."""

from __future__ import annotations

import shlex
import shutil

import pytest

from apptest import frame_with, ok, open_page, texts, unescape
from small_runs import config
from workbench.experiments.sweep import SweepConfig, run_sweep

RECORD = "study-ruler-mk512-smollm2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, restore_record, tiny_llama):
    """A restored RULER record (ids 0..199) and a synthetic sweep whose example "0" is another one,
    with a copy of that sweep (the same examples under the same ids)."""
    root = tmp_path_factory.mktemp("records") / "runs"
    restore_record(RECORD, root)
    run_sweep(tiny_llama, SweepConfig(dataset="synthetic", n=1, diagnose=config(budgets=(0.2,))),
              root / "synth", progress=False)
    shutil.copytree(root / "synth", root / "synth-copy")
    return root


@pytest.fixture(autouse=True)
def _env(runs, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def explorer(run: str, example: str = "0"):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value(run).run()
    ok(at)
    at.selectbox(key="explorer_example").set_value(example).run()
    ok(at)
    return at


def test_a_restored_record_opens_with_its_answers_and_one_line_on_what_it_lacks():
    at = explorer(RECORD, "3")
    notes = [unescape(i.value) for i in at.info if "kept record" in i.value]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "no tokens, selections, token_signals, deviation, residual tables" in notes[0]
    command = shlex.split(notes[0].split("`")[1])
    assert command[:6] == ["kvwb", "diagnose", "--model", "smollm2-135m", "--example", "ruler:niah_multikey#3"]
    assert command[command.index("--target-tokens") + 1] == "512" and "--out" in command
    answers = frame_with(at, "cache", "answer", "flip vs dense")
    assert list(answers["cache"])[:2] == ["dense", "spliced"] and len(answers) > 2
    assert frame_with(at, "selector", "budget", "answer", "em").shape[0] > 0  # the outcomes
    assert not at.get("plotly_chart")  # no figure drawn from tables it lacks
    at.select_slider(key="explorer_budget").set_value(0.3).run()
    ok(at)
    assert at.query_params["budget"] == "0.3" and at.query_params["example"] == "3"


def test_against_another_run_refuses_another_example_under_the_same_id():
    at = explorer("synth")
    said = unescape(texts(at))
    assert f"Not compared: {RECORD} holds an example 0 with another question or passages" in said
    assert at.selectbox(key="explorer_other_run").options == ["synth-copy"]  # the same example, another run
    assert at.query_params["run"] == "synth"  # the permalink written


def test_a_record_is_set_against_runs_only_by_content():
    at = explorer(RECORD, "0")
    said = unescape(texts(at))
    assert "Not compared: synth, synth-copy hold an example 0" in said
    assert not [s for s in at.selectbox if s.key == "explorer_other_run"]
