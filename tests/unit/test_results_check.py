"""`kvwb results`: marked tables regenerated from a record and compared cell by cell at the precision
printed (a tiny record of a four-example sweep on the tiny Llama, kept as docs/records keeps one)."""

import json
import shutil
from pathlib import Path

import pytest

from workbench.cli.main import main
from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.results import FIGURES, TABLES, Records, check_document, register_figure, register_table, write_all
from workbench.results.cells import cell_difference, fmt, same_number
from workbench.results.markdown import tables, to_markdown
from workbench.results.provenance import provenance
from workbench.results.studies import gap_figure, gap_table, primary

KEEP = Path(__file__).parents[2] / "docs" / "records" / "keep.py"
FAMILY = {"A": (("A1", "cacheblend:none@0.5", ""), ("A2", "cacheblend:random@0.5", " (mean of {} draws)"))}
GAP = {"random": "random ({} draws)", "cacheblend": "cacheblend"}


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory, tiny_llama):
    """docs/records in small: keep.py and the record `study` of a four-example sweep."""
    import importlib.util

    root = tmp_path_factory.mktemp("results")
    data = root / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "passages": ["Ada is coached by Ben.", f"Ben was born in "
                                        f"{city}."], "question": "Where was the coach born?", "answers": [city]})
                            + "\n" for i, city in enumerate(["Oslo", "Rome", "Lima", "Kyiv"])))
    config = SweepConfig(dataset=f"jsonl:{data}", n=4, diagnose=DiagnoseConfig(
        selectors=("none", "full", "random", "cacheblend"), budgets=(0.2, 0.5), max_new_tokens=3,
        attribution=False))
    run_sweep(tiny_llama, config, root / "runs" / "study", progress=False)
    records = root / "records"
    records.mkdir()
    shutil.copy(KEEP, records / "keep.py")
    spec = importlib.util.spec_from_file_location("keep_for_results", records / "keep.py")
    keep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keep)
    keep.save(root / "runs" / "study", records)
    return records


@pytest.fixture()
def fixture_tables():
    """Two tables and a figure of the fixture record, registered for the test only."""
    register_table("fixture-contrasts", "the fixture's contrasts")(lambda r: primary(r, "study", FAMILY))
    register_table("fixture-gap", "the fixture's gap")(lambda r: gap_table(r, "study", GAP))
    register_figure("fixture-gap", "the fixture's gap figure")(lambda r: gap_figure(r, "study"))
    saved = {n: FIGURES.pop(n) for n in list(FIGURES) if n != "fixture-gap"}  # real records are not in the fixture
    yield ("fixture-contrasts", "fixture-gap")
    del TABLES["fixture-contrasts"], TABLES["fixture-gap"], FIGURES["fixture-gap"]
    FIGURES.update(saved)


def _document(records_dir, tmp_path, names) -> Path:
    """A markdown file with each named table marked, and one unmarked table."""
    parts = ["# Results", "", "| unmarked | table |", "|---|---|", "| 1 | 2 |", ""]
    for name in names:
        parts += ["Some text.", "", f"<!-- kvwb-results: {name} -->",
                  to_markdown(TABLES[name].build(Records(records_dir, tmp_path / f"scratch-{name}")))]
    path = tmp_path / "RESULTS.md"
    path.write_text("\n".join(parts))
    return path


