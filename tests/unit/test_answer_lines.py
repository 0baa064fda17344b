"""`experiments.answer_lines`: a whole-answer run read on its first lines, and two records paired cell
for cell. Two tiny sweeps of the same data, one per answer rule, whose cells answer a scripted "A",
line break, "BC" (through the hooks a sweep runs; gold "BC"): the first line names nothing, the whole
answer names the gold."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from conftest import scripted_cells
from test_whole_answer import A, B, C, NL
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError
from workbench.experiments.answer_lines import first_line, first_line_table, pairing
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import load_sweep
from workbench.tasks import Example

SELECTORS, BUDGETS = ("none", "full", "cacheblend", "coin:cacheblend"), (0.2, 0.5)


def _examples() -> list[Example]:
    """Two examples of the same byte length (the tiny model's tokenizer is bytewise), so one position
    is every example's last suffix row."""
    return [Example(id=f"e{i}", passages=[f"Pass{i} one is here.", f"Pass{i} two is there."],
                    question=f"What is thing {i}?", gold=["BC"]) for i in range(2)]


def _scripted(first: int, script=(A, NL, B, C)):
    """A hook_unembed that makes every answer of the splice and the repairs `script` (its tokens)."""
    return scripted_cells(first, script)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("lines")
    data = root / "d.jsonl"
    data.write_text("\n".join(json.dumps({"id": e.id, "passages": list(e.passages), "question": e.question,
                                           "answers": list(e.gold)}) for e in _examples()))
    first = wb.build_context(tiny_llama, _examples()[0]).layout.n_tokens - 1
    assert first == wb.build_context(tiny_llama, _examples()[1]).layout.n_tokens - 1
    made = {}
    for rule in (True, False):
        config = SweepConfig(dataset=f"jsonl:{data}", n=2, diagnose=DiagnoseConfig(
            selectors=SELECTORS, budgets=BUDGETS, max_new_tokens=4, attribution=False, stop_at_newline=rule,
            coin_draws=2))
        run_sweep(tiny_llama, config, root / f"stop-{rule}", progress=False, hooks=_scripted(first))
        made[rule] = load_sweep(root / f"stop-{rule}")
    return made


def test_a_whole_answer_run_names_the_gold_its_first_lines_do_not(runs):
    table = first_line_table(runs[False]).set_index(["selector", "budget"])
    cells = table.drop(index=["dense"], level="selector")  # dense's answer is the model's own (unhooked)
    assert (cells["retrieved_first_line"] == 0).all() and (cells["retrieved_whole"] == 1).all()
    assert (cells["share_more"] == 1).all()
    assert table.loc[("coin:cacheblend", 0.2), "cells"] == 4  # two examples x two draws
    assert set(table.index.get_level_values("selector")) == {*SELECTORS, "splice", "dense"}


def test_a_first_line_run_is_refused_with_the_reason(runs):
    with pytest.raises(WorkbenchError, match="scored first lines"):
        first_line_table(runs[True])


def test_two_records_of_one_data_set_pair_cell_for_cell_and_a_changed_row_count_is_named(runs):
    paired = pairing(runs[False], runs[True])
    n_cells = 2 * 5 * len(BUDGETS)  # examples x (none, full, cacheblend and two coin draws) x budgets
    assert paired["shared"] == paired["expected"] == n_cells and paired["differ"].empty
    assert paired["same_first_line"] == 1.0
    fewer = runs[True].outcomes[runs[True].outcomes["selector"] != "full"]  # a cell the other lacks is not expected
    other = type(runs[True])(runs[True].folder, runs[True].manifest, runs[True].examples, fewer)
    assert pairing(runs[False], other)["expected"] == pairing(runs[False], other)["shared"] == n_cells * 4 // 5
    keys = fewer.assign(example_id=fewer["example_id"].astype(str) + "x")  # ids that do not join: none expected
    assert pairing(runs[False], type(other)(other.folder, other.manifest, other.examples, keys))["expected"] == 0
    changed = runs[True].outcomes.copy()
    changed.loc[(changed["selector"] == "cacheblend") & (changed["budget"] == 0.5), "n_recomputed"] += 1
    other = type(runs[True])(runs[True].folder, runs[True].manifest, runs[True].examples, changed)
    differ = pairing(runs[False], other)["differ"]
    assert sorted(differ["example_id"]) == ["e0", "e1"] and set(differ["selector"]) == {"cacheblend"}


def test_first_line_is_the_default_rules_answer():
    assert first_line(" :\n1. 7418542\n2. 55") == ":" and first_line("1695484") == "1695484"
    assert first_line("") == ""


def test_the_analysis_script_checks_the_pairing_first_then_reads_every_section(runs, tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "docs" / "records" / "analyse-10.12w.sh"
    whole, first = tmp_path / "whole", tmp_path / "first"
    for rule, folder in ((False, whole), (True, first)):
        shutil.copytree(runs[rule].folder, folder)
        (folder / "preregistration.json").write_text(json.dumps(
            {"source": "a test", "measure": "retrieved", "families": {"A": {"A1": "cacheblend:coin@auc"}}}))
    env = {**os.environ, "KVWB": f"{sys.executable} -m workbench.cli", "PY": sys.executable}
    done = subprocess.run(["bash", str(script), str(whole), str(first)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    heads = [done.stdout.index(f"## {k}.") for k in range(7)]
    assert heads == sorted(heads)
    assert ("shared cells: 20 of the 20 expected; cells whose rows differ: 0; share whose first line here is the "
            "other record's answer: 1.0000") in done.stdout
    assert "Family A (A1), pre-registered" in done.stdout[heads[1]:heads[2]]
    assert "'A\\nBC'" in done.stdout[heads[6]:]  # the whole answers, as decoded
    broken = tmp_path / "broken"
    shutil.copytree(runs[True].folder, broken)
    outcomes = pd.read_parquet(broken / "outcomes.parquet")
    outcomes.loc[outcomes["selector"] == "cacheblend", "n_recomputed"] += 1
    outcomes.to_parquet(broken / "outcomes.parquet")
    refused = subprocess.run(["bash", str(script), str(whole), str(broken)], capture_output=True, text=True,
                             env=env, timeout=600)
    assert refused.returncode == 1 and refused.stdout == "" and "the pairing is broken" in refused.stderr
    assert "cells whose rows differ: 4" in refused.stderr and "| e0 | cacheblend |" in refused.stderr  # the cells
    manifest = json.loads((whole / "manifest.json").read_text())
    (whole / "manifest.json").write_text(json.dumps({**manifest, "args": {**manifest["args"], "n": 200}}))
    assert subprocess.run(["bash", str(script), str(whole), str(first)], capture_output=True, text=True, env=env,
                          timeout=600).returncode == 1  # short of its n: refused
    partial = subprocess.run(["bash", str(script), str(whole), str(first)], capture_output=True, text=True,
                             env={**env, "PARTIAL": "1"}, timeout=600)
    assert partial.returncode == 0, partial.stderr
    lines = partial.stdout
    assert "(PARTIAL: 2 of 200 examples)" in lines.splitlines()[0]
    assert "pre-registered" not in lines[lines.index("## 1."):lines.index("## 2.")]  # no family tested
    assert "## 1. Primary: PARTIAL, no family tested" in lines
    assert "(not tested on a partial run)" in lines[lines.index("## 4."):]


def test_the_summary_says_a_run_scored_whole_answers_and_only_then(runs, capsys):
    from workbench.cli.main import main as kvwb

    for rule in (False, True):
        assert kvwb(["summary", str(runs[rule].folder)]) == 0
        head, *rest = capsys.readouterr().out.splitlines()
        assert ("answers scored whole (--no-stop-at-newline" in head) is (not rule)
        flips = next(line for line in rest if line.startswith("flips:"))
        assert ("(the whole answer differs" in flips) is (not rule) and ("(the first line differs" in flips) is rule


def test_against_a_run_of_the_other_answer_rule_says_so(runs, capsys):
    from workbench.cli.main import main as kvwb

    assert kvwb(["summary", str(runs[False].folder), "--contrast", "cacheblend:coin@auc",
                 "--against", str(runs[True].folder)]) == 0
    err = capsys.readouterr().err
    assert f"this run scores whole answers and --against {runs[True].folder} scores first lines" in err
    assert kvwb(["summary", str(runs[True].folder), "--contrast", "cacheblend:coin@auc",
                 "--against", str(runs[False].folder)]) == 0  # the other way round
    assert f"this run scores first lines and --against {runs[False].folder} scores whole answers" in capsys.readouterr().err


def test_the_first_line_figure_draws_both_readings_under_the_references(runs):
    from workbench.plots.answer_lines import first_line_figure
    from workbench.plots.axes import figure_problems

    fig = first_line_figure(first_line_table(runs[False]), 0.2)
    first, whole = fig.data
    assert list(first.y) == ["dense", "splice", "cacheblend", "coin:cacheblend"]  # full and none: dense and splice
    assert list(whole.x[1:]) == [1.0, 1.0, 1.0] and list(first.x[1:]) == [0.0, 0.0, 0.0]  # the gold past the break
    assert figure_problems(fig) == []
    assert list(first_line_figure(first_line_table(runs[False]), 0.5, selectors=["cacheblend"]).data[0].y) == \
        ["dense", "splice", "cacheblend"]
