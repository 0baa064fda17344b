"""Keep a sweep's record in git between sessions (the machine and its `runs/` can be lost).

    .venv/bin/python docs/records/keep.py save runs/NAME    -> docs/records/NAME
    .venv/bin/python docs/records/keep.py restore NAME      -> runs/NAME, tables rebuilt; the run's own
                                                               command then resumes it where it stopped

What is kept is what a resume reads back and a summary needs: the manifest, the run's
`preregistration.json` where it has one (its families, written once; a save refuses one that differs
from the record's), and, per finished
example, `diagnosis.json` and `outcomes.parquet` (about 30 kB an example), and where the example
has them its two evidence tables (`evidence_ranking`, `evidence_attention`: a few kB; the
evidence study reads them). The per-layer tables, about 1.7 MB an example, are left out, so the
app's per-example views of a restored run lack them. Files already kept are not rewritten, so git
stores each example once.

The records are evidence, so both ways are as safe as a run: a save reads the run's manifest
first (a sweep of the workbench, or nothing is written) and refuses a record that holds another
run (kind, model or arguments differ); a NAME is a plain folder name; a restore is built under a
temporary name in `runs/` and renamed into place only when whole, and names any example it found
unreadable (moved aside, for the run's command to recompute) and then exits non-zero.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEPT = ("diagnosis.json", "outcomes.parquet")
KEPT_WHERE_PRESENT = ("evidence_ranking.parquet", "evidence_attention.parquet")
PREREGISTRATION = "preregistration.json"  # beside the manifest, where the run was started with --preregistration


def _plain_name(name: str) -> str:
    """`name` if it is one plain folder name (no separator, not '.' or '..'), else refused."""
    name = str(name)
    if not name.strip() or name in (".", "..") or "/" in name or os.sep in name or "\0" in name:
        raise SystemExit(f"keep.py: {name!r} is not a plain record name (no '/', not '.' or '..')")
    return name


def _manifest(folder: Path) -> dict:
    """The sweep manifest of `folder`, read by the runstore's reader; one line if it is not one."""
    from workbench.errors import WorkbenchError
    from workbench.runstore.manifest import read_manifest

    try:
        return read_manifest(folder, kind="sweep")
    except WorkbenchError as err:
        raise SystemExit(f"keep.py: {err}") from None


def _identity(manifest: dict, without: set[str], args_without: set[str] = frozenset()) -> dict:
    """What makes a run the run it is: kind, model (fingerprint keys in `without` left out), args (keys in
    `args_without` left out)."""
    model = dict(manifest.get("model") or {})
    if isinstance(model.get("fingerprint"), dict):
        model["fingerprint"] = {k: v for k, v in model["fingerprint"].items() if k not in without}
    args = manifest.get("args")
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in args_without}
    return {"kind": manifest.get("kind"), "model": model, "args": args}


def _check_same_run(run: Path, dest: Path, manifest: dict) -> None:
    """Refuse to save `run` over a record of another run (its examples would be mixed in)."""
    from workbench.runstore.manifest import ADDED_ARGS, ADDED_FINGERPRINT_KEYS, identity_differences

    kept = _manifest(dest)
    prints = [(m.get("model") or {}).get("fingerprint") or {} for m in (kept, manifest)]
    without = {k for k in ADDED_FINGERPRINT_KEYS if any(k not in p for p in prints)}  # written before the key
    args = [m.get("args") if isinstance(m.get("args"), dict) else {} for m in (kept, manifest)]
    args_without = {k for k in ADDED_ARGS if any(k not in a for a in args)}  # a record kept before the key
    diffs = identity_differences(_identity(kept, without, args_without), _identity(manifest, without, args_without))
    if diffs:
        raise SystemExit(f"keep.py: {dest} holds the record of another run than {run} ({'; '.join(diffs)}); "
                         f"save it under another name")


def _copy(src: Path, dst: Path) -> None:
    """Copy one file whole: a temporary beside `dst`, renamed onto it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}-", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save(run: Path, records: Path = HERE) -> Path:
    """Copy what is kept of `run` into `records/NAME`; files kept already are left as they are."""
    run = Path(run).resolve()
    manifest = _manifest(run)  # a sweep of the workbench, or nothing is written
    dest = Path(records) / _plain_name(run.name)
    if dest.resolve() == run:
        raise SystemExit(f"keep.py: {run} is the record itself; save a run from runs/")
    if dest.exists():
        _check_same_run(run, dest, manifest)
    pre = run / PREREGISTRATION
    if pre.is_file() and (dest / PREREGISTRATION).is_file() and pre.read_bytes() != (dest / PREREGISTRATION).read_bytes():
        raise SystemExit(f"keep.py: {dest / PREREGISTRATION} differs from {pre}: a pre-registration is written once; "
                         f"save this run under another name")
    (dest / "diagnoses").mkdir(parents=True, exist_ok=True)
    _copy(run / "manifest.json", dest / "manifest.json")
    if pre.is_file() and not (dest / PREREGISTRATION).is_file():
        _copy(pre, dest / PREREGISTRATION)  # the families the run was started under, read by summary --preregistered
    n = 0
    for folder in sorted((run / "diagnoses").iterdir()) if (run / "diagnoses").is_dir() else ():
        if folder.name.startswith(".") or not all((folder / f).is_file() for f in KEPT):
            continue  # temporary, moved aside, or not finished
        (dest / "diagnoses" / folder.name).mkdir(exist_ok=True)
        for f in (*KEPT, *(f for f in KEPT_WHERE_PRESENT if (folder / f).is_file())):
            if not (dest / "diagnoses" / folder.name / f).is_file():
                _copy(folder / f, dest / "diagnoses" / folder.name / f)
        n += 1
    print(f"kept {n} examples of {run} in {dest}")
    return dest


def restore(name: str, records: Path = HERE, runs: Path = Path("runs")) -> Path:
    """Copy `records/NAME` into `runs/NAME` and rebuild its tables (refused if it exists); exits
    non-zero, naming them, when examples of the record were unreadable (moved aside)."""
    from workbench.runstore import natural_key
    from workbench.runstore.writers import SweepStore

    src, run = Path(records) / _plain_name(name), Path(runs) / name
    manifest = _manifest(src)  # a truncated manifest is refused before anything is written
    if run.exists():
        raise SystemExit(f"{run} exists; move it aside first")
    Path(runs).mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{name}-restoring-", dir=runs))
    try:
        shutil.copytree(src, building, dirs_exist_ok=True)
        store = SweepStore(building, manifest)
        ids = sorted(store.done_ids, key=natural_key)  # reading orders them so too (runstore.load_sweep)
        store.write_tables(ids)
        os.rename(building, run)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    print(f"restored {store.n_done} examples into {run}")
    if store.corrupt:
        raise SystemExit(f"keep.py: {len(store.corrupt)} example(s) of {src} were unreadable and moved aside in "
                         f"{run / 'diagnoses'} (the run's command recomputes them): {'; '.join(store.corrupt)}")
    return run


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "restore"):
        raise SystemExit(__doc__)
    save(Path(sys.argv[2])) if sys.argv[1] == "save" else restore(sys.argv[2])
