"""RESULTS 8's tables of 10.12w (`workbench.results.study_10_12w`): the whole-answer record read beside
the first-line record of the same examples, as its pre-registration and `analyse-10.12w.sh` read them.

Two tiny sweeps of the same two examples stand in for the records, kept under their names with
docs/records/preregistration-10.12.json beside each: every answer of the splice and the repairs is
scripted "A", line break, then "BC" (the gold) in every third of the diagnosis's cells and "BA" in the
others, so the first line names nothing and the whole answer the gold in some cells (the contrasts
differ under the whole rule alone); dense's answer is the model's own. A broken pairing (one cell's rows changed) and a record short
of its n are refused by every table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from test_answer_lines import _examples
from test_results_study_10_12 import _keep
from test_whole_answer import A, B, C, NL
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import RecordShortError, WorkbenchError
from workbench.experiments.answer_lines import first_line_table
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.results import TABLES, Records
from workbench.results.study_10_12 import families_table
from workbench.results.study_10_12w import FIRST, RECORD

DOCS = Path(__file__).parents[2] / "docs" / "records"
NAMES = ("10.12w-pairing", "10.12w-families", "10.12w-rules", "10.12w-both-rules", "10.12w-shares",
         "10.12w-first-lines", "10.12w-em", "10.12w-lengths")
SELECTORS = ("none", "full", "cacheblend", "cadence", "cadence-grad", "bcr", "coin:bcr", "epic", "prophetkv",
             "relaxkv")  # every selector of the pre-registered families
BUDGETS = (0.2, 0.5)


def _scripted(first: int):
    """The cells' answers: "A", line break, "B", then "C" in cells 0, 3, 6, ... of a diagnosis, else "A"."""
    def hook(logits, hook):
        if hook.pass_name != "cells":
            return None
        j = hook.positions - first  # [cell, row]: the answer token each row predicts
        gold = (hook.cells % 3 == 0)[:, None]  # [cell, 1]
        for k, token in enumerate((A, NL, B)):
            logits[..., token] += 1e4 * (j == k).to(logits.dtype)
        logits[..., C] += 1e4 * ((j == 3) & gold).to(logits.dtype)
        logits[..., A] += 1e4 * ((j == 3) & ~gold).to(logits.dtype)
        return logits
    return {"hook_unembed": hook}


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_llama) -> Path:
    root = tmp_path_factory.mktemp("study-10.12w")
    data = root / "d.jsonl"
    data.write_text("\n".join(json.dumps({"id": e.id, "passages": list(e.passages), "question": e.question,
                                           "answers": list(e.gold)}) for e in _examples()))
    first = wb.build_context(tiny_llama, _examples()[0]).layout.n_tokens - 1
    runs = []
    for name, rule in ((FIRST, True), (RECORD, False)):
        config = SweepConfig(dataset=f"jsonl:{data}", n=2, diagnose=DiagnoseConfig(
            selectors=SELECTORS, budgets=BUDGETS, max_new_tokens=4, attribution=False, stop_at_newline=rule,
            coin_draws=2))
        out = root / "runs" / name
        run_sweep(tiny_llama, config, out, progress=False, hooks=_scripted(first))
        shutil.copy(DOCS / "preregistration-10.12.json", out / "preregistration.json")
        runs.append(out)
    return _keep(root / "records", *runs)


@pytest.fixture(scope="module")
def records(kept, tmp_path_factory) -> Records:
    return Records(kept, tmp_path_factory.mktemp("scratch"))


def _table(records, name: str) -> list[dict]:
    return [{k: str(v) for k, v in row.items()} for row in TABLES.get(name).build(records).to_dict("records")]


def test_the_pairing_check_counts_every_shared_cell(records):
    (row,) = _table(records, "10.12w-pairing")
    n_cells = 2 * (len(SELECTORS) + 1) * len(BUDGETS)  # examples x (selectors, coin:bcr's two draws) x budgets
    assert row == {"check": "holds", "cells shared / expected": f"{n_cells} / {n_cells}", "cells whose rows differ": "0",
                   "cells: first line here is the first record's answer": "1.0000",
                   "dense / splice: the same first line": "2 / 2 and 2 / 2"}


def test_the_rules_read_each_record_under_its_own_rule(records):
    rows = {row["answers scored"].split(" (")[0]: row for row in _table(records, "10.12w-rules")}
    assert rows["first line"]["splice"] == "0.000" and rows["whole answer"]["splice"] == "1.000"  # cell 0: "A\nBC"
    dense = records.run(RECORD).examples["dense_retrieved"].mean()
    assert rows["whole answer"]["gap"] == f"{dense - 1:+.3f}".replace("-", "−")
    assert rows["whole answer"]["n"] == "2" and f"`{RECORD}`" in next(iter(_table(records, "10.12w-rules")[1].values()))


def test_the_first_lines_name_nothing_the_whole_answers_name_the_gold(records):
    rows = {row["selector"]: row for row in _table(records, "10.12w-first-lines")}
    assert list(rows)[:2] == ["dense", "splice"] and "none" not in rows and "full" not in rows
    whole = first_line_table(records.run(RECORD)).set_index(["selector", "budget"])
    for selector in ("cadence-grad", "coin:bcr", "epic"):
        assert rows[selector]["first line (cells at b = 0.2)"] == "0.000"
        assert rows[selector]["whole (cells at b = 0.2)"] == f"{whole.loc[(selector, 0.2), 'retrieved_whole']:.3f}"
    assert {r["whole (cells at b = 0.2)"] for r in rows.values()} >= {"0.000", "1.000"}  # some cells name the gold, some not
    assert rows["splice"]["whole names more, b = 0.2 / 0.5"] == "1.000 (every budget)"


