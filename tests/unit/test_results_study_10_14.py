"""RESULTS 9's tables of 10.14's evidence study (`workbench.results.study_10_14`): each cell says what
`docs/records/analyse-10.14.sh` prints for the same run (its `kvwb summary` section and its per-layer
attention), EM, retrieved and flips what `kvwb summary --format csv` holds; a record short of its n
is refused by every table, one that kept no evidence tables by those that read them.

A tiny run on the tiny Llama, with the study's 16 selectors and budget grid, stands in for the study,
kept under its record's name as docs/records keeps it. Its examples have evidence in the pool, in
the first passage only (in the context, outside the pool) or none; a third have long passages, so
that BCR's 64-row chunks fit from b = 0.2 on and its precision is over a different n per budget.
Each example's gold is dense's own answer and its first two characters (as in the 10.12 tests), so
EM and retrieved differ from 0 and from each other."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.cli.main import main as kvwb
from workbench.errors import RecordMissingError, WorkbenchError
from workbench.results import FIGURES, TABLES, Records
from workbench.results.cells import cell_difference, same_number
from workbench.results.study_10_14 import GEMMA3, RECORD
from workbench.runstore import load_sweep

from test_results_study_10_12 import _keep, _sweep, _write  # the tiny sweep and its keeping, as 10.12's tests make them

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "records"
NAMES = ("10.14-recall", "10.14-precision", "10.14-average-precision", "10.14-em-retrieved-flips",
         "10.14-attention-mean", "10.14-attention-last")
SELECTORS = tuple("none,full,random,cacheblend,relay,densedev,cadence,cadence-grad,bcr,bcr:grow,bcr:single,qattn,"
                  "epic,prophetkv,relaxkv,coin:bcr".split(","))  # the pre-registration's, in its order
BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.5)
CITIES = tuple(a + b for a in ("Os", "Ro", "Li", "Ky") for b in ("lo", "ma", "na"))
FILLER = " It flows past old mills, quiet farms and a stone bridge near the market square." * 3


def _examples() -> list[dict]:
    """Questions on the coach's birthplace: evidence in the pool, in the first passage only, or none."""
    rows = []
    for i, city in enumerate(CITIES):
        long = FILLER if i % 3 == 0 else ""
        passages = [f"Player {i} is coached by Ada {city[::-1]}.", f"Ada {city[::-1]} was born in {city}.{long}",
                    f"The {city} river runs {i} miles to the sea.{long}"]
        row = {"id": f"q{i}", "passages": passages, "question": "Where was the coach born?", "answers": [city]}
        if i % 6 != 5:  # q5 and q11 define none
            row["evidence"] = ([[0, 0, len(passages[0])]] if i % 4 == 1 else
                               [[1, 0, len(passages[1])], [2, 0, 9]])
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_llama) -> Path:
    """A docs/records in small: keep.py and the study's record, complete, made on one thread (set here,
    before the function fixtures set it: a tiny model stalls on two threads under load)."""
    root, threads = tmp_path_factory.mktemp("study-10.14"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = _with_dense_gold(tiny_llama, _examples(), root)
        assert len(rows) >= 8
        run = _sweep(tiny_llama, _write(root / "study.jsonl", rows), len(rows), root / "runs" / RECORD, SELECTORS,
                     BUDGETS)
        return _keep(root / "records", run)
    finally:
        torch.set_num_threads(threads)


def _with_dense_gold(model, rows: list[dict], root: Path) -> list[dict]:
    """The rows whose dense answer (a first pass) starts with text, with that answer and its first two
    characters as gold, read as RULER's multi-value tasks read theirs."""
    first = load_sweep(_sweep(model, _write(root / "all.jsonl", rows), len(rows), root / "first", ("none",), (0.2,)))
    dense = dict(zip(first.examples["example_id"], first.examples["dense_answer"]))
    return [{**r, "answers": [dense[r["id"]], dense[r["id"]][:2]], "meta": {"retrieval": "string_match_all"}}
            for r in rows if any(ch.isalnum() for ch in str(dense[r["id"]])[:2])]


@pytest.fixture(scope="module")
def records(kept, tmp_path_factory) -> Records:
    return Records(kept, tmp_path_factory.mktemp("scratch"))


@pytest.fixture(scope="module")
def readings(records) -> str:
    """analyse-10.14.sh's output on the restored record."""
    env = {**os.environ, "KVWB": f"{sys.executable} -m workbench.cli", "PY": sys.executable, "OMP_NUM_THREADS": "1",
           "KVWB_THREADS": "1"}
    done = subprocess.run(["bash", str(DOCS / "analyse-10.14.sh"), str(records.run(RECORD).folder)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def summary_csv(records) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kvwb(["summary", str(records.run(RECORD).folder), "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def _printed(text: str, heading: str) -> list[dict]:
    """The rows (header -> cell) of the first markdown table after the line starting `heading`."""
    lines = text[text.index("\n" + heading) + 1:].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[start:]]
    end = next((i for i, line in enumerate(lines[start:]) if not line.startswith("|")), len(block))
    return [dict(zip(block[0], row)) for row in block[2:end]]


def _assert_table(table, expected: list[dict]) -> None:
    assert list(table.columns) == list(expected[0]) and len(table) == len(expected)
    for i, want in enumerate(expected):
        for column, printed in want.items():
            cell = table[column].iloc[i]
            assert cell_difference(printed, cell) is None, (i, column, printed, str(cell))


def _csv_counts(summary_csv: list[dict], selector: str, column: str) -> str:
    """The selector's `column` per budget, as the tables' n says it: one where all are the same."""
    counts = [r[column] for b in BUDGETS for r in summary_csv if r["selector"] == selector and float(r["budget"]) == b]
    assert len(counts) == len(BUDGETS)
    return counts[0] if len(set(counts)) == 1 else " / ".join(counts)


def _per_budget_expected(printed: list[dict], summary_csv, count: str) -> list[dict]:
    """The summary's selector x budget rows ('nan': '–') with the n of each selector from the CSV."""
    return [{**{c: "–" if v == "nan" else v for c, v in row.items()},
             "n": _csv_counts(summary_csv, row["selector"], count)} for row in printed]


def test_evidence_recall_is_the_scripts(records, readings, summary_csv):
    table = TABLES["10.14-recall"].build(records)
    printed = _printed(readings, "Evidence recall (")
    assert [r["selector"] for r in printed] == list(SELECTORS)
    _assert_table(table, _per_budget_expected(printed, summary_csv, "n_with_evidence"))
    (n,) = re.findall(r"Evidence recall \(.*?mean over the (\d+) examples with evidence in the pool", readings)
    assert set(map(str, table["n"])) == {n}  # the heading's n, every selector's
    assert int(n) < len(records.run(RECORD).examples)  # some examples have none in the pool


def test_evidence_precision_is_the_scripts_with_its_n_where_fewer(records, readings, summary_csv):
    table = TABLES["10.14-precision"].build(records)
    printed = _printed(readings, "Evidence precision (")
    _assert_table(table, _per_budget_expected(printed, summary_csv, "n_with_precision"))
    (n, fewer), = re.findall(r"Precision over fewer than the (\d+) examples: (.*)", readings)
    counts = {(s, float(b)): k for s, b, k in re.findall(r"(\S+) at b = (\S+): (\d+)", fewer)}
    for i, selector in enumerate(table["selector"]):
        per_budget = str(table["n"].iloc[i]).split(" / ")
        for b, k in zip(BUDGETS, per_budget * len(BUDGETS) if len(per_budget) == 1 else per_budget):
            assert counts.get((selector, b), n) == k, (selector, b)  # the note's count, else the heading's n
    bcr = str(table.set_index("selector").loc["bcr", "n"])
    assert bcr.startswith("0 / 0 / ") and bcr != "0 / 0 / 0 / 0 / 0"  # its chunks fit from b = 0.2 on
    assert "–" in str(table.set_index("selector").loc["none", "b = 0.2"])


def test_each_scorers_average_precision_is_the_scripts(records, readings):
    table = TABLES["10.14-average-precision"].build(records)
    printed = _printed(readings, "Average precision of each scorer")
    _assert_table(table, [{"scorer": r["scorer"], "kind": r["kind"], "n": r["n"],
                           "average precision": r["average_precision"], "chance": r["chance"],
                           "lift (AP / chance)": r["lift"]} for r in printed])
    assert {"signal", "selector"} <= set(table["kind"]) and "bcr" in set(table["scorer"])
    assert len({str(c) for c in table["average precision"]}) > 1


def test_em_retrieved_and_flips_are_kvwb_summarys(records, summary_csv):
    table = TABLES["10.14-em-retrieved-flips"].build(records)
    assert list(table.columns) == ["selector (EM / retrieved / flips)", *(f"b = {b:g}" for b in BUDGETS)]
    assert list(table.iloc[:, 0]) == list(SELECTORS)
    for i, selector in enumerate(SELECTORS):
        for b in BUDGETS:
            (kv,) = [r for r in summary_csv if r["selector"] == selector and float(r["budget"]) == b]
            cell = table[f"b = {b:g}"].iloc[i]
            assert [v.value for v in cell.values] == [float(kv[c]) for c in ("em", "retrieved", "flip_rate")]
            assert cell_difference(f"{float(kv['em']):.3f} / {float(kv['retrieved']):.3f} / "
                                   f"{float(kv['flip_rate']):.3f}", cell) is None
    full = [v.value for v in table["b = 0.2"].iloc[1].values]  # full: dense's own answers, the gold
    assert full[0] == 1 and full[2] == 0
    cells = [[v.value for v in cell.values] for column in table.columns[1:] for cell in table[column]]
    assert any(em != retrieved for em, retrieved, _ in cells)  # retrieved reads both golds as substrings


@pytest.mark.parametrize("name, mass", [("10.14-attention-mean", "mass_mean"), ("10.14-attention-last", "mass_last")])
def test_the_attention_per_layer_is_the_scripts(records, readings, tiny_llama, name, mass):
    table = TABLES[name].build(records)
    printed = _printed(readings, f"### {mass}")
    (n,) = re.findall(rf"### {mass}: .*; n = (\d+) examples with evidence in the context", readings)
    assert list(printed[0]) == ["layer", "dense", "spliced", *[s for s in SELECTORS if s not in ("none", "full")]]
    _assert_table(table, [{**row, "n": n} for row in printed])
    assert len(table) == len(tiny_llama.adapter.layers)  # every layer
    examples = records.run(RECORD).examples
    assert len(examples) > int(n) > int(str(TABLES["10.14-recall"].build(records)["n"].iloc[0]))


def test_the_attention_figure_draws_the_mean_tables_lines(records):
    figure = FIGURES["10.14-attention"].build(records)
    table = TABLES["10.14-attention-mean"].build(records)
    drawn = {trace.name: list(trace.y) for trace in figure.data}
    assert sorted(drawn) == sorted(["splice" if c == "spliced" else c for c in table.columns[1:-1]])
    for column in table.columns[1:-1]:
        line = drawn["splice" if column == "spliced" else column]
        assert all(same_number(str(cell), y) for cell, y in zip(table[column], line)), column
        assert len(line) == len(table)


def _copy(kept: Path, folder: Path) -> Path:
    shutil.copytree(kept, folder)
    return folder


def test_a_record_short_of_its_n_is_refused_by_every_table(kept, records, tmp_path):
    folder = _copy(kept, tmp_path / "records")
    manifest = json.loads((folder / RECORD / "manifest.json").read_text())
    (folder / RECORD / "manifest.json").write_text(json.dumps({**manifest, "args": {**manifest["args"], "n": 94}}))
    short = Records(folder, tmp_path / "scratch")
    done = len(records.run(RECORD).examples)
    for name in NAMES:
        with pytest.raises(WorkbenchError, match=rf"^{re.escape(RECORD)} holds {done} of its 94 examples: its tables "
                                                 r"are read at n = 94$"):
            TABLES[name].build(short)
    with pytest.raises(WorkbenchError, match=rf"holds {done} of its 94 examples"):
        FIGURES["10.14-attention"].build(short)


def test_a_record_without_its_evidence_tables_is_refused_by_those_that_read_them(kept, tmp_path):
    folder = _copy(kept, tmp_path / "records")
    for path in (folder / RECORD / "diagnoses").glob("*/evidence_*.parquet"):
        path.unlink()
    bare = Records(folder, tmp_path / "scratch")
    with pytest.raises(WorkbenchError, match=rf"^{re.escape(RECORD)} keeps no evidence ranking: 10.14's average "
                                             r"precision needs it$"):
        TABLES["10.14-average-precision"].build(bare)
    for name in ("10.14-attention-mean", "10.14-attention-last"):
        with pytest.raises(WorkbenchError, match=rf"^{re.escape(RECORD)} keeps no evidence attention: 10.14's "
                                                 r"per-layer reading needs it$"):
            TABLES[name].build(bare)
    assert len(TABLES["10.14-recall"].build(bare)) == len(SELECTORS)  # recall and precision are the outcomes'


def _twin(name: str) -> str:
    """The Gemma twin of a SmolLM2 table or figure name (10.14-recall -> 10.14g-recall)."""
    return name.replace("10.14-", f"{GEMMA3.prefix}-", 1)


def test_gemmas_twins_read_its_own_record_alike_and_a_missing_one_is_refused(kept, records, tmp_path):
    folder = _copy(kept, tmp_path / "records")
    (folder / RECORD).rename(folder / GEMMA3.record)  # the tiny record kept under Gemma's name alone
    gemma = Records(folder, tmp_path / "scratch")
    for name in NAMES:
        ours, twin = TABLES[name].build(records), TABLES[_twin(name)].build(gemma)
        assert twin.shape == ours.shape and list(twin.columns) == list(ours.columns)
        assert [[str(c) for c in row] for row in twin.itertuples(index=False)] == \
            [[str(c) for c in row] for row in ours.itertuples(index=False)], name
        assert GEMMA3.record in TABLES[_twin(name)].description and "Gemma 3 270M" in TABLES[_twin(name)].description
        with pytest.raises(WorkbenchError, match=rf"has no record {re.escape(repr(RECORD))}$"):
            TABLES[name].build(gemma)  # SmolLM2's tables read SmolLM2's record, not any that is there
    figure = FIGURES[_twin("10.14-attention")].build(gemma)
    assert figure.layout.title.text.startswith("10.14, Gemma 3 270M: ")
    assert [t.y.tolist() for t in figure.data] == [t.y.tolist() for t in FIGURES["10.14-attention"].build(records).data]


def test_a_document_citing_a_study_not_kept_yet_fails_and_any_other_missing_record_is_an_error(kept, tmp_path):
    from workbench.results import check_document

    document = tmp_path / "RESULTS.md"
    document.write_text("<!-- kvwb-results: 10.14g-recall -->\n| selector | n |\n|---|---|\n| none | 1 |\n")
    with pytest.raises(RecordMissingError, match="not kept yet"):
        check_document(document, Records(kept, tmp_path / "scratch"))  # a check never passes one over
    folder = _copy(kept, tmp_path / "records")
    shutil.rmtree(folder / RECORD)
    with pytest.raises(WorkbenchError, match=rf"has no record {re.escape(repr(RECORD))}$") as raised:
        TABLES["10.14-recall"].build(Records(folder, tmp_path / "scratch2"))
    assert not isinstance(raised.value, RecordMissingError)  # a kept study's record gone: not passed over


def test_writing_every_table_leaves_out_a_study_not_kept_yet_by_name(kept, tmp_path, monkeypatch):
    from workbench.errors import WorkbenchWarning
    from workbench.registry import Registry
    from workbench.results import check, write_all

    ours = [n for n in TABLES.names() if n.startswith("10.14")]
    assert sorted(ours) == sorted([*NAMES, *map(_twin, NAMES)])
    monkeypatch.setattr(check, "TABLES", Registry(TABLES.what, items=[(n, TABLES[n]) for n in ours]))
    monkeypatch.setattr(check, "FIGURES", Registry(FIGURES.what, items=[(n, FIGURES[n]) for n in FIGURES.names()
                                                                          if n.startswith("10.14")]))
    with pytest.warns(WorkbenchWarning) as warned:
        written = write_all(tmp_path / "out", Records(kept, tmp_path / "scratch"), progress=False)
    assert sorted(written) == sorted([f"{n}.{x}" for n in NAMES for x in ("md", "csv")] + ["10.14-attention.html"])
    assert sorted(str(w.message) for w in warned) == sorted(
        f"{kind} {_twin(n)} not written: {kept} has no record {GEMMA3.record!r} (not kept yet)"
        for kind, n in [*(("table", n) for n in NAMES), ("figure", "10.14-attention")])