def test_the_check_passes_on_the_records_and_names_the_cell_an_edit_changed(records_dir, fixture_tables, tmp_path,
                                                                          capsys):
    doc = _document(records_dir, tmp_path, fixture_tables)
    report = check_document(doc, Records(records_dir, tmp_path / "scratch"))
    assert report.ok and (report.marked, report.unmarked) == (2, 1)
    assert report.cells == 2 * 7 + 2 * 3  # two contrasts x seven columns, two selectors x (label + two budgets)
    assert main(["results", "--check", "--results", str(doc), "--records", str(records_dir)]) == 0
    assert "2 tables, 20 cells agree" in capsys.readouterr().out

    lines = doc.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("| A1 "))
    cells = lines[row].split(" | ")
    a_vs_b = cells[5]  # "EM of A vs B": "x.xxx vs y.yyy"
    first = a_vs_b.split(" vs ")[0]
    edited = f"{float(first) + 0.5:.3f}"
    lines[row] = lines[row].replace(a_vs_b, a_vs_b.replace(first, edited, 1))
    doc.write_text("\n".join(lines))
    report = check_document(doc, Records(records_dir, tmp_path / "scratch2"))
    assert len(report.differences) == 1
    assert report.differences[0].startswith("fixture-contrasts row 1 ('A1 cacheblend vs none') column 6 "
                                            "('EM of A vs B'): RESULTS says ")
    assert f"'{edited} vs" in report.differences[0] and f"records give '{a_vs_b}'" in report.differences[0]
    assert main(["results", "--check", "--results", str(doc), "--records", str(records_dir)]) == 1
    assert "fixture-contrasts row 1" in capsys.readouterr().out


def test_an_unknown_name_a_loose_marker_and_another_shape_are_errors(records_dir, fixture_tables, tmp_path, capsys):
    doc = tmp_path / "R.md"
    doc.write_text("<!-- kvwb-results: no-such-table -->\n| a |\n|---|\n| 1 |\n")
    with pytest.raises(WorkbenchError, match="line 2: unknown table 'no-such-table'; registered: .*fixture-gap"):
        check_document(doc, Records(records_dir, tmp_path / "s"))
    assert main(["results", "--check", "--results", str(doc), "--records", str(records_dir)]) == 2
    assert "unknown table 'no-such-table'" in capsys.readouterr().err
    doc.write_text("<!-- kvwb-results: fixture-gap -->\n\n| a |\n|---|\n| 1 |\n")
    with pytest.raises(WorkbenchError, match="line 1: the marker for 'fixture-gap' is not immediately before"):
        check_document(doc, Records(records_dir, tmp_path / "s"))

    doc = _document(records_dir, tmp_path, ["fixture-gap"])
    doc.write_text("\n".join(line for line in doc.read_text().splitlines() if not line.startswith("| cacheblend")))
    report = check_document(doc, Records(records_dir, tmp_path / "s2"))
    assert report.differences == [f"fixture-gap (line {tables(doc.read_text())[1].line}): RESULTS has 1 rows x 3 "
                                  f"columns, the records give 2 x 3"]


@pytest.mark.parametrize("printed, value, agrees", [
    ("0.43", 0.4312, True), ("0.43", 0.4362, False), ("−0.00", -0.001, True), ("+0.055", 0.055, True),
    ("1.2e-14", 1.24e-14, True), ("1.2e-14", 1.26e-14, False), ("6e-5", 6.4e-5, True), ("6e-5", 5.4e-5, False),
    ("1", 0.9999, True), ("0.0020", 0.001953125, True), ("0.00195", 0.001953125, True), ("0.0019", 0.001953125, False),
])
def test_a_number_is_read_at_the_precision_printed(printed, value, agrees):
    assert same_number(printed, value) is agrees


def test_cells_compare_their_numbers_and_their_text():
    assert cell_difference("1 / 53", "1 / 53") is None
    assert cell_difference("1 / 53", "1 / 54") is not None
    assert cell_difference("0.335  vs\t0.280", fmt("{:.3f} vs {:.3f}", 0.3351, 0.2799)) is None
    assert cell_difference("0.34 vs 0.28", fmt("{:.3f} vs {:.3f}", 0.3351, 0.2799)) is None  # fewer decimals printed
    assert cell_difference("0.335 vs 0.280", fmt("{:.3f} and {:.3f}", 0.335, 0.28)) == "text differs"
    assert cell_difference("**0.044**", fmt("{:.3f}", 0.044)) == "text differs"
    assert cell_difference("A1 cadence-grad, niah_single-512", "A1 cadence-grad, niah_single-512") is None
    assert cell_difference("– (5 of 5 draws separate)", fmt("– ({} of {} draws separate)", 4, 5)) is not None


