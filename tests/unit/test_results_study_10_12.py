"""RESULTS 8's tables of 10.12's study (`workbench.results.study_10_12`): each cell says what `kvwb
summary` prints for the arguments `docs/records/analyse-10.12.sh` gives it; a record short of its n
is refused, `--list` and a check of other tables build none of them, and writing every table leaves
the refused ones out by name.

Two tiny runs on the tiny Llama stand in for the study and the second setting, kept under their
records' names as docs/records keeps them, with docs/records/preregistration-10.12.json beside the
study. Each example's gold is dense's own answer (read from a first pass) and its first two
characters, so the splice and the repairs lose and regain them and the tests have something to
separate; `retrieved` reads them as RULER's multi-value tasks do (the share of the two named, as
substrings), so that it differs from whole-word `contains`."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from workbench.cli.main import main as kvwb
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.results import FIGURES, TABLES, Records, check_document, register_table, write_all
from workbench.results.cells import Num, cell_difference, fmt, regenerated_tokens, same_number
from workbench.results.registry import frame
from workbench.results.study_10_12 import OTHER, RECORD
from workbench.runstore import load_sweep

DOCS = Path(__file__).parents[2] / "docs" / "records"
NAMES = ("10.12-families", "10.12-em", "10.12-contains-b3", "10.12-across", "10.12-shares")
SELECTORS = ("none", "full", "random", "cacheblend", "cadence", "cadence-grad", "bcr", "coin:bcr", "epic",
             "prophetkv", "relaxkv", "qattn:chunk")  # qattn:chunk: a selector 10.13's table does not name
BUDGETS = (0.1, 0.2, 0.5)
CITIES = tuple(a + b for a in ("Os", "Ro", "Li", "Ky", "Be", "Ri", "Ba", "Do")
               for b in ("lo", "ma", "na", "va", "rn", "ga"))
N_STUDY, N_OTHER = 20, 8


def _examples() -> list[dict]:
    """Questions whose evidence is the coach's birthplace, among filler passages."""
    rows = []
    for i, city in enumerate(CITIES):
        passages = [f"Player {i} is coached by Ada {city[::-1]}.", f"Ada {city[::-1]} was born in {city}.",
                    f"The {city} river runs {i} miles to the sea."]
        rows.append({"id": f"q{i}", "passages": passages, "question": "Where was the coach born?",
                     "answers": [city], "evidence": [[1, 0, len(passages[1])]]})
    return rows


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sweep(model, data: Path, n: int, out: Path, selectors=SELECTORS, budgets=BUDGETS) -> Path:
    config = SweepConfig(dataset=f"jsonl:{data}", n=n, diagnose=DiagnoseConfig(
        selectors=selectors, budgets=budgets, max_new_tokens=4, attribution=False))
    run_sweep(model, config, out, progress=False)
    return out


def _keep(records: Path, *runs: Path) -> Path:
    """A docs/records in small: keep.py and the runs kept by it."""
    records.mkdir()
    shutil.copy(DOCS / "keep.py", records / "keep.py")
    spec = importlib.util.spec_from_file_location("keep_for_study_10_12", records / "keep.py")
    keep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keep)
    with contextlib.redirect_stdout(io.StringIO()):
        for run in runs:
            keep.save(run, records)
    return records


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_llama) -> Path:
    """The two records, complete: RECORD (N_STUDY examples, pre-registered) and OTHER (N_OTHER)."""
    root = tmp_path_factory.mktemp("study-10.12")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # before the function fixtures set it: a tiny model stalls on two threads under load
    try:
        return _kept(root, tiny_llama)
    finally:
        torch.set_num_threads(threads)


def _kept(root: Path, model) -> Path:
    """Dense's answers of a first pass become the gold of the two runs, which are then kept."""
    rows = _examples()
    first = load_sweep(_sweep(model, _write(root / "all.jsonl", rows), len(rows), root / "first", ("none",), (0.2,)))
    dense = dict(zip(first.examples["example_id"], first.examples["dense_answer"]))
    answered = [{**r, "answers": [dense[r["id"]], dense[r["id"]][:2]], "meta": {"retrieval": "string_match_all"}}
                for r in rows if any(ch.isalnum() for ch in str(dense[r["id"]])[:2])]  # golds normalising to text
    assert len(answered) >= N_STUDY + N_OTHER
    study = _sweep(model, _write(root / "study.jsonl", answered[:N_STUDY]), N_STUDY, root / "runs" / RECORD)
    shutil.copy(DOCS / "preregistration-10.12.json", study / "preregistration.json")
    other = _sweep(model, _write(root / "other.jsonl", answered[N_STUDY:]), N_OTHER, root / "runs" / OTHER)
    return _keep(root / "records", study, other)