def test_both_rules_set_each_records_own_families_side_by_side(records):
    both = pd.DataFrame(_table(records, "10.12w-both-rules"))
    first = families_table(records, FIRST).astype(str)
    whole = families_table(records, RECORD).astype(str)
    assert list(both["contrast"]) == list(whole["contrast"]) and len(both) == 6
    assert set(both["first line: A − B [95%]"]) == {"+0.000 [+0.000, +0.000]"}  # every first line is "A"
    assert set(both["whole answer: A − B [95%]"]) != {"+0.000 [+0.000, +0.000]"}
    assert list(both["first line: A − B [95%]"]) == list(first["A − B [95% paired bootstrap]"])
    assert list(both["whole answer: A − B [95%]"]) == list(whole["A − B [95% paired bootstrap]"])
    assert list(both["whole answer: p (Holm)"]) == list(whole["p (Holm)"])
    assert pd.DataFrame(_table(records, "10.12w-families")).equals(whole)


def test_the_lengths_count_the_scripted_answers_four_tokens(records):
    rows = {row["selector"]: row for row in _table(records, "10.12w-lengths")}
    assert rows["cadence-grad"]["answer tokens (cells at b = 0.2 / 0.5)"] == "4.00 / 4.00"
    assert rows["splice"]["answer tokens (cells at b = 0.2 / 0.5)"] == "4.00 (no budget)"
    assert rows["dense"]["ran on (cells at b = 0.2 / 0.5)"] == "–"
    cells = records.run(RECORD).outcomes
    ran_on = cells[cells["selector"] == "coin:bcr"].groupby("budget")["ran_on"].mean()
    assert rows["coin:bcr"]["ran on (cells at b = 0.2 / 0.5)"] == f"{ran_on[0.2]:.3f} / {ran_on[0.5]:.3f}"


def test_shares_and_em_read_the_whole_answer_record(records):
    from workbench.results.study_10_12 import em_table, shares_table

    for name, table in (("10.12w-shares", shares_table), ("10.12w-em", em_table)):
        built = pd.DataFrame(_table(records, name))
        assert built.equals(table(records, RECORD).astype(str)) and not built.equals(table(records, FIRST).astype(str))


def _edit_outcomes(folder: Path, name: str, edit) -> None:
    path = next((folder / name / "diagnoses").glob("*/outcomes.parquet"))
    table = pd.read_parquet(path)
    edit(table)
    table.to_parquet(path)


def _one_more_row(table):
    table.loc[table["selector"] == "cacheblend", "n_recomputed"] += 1


def _other_recall(table):
    table.loc[table["selector"] == "cadence", "evidence_recall"] = 0.5


def _one_cell_fewer(table):
    table.drop(index=table.index[table["selector"] == "epic"][:1], inplace=True)


@pytest.mark.parametrize("name, edit, said", [(RECORD, _one_more_row, "example e0 cacheblend b = 0.2: rows 6 / 5"),
                                              (RECORD, _other_recall, "recall 0.5000 / "),
                                              (FIRST, _one_cell_fewer, "0")])
def test_a_broken_pairing_is_shown_and_refused_by_every_reading(kept, tmp_path, name, edit, said):
    broken = tmp_path / "records"
    shutil.copytree(kept, broken)
    _edit_outcomes(broken, name, edit)
    records = Records(broken, tmp_path / "scratch")
    (row,) = _table(records, "10.12w-pairing")  # the check itself is shown, whether it holds or not
    assert row["check"] == "broken" and said in row["cells whose rows differ"], row
    for table in NAMES[1:]:
        with pytest.raises(WorkbenchError, match="pairing .* is broken"):
            TABLES.get(table).build(records)


@pytest.mark.parametrize("short", [RECORD, FIRST])
def test_either_record_short_of_its_n_is_refused_by_every_table(kept, tmp_path, short):
    folder = tmp_path / "records"
    shutil.copytree(kept, folder)
    manifest = json.loads((folder / short / "manifest.json").read_text())
    (folder / short / "manifest.json").write_text(json.dumps({**manifest, "args": {**manifest["args"], "n": 200}}))
    records = Records(folder, tmp_path / "scratch")
    for name in NAMES:
        with pytest.raises(RecordShortError, match=f"{short} holds 2 of its 200"):
            TABLES.get(name).build(records)


def test_writing_every_table_leaves_a_broken_pairings_tables_out_by_name(kept, tmp_path, monkeypatch):
    from workbench.errors import WorkbenchWarning
    from workbench.registry import Registry
    from workbench.results import check, write_all

    broken = tmp_path / "records"
    shutil.copytree(kept, broken)
    _edit_outcomes(broken, RECORD, lambda t: t.__setitem__("n_recomputed", t["n_recomputed"] + 1))
    # these tables alone (the real records' are not in the fixture), the registries themselves untouched
    monkeypatch.setattr(check, "TABLES", Registry(TABLES.what, items=[(name, TABLES[name]) for name in NAMES]))
    monkeypatch.setattr(check, "FIGURES", Registry("results figure"))
    with pytest.warns(WorkbenchWarning) as warned:
        written = write_all(tmp_path / "out", Records(broken, tmp_path / "scratch"), progress=False)
    assert written == ["10.12w-pairing.md", "10.12w-pairing.csv"]  # the check, broken, is written
    assert [str(w.message).split(":")[0] for w in warned] == [f"table {name} not written" for name in NAMES[1:]]
