"""Writing reports: one file per Diagnosis, or a run's every example into a folder with an index.

    write_report(d, "ex.html")                              # or .json, by the suffix
    report_run("runs/study", example_id="q3", out="q3.html")
    report_run("runs/study", all=True, out="runs/study-reports")   # index.html + ID.html/ID.json

Outputs are checked by the run store before any work (`runstore.check_out`): a file exists
only with `force`; a folder is replaced only with `force` and only when the workbench wrote
it (its manifest.json). Files and folders appear complete or not at all (`workbench.atomic`).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from workbench import runstore
from workbench.atomic import atomic_folder, write_text
from workbench.diagnosis import Diagnosis
from workbench.diagnosis.record import FILE as DIAGNOSIS_FILE
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.report.html import diagnosis_to_html
from workbench.report.index import index_html
from workbench.report.schema import diagnosis_to_json, dumps

SUFFIXES = (".html", ".json")
RESERVED = ("index", "manifest")  # stems of the folder's own files
RUN_COMMAND = "kvwb run --dataset DATA --out {run}"


def render_report(diagnosis: Diagnosis, fmt: str, run_manifest: runstore.Manifest | None = None) -> str:
    """The report as text: fmt "html" or "json"."""
    if fmt == "html":
        return diagnosis_to_html(diagnosis, run_manifest)
    if fmt == "json":
        return dumps(diagnosis_to_json(diagnosis, run_manifest))
    raise WorkbenchError(f"unknown report format {fmt!r}; use html or json")


def write_report(diagnosis: Diagnosis, out: str | Path, force: bool = False,
                 run_manifest: runstore.Manifest | None = None) -> Path:
    """Write the report as .html or .json (by suffix), atomically; an existing file only with `force`."""
    if Path(out).name in (runstore.MANIFEST, DIAGNOSIS_FILE):
        raise WorkbenchError(f"{out}: that name is a run's own file; choose another --out")
    out = runstore.check_out(out, force=force, file_suffixes=SUFFIXES)
    text = render_report(diagnosis, out.suffix.lower()[1:], run_manifest)
    runstore.check_out(out, force=force, file_suffixes=SUFFIXES)  # it may have appeared meanwhile
    try:
        write_text(out, text, make_folders=True)  # folders check_out accepted as creatable
    except OSError as err:
        raise WorkbenchError(f"could not write {out}: {err.strerror or err}; nothing was left behind") from None
    return out


def file_stems(ids: list[str]) -> dict[str, str]:
    """A file name stem per example id: the run store's safe folder name, unique even on
    case-insensitive file systems, never the index's or the manifest's."""
    stems, taken = {}, set(RESERVED)
    for example_id in ids:
        stem = base = runstore.folder_name(example_id) or "example"
        n = 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}-{n}"
        taken.add(stem.lower())
        stems[example_id] = stem
    return stems


def _ids_hint(ids: list[str], n: int = 5) -> str:
    return f"{', '.join(repr(i) for i in ids[:n])}{', ...' if len(ids) > n else ''} ({len(ids)} in all)"


def _no_diagnoses(run: Path, manifest: runstore.Manifest) -> WorkbenchError:
    kind = manifest.kind
    what = f"a {kind!r} run" if kind != "sweep" else f"status {manifest.status!r}"
    into = run if kind == "sweep" else "NEW_FOLDER"  # a run of another kind is never written into by kvwb run
    return WorkbenchError(f"{run} holds no per-example diagnoses (signals) to report ({what}); make them with "
                          f"`{RUN_COMMAND.format(run=into)}` (or `kvwb diagnose --example DATASET#ID --out FOLDER` "
                          f"for one example)")


def _sweep(run: Path, manifest: runstore.Manifest) -> tuple[runstore.SweepRun, list[str]]:
    """The sweep and the ids of its examples with a saved diagnosis, in run order."""
    try:
        sweep = runstore.load_sweep(run)
    except WorkbenchError:
        raise _no_diagnoses(run, manifest) from None
    ids = [i for i in sweep.example_ids if (sweep.diagnosis_folder(i) / DIAGNOSIS_FILE).is_file()]
    if not ids:
        raise _no_diagnoses(run, manifest)
    return sweep, ids


def _check_folder_out(out: str | Path, force: bool) -> Path:
    """The --all folder: not a file name, not a run of another kind, replaceable only if ours."""
    if Path(out).suffix.lower() in SUFFIXES:
        raise WorkbenchError(f"--all writes a folder (index.html plus one report per example); --out {out} looks "
                             f"like a file name")
    return runstore.check_out(out, kind="report", force=force)


def _write_all(run: Path, sweep: runstore.SweepRun, ids: list[str], out: str | Path, force: bool) -> Path:
    """Every example's .html and .json, the index and a manifest of kind "report", as one folder."""
    target = _check_folder_out(out, force)
    started = time.perf_counter()
    manifest = runstore.new_manifest("report", sweep.manifest.model, {"source": str(run), "examples": ids})
    stems, rows, unreadable = file_stems(ids), [], {}
    try:
        with atomic_folder(target) as tmp:
            for example_id in ids:
                try:
                    diagnosis = sweep.diagnosis(example_id)
                except (WorkbenchError, ValueError, KeyError) as err:  # a corrupt folder (ArrowInvalid is a ValueError)
                    unreadable[example_id] = {"error": f"unreadable, skipped ({type(err).__name__}: {err}); "
                                                       f"`kvwb run` with the same arguments recomputes it"}
                    warnings.warn(f"example {example_id!r}: {unreadable[example_id]['error']}", WorkbenchWarning,
                                  stacklevel=2)
                    continue
                doc = diagnosis_to_json(diagnosis, sweep.manifest)
                (tmp / f"{stems[example_id]}.json").write_text(dumps(doc), encoding="utf-8")
                (tmp / f"{stems[example_id]}.html").write_text(diagnosis_to_html(diagnosis, sweep.manifest),
                                                               encoding="utf-8")
                ex, answers, flips = doc["example"], doc["answers"], doc["flips"]
                rows.append({"id": example_id, "stem": stems[example_id], "question": ex["question"],
                             "gold": " | ".join(ex["gold"]) or "(none)", "dense": answers["dense"]["text"],
                             "spliced": answers["spliced"]["text"], "spliced_flip": flips["spliced"],
                             "dense_tokens": len(answers["dense"]["token_ids"]),
                             "spliced_tokens": len(answers["spliced"]["token_ids"]),
                             "n_flipped": flips["n_flipped"], "n_repairs": flips["n_repairs"]})
            (tmp / "index.html").write_text(index_html(run, sweep.manifest, rows, {**sweep.failures, **unreadable}),
                                            encoding="utf-8")
            runstore.write_manifest(tmp, runstore.finished(manifest, seconds=time.perf_counter() - started,
                                                           n_examples=len(rows), skipped=sorted(unreadable)))
            _check_folder_out(target, force)  # it may have appeared while the reports were written
    except OSError as err:
        raise WorkbenchError(f"could not write {target}: {err.strerror or err}; nothing was left behind") from None
    return target