@pytest.fixture(scope="module")
def records(kept, tmp_path_factory) -> Records:
    return Records(kept, tmp_path_factory.mktemp("scratch"))


def _short(kept: Path, folder: Path, name: str, n: int = 200) -> Path:
    """A copy of the records where record `name`'s manifest asks for `n` examples."""
    shutil.copytree(kept, folder)
    manifest = json.loads((folder / name / "manifest.json").read_text())
    (folder / name / "manifest.json").write_text(json.dumps({**manifest, "args": {**manifest["args"], "n": n}}))
    return folder


def _kvwb(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kvwb(["summary", *map(str, args)]) == 0
    return out.getvalue()


def _tables(text: str) -> list[list[dict]]:
    """Every markdown table of `kvwb summary`'s output, each as its rows (header -> cell)."""
    found, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif block:
            found.append([dict(zip(block[0], row)) for row in block[2:]])
            block = []
    return found


def _contrast_rows(text: str) -> list[dict]:
    return [row for table in _tables(text) if table and "draws separating" in table[0] for row in table]


BEHIND = re.compile(r"Behind (\S+) vs (\S+) at .+? on \w+: of \d+ examples, \S+ is higher in (\d+) and \S+ in (\d+);")
DRAWS = re.compile(r"^- (\S+) vs each draw of .*?: (draw \d+: .*)$", re.M)


def _draws(text: str) -> dict[str, list[tuple[str, str]]]:
    """Per selector tested against a coin, each draw's b/c and p as `kvwb summary` prints them."""
    return {m.group(1): re.findall(r"draw \d+: (\S+), p = ([^;\s]+)", m.group(2)) for m in DRAWS.finditer(text)}


def _agrees(printed: str, cell) -> bool:
    return cell_difference(printed, cell) is None


def _holm(printed: str) -> str:
    return f"**{printed}**" if float(printed) < 0.05 else printed


def _kvwb_area_row(name: str, row: dict, behind: tuple, draws: list) -> dict:
    """The cells an area contrast's row should show, as `kvwb summary` prints its numbers."""
    a_higher, b_higher = behind[2], behind[3]
    each_way = f"{a_higher} / {b_higher}"
    label = f"{name} {row['contrast']}"
    if draws:
        k, n = row["draws separating"].split(" of ")
        label += f" (mean of {n} draws)"
        listed = ", ".join(p for _, p in draws)
        each_way += (f" ({k} of {n} draws separate)" if k == n else
                     f" (draws: p = {listed}; {k} of {n} {'separates' if k == '1' else 'separate'})")
    return {"contrast": label, "test": row["test"].split(" (")[0], "A higher / B higher": each_way, "p": row["p"],
            "p (Holm)": _holm(row["p (Holm)"]), "area of A vs B": f"{row['A']} vs {row['B']}",
            "A − B [95% paired bootstrap]": row["A - B [95% CI]"]}


def _assert_table(table, expected: list[dict]) -> None:
    assert list(table.columns) == list(expected[0]) and len(table) == len(expected)
    for i, want in enumerate(expected):  # a column keeps its cells (iterrows would make them plain text)
        for column, printed in want.items():
            cell = table[column].iloc[i]
            assert _agrees(printed, cell), (column, printed, str(cell))


def _families():
    pre = json.loads((DOCS / "preregistration-10.12.json").read_text())
    return [(name, text) for family in pre["families"].values() for name, text in family.items()]


def test_the_families_are_kvwb_summary_preregistered(records):
    table = TABLES["10.12-families"].build(records)
    out = _kvwb(records.run(RECORD).folder, "--measure", "retrieved", "--preregistered", "--read", "1")
    rows, behind, draws = _contrast_rows(out), BEHIND.findall(out), _draws(out)
    assert len(rows) == len(behind) == 6 and list(draws) == ["bcr"]
    expected = [_kvwb_area_row(name, row, b, draws.get(row["contrast"].split(" vs ")[0], []))
                for (name, _), row, b in zip(_families(), rows, behind)]
    _assert_table(table, expected)
    assert str(table.iloc[1]["contrast"]) == "A2 bcr vs coin:bcr (mean of 5 draws)"
    assert {str(c).split(" ")[0] for c in table["contrast"]} == {"A1", "A2", "A3", "B1", "B2", "B3"}
    assert any(float(b[2]) + float(b[3]) for b in behind)  # the examples differ somewhere: not all ties
    assert any(v.value != 0 for cell in table["A − B [95% paired bootstrap]"] for v in cell.values)


def test_the_em_contrasts_at_0_2_are_kvwb_summarys_uncorrected(records):
    table = TABLES["10.12-em"].build(records)
    texts = [text.replace("@auc", "@0.2") for _, text in _families()]
    out = _kvwb(records.run(RECORD).folder, "--measure", "em", *[a for t in texts for a in ("--contrast", t)])
    rows, draws = _contrast_rows(out), _draws(out)
    assert len(rows) == 6
    expected = []
    for (name, _), row in zip(_families(), rows):
        label, counts = f"{name} {row['contrast']}", row["b/c"]
        if row["contrast"].split(" vs ")[0] in draws:
            k, n = row["draws separating"].split(" of ")
            label += f" (mean of {n} draws)"
            listed = ", ".join(bc for bc, _ in draws[row["contrast"].split(" vs ")[0]])
            counts = (f"– ({k} of {n} draws separate)" if k == n else
                      f"– (draws: {listed}; {k} of {n} {'separates' if k == '1' else 'separate'})")
        expected.append({"contrast": label, "test": row["test"].split(" (")[0], "b / c": counts,
                         "p (uncorrected)": row["p"], "EM of A vs B": f"{row['A']} vs {row['B']}",
                         "A − B [95% paired bootstrap]": row["A - B [95% CI]"]})
    _assert_table(table, expected)
    assert any(row["p"] != row["p (Holm)"] for row in rows)  # uncorrected is not the family's Holm p


def test_b3_on_contains_is_kvwb_summarys(records):
    table = TABLES["10.12-contains-b3"].build(records)
    b3 = dict(_families())["B3"]
    out = _kvwb(records.run(RECORD).folder, "--measure", "contains", "--contrast", b3, "--read", "1")
    (row,), (behind,) = _contrast_rows(out), BEHIND.findall(out)
    assert row["measure"] == "contains"
    want = _kvwb_area_row("B3", row, behind, [])
    del want["p (Holm)"]
    _assert_table(table, [want])


def test_the_test_across_settings_is_kvwb_summary_against(records):
    table = TABLES["10.12-across"].build(records)
    here, there = records.run(RECORD).folder, records.run(OTHER).folder
    a1 = dict(_families())["A1"]
    out = _kvwb(here, "--measure", "retrieved", "--contrast", a1, "--against", there)
    (row,) = [r for t in _tables(out) for r in t if "difference [95% CI]" in r]
    assert row["n"] == f"{N_STUDY} / {N_OTHER}"
    _assert_table(table, [{"contrast": f"A1 {row['contrast']}", "n here / there": row["n"],
                           "A − B here": row[f"A - B in {here.name}"], "A − B there": row[f"A - B in {there.name}"],
                           "difference [95% bootstrap]": row["difference [95% CI]"], "test": row["test"],
                           "p": row["p"]}])


def test_the_shares_and_evidence_recall_are_kvwb_summarys(records):
    table = TABLES["10.12-shares"].build(records)
    folder = records.run(RECORD).folder
    summary = list(csv.DictReader(io.StringIO(_kvwb(folder, "--measure", "retrieved", "--format", "csv"))))
    recall = next(t for t in _tables(_kvwb(folder, "--measure", "retrieved")) if t and "b = 0.2" in t[0]
                  and t[0]["selector"] == "none")  # the evidence recall table: every selector's row
    recall = {row["selector"]: [row[c] for c in row if c != "selector"] for row in recall}  # every budget
    labels = ["CADENCE-Grad", "gated CADENCE", "CacheBlend", "BCR (chunks)", "EPIC", "ProphetKV", "RelaxKV",
              "random rows", "`coin:bcr`", "`qattn:chunk`"]
    assert [str(s) for s in table["selector"]] == labels  # 10.13's labels and order, the run's other selector last
    selectors = ["cadence-grad", "cadence", "cacheblend", "bcr", "epic", "prophetkv", "relaxkv", "random",
                 "coin:bcr", "qattn:chunk"]
    header = "evidence recall, b = 0.1 / 0.2 / 0.5"  # per budget, as the pre-registration asks
    assert list(table.columns) == ["selector", "b = 0.1", "0.2", "0.5", header]
    for i, selector in enumerate(selectors):
        row = {column: table[column].iloc[i] for column in table.columns}
        for column, budget in zip(table.columns[1:4], BUDGETS):
            (kv,) = [r for r in summary if r["selector"] == selector and float(r["budget"]) == budget]
            values = [float(kv[c]) for c in ("gap_recovered", "gap_recovered_low", "gap_recovered_high")]
            numbers = [t for t in regenerated_tokens(row[column]) if isinstance(t, Num)]
            assert len(numbers) == (1 if values[1] == values[2] else 3)
            assert all(same_number(f"{v:.6f}", n.value) for v, n in zip(values, numbers)), (selector, budget)
        assert len(recall[selector]) == len(BUDGETS)
        assert _agrees(" / ".join(recall[selector]), row[header]), selector
    assert len({str(c) for c in table[header]}) > 1


def test_a_record_short_of_its_n_is_refused_by_every_table(kept, tmp_path):
    short = Records(_short(kept, tmp_path / "records", RECORD), tmp_path / "scratch")
    for name in NAMES:
        with pytest.raises(WorkbenchError, match=rf"^{re.escape(RECORD)} holds {N_STUDY} of its 200 examples: "
                                                 r"its tables are read at n = 200$"):
            TABLES[name].build(short)
    other_short = Records(_short(kept, tmp_path / "records2", OTHER), tmp_path / "scratch2")
    with pytest.raises(WorkbenchError, match=f"{OTHER} holds {N_OTHER} of its 200 examples"):
        TABLES["10.12-across"].build(other_short)
    assert len(TABLES["10.12-em"].build(other_short)) == 6  # the study itself is whole


@pytest.fixture()
def spies(monkeypatch) -> list[str]:
    """The five tables replaced by builders that note each call."""
    called = []
    for name in NAMES:
        entry = TABLES[name]
        monkeypatch.setitem(TABLES, name, entry.__class__(name, lambda r, n=name: called.append(n), entry.description))
    return called


def test_list_and_a_check_of_other_tables_build_none_of_them(spies, kept, tmp_path, capsys, monkeypatch):
    assert kvwb(["results", "--list", "--records", str(kept)]) == 0
    listed = capsys.readouterr().out
    assert all(f"table {name}: RESULTS 8 (10.12)" in listed for name in NAMES) and spies == []

    monkeypatch.setitem(TABLES, "fixture-other", TABLES["10.12-em"].__class__(
        "fixture-other", lambda r: frame([{"a": fmt("{}", 1)}]), "another table"))
    doc = tmp_path / "R.md"
    doc.write_text("<!-- kvwb-results: fixture-other -->\n| a |\n|---|\n| 1 |\n")
    report = check_document(doc, Records(kept, tmp_path / "scratch"))
    assert report.ok and report.cells == 1 and spies == []


def test_writing_every_table_leaves_the_refused_ones_out_by_name(kept, tmp_path, monkeypatch, capsys):
    folder = _short(kept, tmp_path / "records", RECORD)
    short = Records(folder, tmp_path / "scratch")
    for name in [n for n in TABLES if n not in NAMES]:
        monkeypatch.delitem(TABLES, name)  # the real records' tables are not in the fixture
    for name in list(FIGURES):
        monkeypatch.delitem(FIGURES, name)
    register_table("fixture-whole", "a table the records give")(lambda r: frame([{"a": fmt("{}", 1)}]))
    try:
        with pytest.warns(WorkbenchWarning) as warned:
            written = write_all(tmp_path / "out", short, progress=False)
        assert written == ["fixture-whole.md", "fixture-whole.csv"]
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(written)
        messages = [str(w.message) for w in warned if issubclass(w.category, WorkbenchWarning)]
        assert messages == [f"table {name} not written: {RECORD} holds {N_STUDY} of its 200 examples: its tables "
                            f"are read at n = 200" for name in NAMES]

        with pytest.raises(WorkbenchError, match=f"{RECORD} holds {N_STUDY} of its 200"):  # asked for by name
            write_all(tmp_path / "named", short, progress=False, names=["fixture-whole", "10.12-families"])
        assert not (tmp_path / "named").exists()
        capsys.readouterr()
        assert kvwb(["results", "--out", str(tmp_path / "cli"), "--records", str(folder)]) == 0  # as kvwb says it
        err = capsys.readouterr().err
        assert [line.split(" not written")[0] for line in err.splitlines() if "not written" in line] == [
            f"kvwb: warning: table {name}" for name in NAMES]
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    finally:
        del TABLES["fixture-whole"]
