"""`kvwb results`: RESULTS' marked tables compared cell by cell with the records, and every table
and figure regenerated into a folder.

    report = check_document(Path("docs/RESULTS.md"), Records("docs/records", scratch))
    report.ok, report.differences      # "TABLE row R column C: RESULTS says X, records give Y"
    write_all(Path("out"), Records(...))   # NAME.md, NAME.csv per table, NAME.html per figure
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import TableRefusedError, WorkbenchError, WorkbenchWarning
from workbench.results.cells import cell_difference
from workbench.results.markdown import Table, tables, to_markdown
from workbench.results.registry import FIGURES, TABLES


@dataclass
class CheckReport:
    """What a check found: tables marked and not, cells compared, and each difference as a line."""

    marked: int = 0
    unmarked: int = 0
    cells: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        if not self.marked:
            return f"nothing checked ({self.unmarked} unmarked tables)"
        if self.ok:
            return (f"{self.marked} tables, {self.cells} cells agree ({self.unmarked} unmarked tables not "
                    f"checked)")
        return (f"{len(self.differences)} difference(s) in {self.marked} marked tables ({self.unmarked} unmarked "
                f"not checked)")


def _quoted(text: str) -> str:
    return repr(" ".join(str(text).split()))


def compare_table(table: Table, frame) -> tuple[int, list[str]]:
    """(cells compared, differences) of a marked table's body against its regenerated frame (the
    header is RESULTS' wording and is not compared); a different shape is one difference."""
    name = table.name
    shape = (len(table.rows), len(table.header))
    if shape != frame.shape or any(len(r) != len(table.header) for r in table.rows):
        return 0, [f"{name} (line {table.line}): RESULTS has {len(table.rows)} rows x {len(table.header)} columns, "
                   f"the records give {frame.shape[0]} x {frame.shape[1]}"]
    found = []
    for i, (row, values) in enumerate(zip(table.rows, frame.itertuples(index=False)), start=1):
        for j, (printed, regenerated) in enumerate(zip(row, values)):
            if cell_difference(printed, regenerated) is not None:
                found.append(f"{name} row {i} ({_quoted(row[0])}) column {j + 1} ({_quoted(table.header[j])}): "
                             f"RESULTS says {_quoted(printed)}, records give {_quoted(regenerated)}")
    return shape[0] * shape[1], found


def check_document(path: Path, records, progress: bool = False) -> CheckReport:
    """Every marked table of the markdown file `path` regenerated and compared; an unknown NAME is an
    error (one line), before anything is computed."""
    path = Path(path)
    if not path.is_file():
        raise WorkbenchError(f"{path} is not a file")
    found = tables(path.read_text(encoding="utf-8"))
    marked = [t for t in found if t.name is not None]
    for t in marked:
        if t.name not in TABLES:
            raise WorkbenchError(f"{path} line {t.line}: unknown table {t.name!r}; registered: "
                                 f"{', '.join(TABLES.names())}")
    report = CheckReport(marked=len(marked), unmarked=len(found) - len(marked))
    if not marked:
        report.differences.append(f"no <!-- kvwb-results: NAME --> table in {path}: nothing to check; mark a table "
                                  "or name another file")
    for t in _progress(marked, progress, "checking tables"):
        n, differences = compare_table(t, TABLES[t.name].build(records))
        report.cells += n
        report.differences += differences
    return report


def _progress(items, on: bool, desc: str):
    if not on:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


def write_all(out: Path, records, force: bool = False, progress: bool = True, names=None) -> list[str]:
    """Each registered table as OUT/NAME.md and OUT/NAME.csv and each figure as OUT/NAME.html, built
    in a temporary folder beside OUT and renamed into place whole; a non-empty OUT is refused
    without `force` (then replaced whole). Writing every one (`names` None), one the records refuse
    (a TableRefusedError: a study short of its n or registered and not kept yet, a failed
    pre-registered check) is left out with a
    WorkbenchWarning naming it; one
    asked for by name is not, nor any other error. Returns the files written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise WorkbenchError(f"{out} is not empty; choose a new folder or give --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    written = []
    try:
        jobs = [("table", n) for n in (names or TABLES.names())] + [("figure", n) for n in FIGURES.names()
                                                                     if names is None]
        for kind, name in _progress(jobs, progress, "regenerating"):
            entry = (TABLES if kind == "table" else FIGURES).get_or_raise(name)
            try:
                built = entry.build(records)
            except TableRefusedError as err:  # the records cannot give it (a study short of its n or not kept, a failed check)
                if names is not None:
                    raise
                warnings.warn(WorkbenchWarning(f"{kind} {name} not written: {err}"), stacklevel=2)
                continue
            if kind == "table":
                (building / f"{name}.md").write_text(to_markdown(built), encoding="utf-8")
                built.astype(str).to_csv(building / f"{name}.csv", index=False)
                written += [f"{name}.md", f"{name}.csv"]
            else:
                (building / f"{name}.html").write_text(built.to_html(include_plotlyjs=True), encoding="utf-8")
                written.append(f"{name}.html")
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.rename(out, old / out.name)
            os.rename(building, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return written