def test_out_writes_every_table_and_figure_whole_and_refuses_a_full_folder(records_dir, fixture_tables, tmp_path,
                                                                           monkeypatch):
    out = tmp_path / "out"
    assert main(["results", "--out", str(out), "--records", str(records_dir), "--table", "fixture-gap"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fixture-gap.csv", "fixture-gap.md"]
    assert (out / "fixture-gap.md").read_text().startswith("| selector | b = 0.2 | 0.5 |")
    with pytest.raises(WorkbenchError, match="is not empty; .* --force"):
        write_all(out, Records(records_dir, tmp_path / "s"), names=["fixture-gap"], progress=False)

    monkeypatch.setitem(TABLES, "fixture-broken", TABLES["fixture-gap"].__class__(
        "fixture-broken", lambda r: 1 / 0, "raises"))
    with pytest.raises(ZeroDivisionError):
        write_all(out, Records(records_dir, tmp_path / "s2"), force=True, names=["fixture-gap", "fixture-broken"],
                  progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["fixture-gap.csv", "fixture-gap.md"]  # the old folder kept
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no temporary left

    every = tmp_path / "every"
    monkeypatch.delitem(TABLES, "fixture-broken")
    only = {n: TABLES.pop(n) for n in list(TABLES) if not n.startswith("fixture-")}
    try:
        def wrong(records):
            raise WorkbenchError("a table that cannot be built")  # not a study short of its n

        TABLES["fixture-wrong"] = TABLES["fixture-gap"].__class__("fixture-wrong", wrong, "raises")
        try:  # writing every table passes over only a record short of its n, not any other error
            with pytest.raises(WorkbenchError, match="cannot be built"):
                write_all(every, Records(records_dir, tmp_path / "s4"), progress=False)
        finally:
            del TABLES["fixture-wrong"]
        assert not every.exists()
        assert sorted(write_all(every, Records(records_dir, tmp_path / "s3"), progress=False)) == sorted(
            ["fixture-contrasts.md", "fixture-contrasts.csv", "fixture-gap.md", "fixture-gap.csv", "fixture-gap.html"])
    finally:
        TABLES.update(only)
    assert "<html" in (every / "fixture-gap.html").read_text()[:2000].lower()


def test_provenance_names_the_environment_or_says_not_recorded():
    env = {"code": {"revision": "98570d8c54", "dirty": False}, "versions": {"python": "3.11.7", "torch": "2.13.0",
                                                                            "transformers": "5.25.0", "numpy": "2.4.6"}}
    assert provenance({"environment": env}) == (
        "`98570d8`", "python 3.11.7, torch 2.13.0, transformers 5.25.0, numpy 2.4.6")
    resumed = {"environment": env, "segments": [{"environment": env}, {"environment": {
        "code": {"revision": "1309ae8aa", "dirty": True}, "versions": {"transformers": "5.26.0"}}}]}
    assert provenance(resumed)[0] == "`98570d8` + `1309ae8` (dirty)"
    commit, versions = provenance({"git_revision": "e678671b08", "versions": {"transformers": "5.24.0"}})
    assert commit == "`e678671` at its first start; a resumed session's code not recorded"
    assert versions == "transformers 5.24.0 (first start)"
    assert provenance({"git_revision": None})[0] == "not recorded"
    assert provenance(None) == ("not recorded (CSVs, no manifest)", "not recorded")


@pytest.mark.parametrize("document", ["docs/RESULTS.md", "docs/records/README.md",
                                      "docs/results-log/2026-12-06-10.12-grid-table.md",
                                      "docs/results-log/2026-12-06-10.12-smollm2-study-readings.md",
                                      "docs/results-log/2026-12-07-10.14-readings.md",
                                      "docs/results-log/2026-12-07-10.12w-readings.md",
                                      "docs/results-log/2026-12-07-10.14g-readings.md"])
def test_every_table_the_docs_mark_is_registered_and_whole(document):
    """The marks `make results` checks name registered tables of one shape (no record is read here)."""
    found = tables((Path(__file__).parents[2] / document).read_text(encoding="utf-8"))
    marked = [t for t in found if t.name is not None]
    assert marked, f"{document} marks no table"
    for t in marked:
        assert t.name in TABLES, f"{document} line {t.line}: {t.name} is not registered"
        assert t.rows and all(len(row) == len(t.header) for row in t.rows), f"{t.name}: a row of another width"
