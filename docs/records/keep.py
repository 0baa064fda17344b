"""Keep a sweep's record in git between sessions (the machine and its `runs/` can be lost).

    python docs/records/keep.py save runs/NAME      -> docs/records/NAME
    python docs/records/keep.py restore NAME        -> runs/NAME, tables rebuilt; the run's own
                                                       command then resumes it where it stopped

What is kept is what a resume reads back and a summary needs: the manifest and, per finished
example, `diagnosis.json` and `outcomes.parquet` (about 30 kB an example), and where the example
has them its two evidence tables (`evidence_ranking`, `evidence_attention`: a few kB; the
evidence study reads them). The per-layer tables, about 1.7 MB an example, are left out, so the
app's per-example views of a restored run lack them. Files already kept are not rewritten, so git
stores each example once.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEPT = ("diagnosis.json", "outcomes.parquet")
KEPT_WHERE_PRESENT = ("evidence_ranking.parquet", "evidence_attention.parquet")


def save(run: Path, records: Path = HERE) -> Path:
    """Copy what is kept of `run` into `records/NAME`; files kept already are left as they are."""
    dest = records / run.name
    (dest / "diagnoses").mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "manifest.json", dest / "manifest.json")
    n = 0
    for folder in sorted((run / "diagnoses").iterdir()):
        if folder.name.startswith(".") or not all((folder / f).is_file() for f in KEPT):
            continue  # temporary, moved aside, or not finished
        (dest / "diagnoses" / folder.name).mkdir(exist_ok=True)
        for f in (*KEPT, *(f for f in KEPT_WHERE_PRESENT if (folder / f).is_file())):
            if not (dest / "diagnoses" / folder.name / f).is_file():
                shutil.copy2(folder / f, dest / "diagnoses" / folder.name / f)
        n += 1
    print(f"kept {n} examples of {run} in {dest}")
    return dest


def restore(name: str, records: Path = HERE, runs: Path = Path("runs")) -> Path:
    """Copy `records/NAME` into `runs/NAME` and rebuild its tables (refused if it exists)."""
    from workbench.runstore.manifest import read_manifest
    from workbench.runstore.writers import SweepStore

    src, run = records / name, runs / name
    if run.exists():
        raise SystemExit(f"{run} exists; move it aside first")
    shutil.copytree(src, run)
    store = SweepStore(run, read_manifest(run, kind="sweep"))
    ids = sorted(store.done_ids, key=lambda i: (len(i), i))  # the generators' ids are 0, 1, 2, ...
    store.write_tables(ids)
    print(f"restored {store.n_done} examples into {run}")
    return run


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "restore"):
        raise SystemExit(__doc__)
    save(Path(sys.argv[2])) if sys.argv[1] == "save" else restore(sys.argv[2])