def report_run(run_folder: str | Path, example_id: str | None = None, all: bool = False,
               out: str | Path | None = None, force: bool = False) -> Path:
    """Reports from a `kvwb run` folder, a `kvwb diagnose --out` folder or a `Diagnosis.save` folder.

    One example (`example_id`; optional for a single diagnosis) -> one .html or .json file at
    `out`; `all=True` -> the folder `out` with index.html, manifest.json and, per example,
    ID.html and ID.json (IDs made file-system safe). Returns the path written.
    """
    if out is None:
        raise WorkbenchError("give --out: FILE.html or FILE.json for one example, a folder with --all")
    if all and example_id is not None:
        raise WorkbenchError("give either --example ID or --all, not both")
    run = Path(run_folder)
    if not run.is_dir():
        raise WorkbenchError(f"{run} is not a folder; give a run folder written by `kvwb run ... --out RUN`")
    if (run / DIAGNOSIS_FILE).is_file():  # one diagnosis, with or without a run manifest
        manifest = runstore.load_manifest(run) if (run / runstore.MANIFEST).is_file() else None
        diagnosis = Diagnosis.load(run)
        if example_id is not None and example_id != diagnosis.example_id:
            raise WorkbenchError(f"{run} holds example {diagnosis.example_id!r}, not {example_id!r}")
        if all:
            raise WorkbenchError(f"{run} holds one diagnosis; --all needs a run folder (`kvwb run ... --out RUN`)")
        return write_report(diagnosis, out, force=force, run_manifest=manifest)

    manifest = runstore.load_manifest(run)
    if manifest.kind != "sweep":
        raise _no_diagnoses(run, manifest)
    sweep, ids = _sweep(run, manifest)
    if all:
        return _write_all(run, sweep, ids, out, force)
    if example_id is None:
        raise WorkbenchError(f"give --example ID (one of {_ids_hint(ids)}) or --all")
    if example_id not in ids:
        failures = sweep.failures
        if example_id in failures:
            raise WorkbenchError(f"example {example_id!r} failed in this run ({failures[example_id].get('error')}); "
                                 f"it has no diagnosis to report")
        raise WorkbenchError(f"example {example_id!r} is not in {run}; examples there: {_ids_hint(ids)}")
    return write_report(sweep.diagnosis(example_id), out, force=force, run_manifest=manifest)
