"""The kinds of run folder, what each must hold, and discovery under a runs directory.

    runs/NAME/                       kind       written by
      manifest.json + examples.parquet, outcomes.parquet, diagnoses/ID/   sweep   kvwb run
      manifest.json + curve.parquet, summary.parquet                      curve   kvwb curve
      manifest.json + conditions/anchors/augmentation/answers.parquet     fidelity kvwb fidelity
      manifest.json + diagnosis.json + tables                             diagnosis kvwb diagnose --out
      manifest.json + index.html + one .html/.json per example            report  kvwb report --all
      manifest.json + requests.parquet, calls.parquet, requests/METHOD/   pipeline kvwb pipeline

`run_kind(folder)` says which kind of run the workbench wrote in a folder (None: not the
workbench's). `scan_runs(root)` lists the run folders under a runs directory with what each
lacks; the app's run pickers and the Runs page read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.diagnosis.record import FILE as DIAGNOSIS_FILE, SCHEMA_VERSION as DIAGNOSIS_SCHEMA
from workbench.errors import WorkbenchError
from workbench.runstore.lock import writer_state
from workbench.runstore.manifest import MANIFEST, Manifest, is_workbench_manifest, load_manifest
from workbench.runstore.paths import subfolders

DIAGNOSES = "diagnoses"  # a sweep's per-example folders
STOPPED = "stopped (its process is gone)"  # a "running" manifest whose lock names a dead process


@dataclass(frozen=True)
class RunKind:
    """What a folder of one kind holds and which command makes it."""

    name: str
    files: tuple[str, ...]  # required, relative to the run folder
    columns: dict[str, tuple[str, ...]]  # parquet file -> required columns
    make: str  # an example command that writes one, its folders under "{root}" (`command`)

    def command(self, root: str = "runs") -> str:
        """The example command with its folders under `root` (quoted by the caller where it needs it)."""
        return self.make.format(root=root)

    def problems(self, folder: Path) -> list[str]:
        """What the folder lacks (files, columns), in words; empty when complete."""
        import pyarrow.parquet as pq

        out = []
        missing = [name for name in self.files if not (folder / name).exists()]
        if missing:
            out.append(f"missing {', '.join(missing)} (re-run `{self.command()}` with the same arguments to finish it)")
        for name, needed in self.columns.items():
            path = folder / name
            if not path.is_file():
                continue
            try:
                have = set(pq.read_schema(path).names)
            except Exception as err:  # noqa: BLE001 - an unreadable file is a message, not a traceback
                out.append(f"{name} is unreadable ({type(err).__name__}: {err})")
                continue
            lacking = [c for c in needed if c not in have]
            if lacking:
                out.append(f"{name} lacks columns {', '.join(lacking)} (made by an older version? re-run it)")
        return out


OUTCOME_COLUMNS = ("example_id", "selector", "unit", "budget", "n_reused", "n_recomputed", "answer", "flip",
                   "flip_strict", "em", "f1", "dense_logprob")
EXAMPLE_COLUMNS = ("example_id", "folder", "question", "dense_em", "spliced_em", "splice_flip")
PIPELINE_REQUEST_COLUMNS = ("method", "index", "example_id", "answer", "em", "contains", "n_calls", "n_reused")
PIPELINE_CALL_COLUMNS = ("method", "index", "agent", "role", "depth", "reused", "max_entropy", "threshold",
                         "confidence", "template_differs")
DIAGNOSIS_TABLES = ("tokens", "token_signals", "deviation", "selections", "outcomes", "residual")
FIDELITY_TABLES = ("conditions", "anchors", "augmentation", "thresholds", "answers")

KINDS: dict[str, RunKind] = {kind.name: kind for kind in (
    RunKind("sweep", ("examples.parquet", "outcomes.parquet", DIAGNOSES),
            {"outcomes.parquet": OUTCOME_COLUMNS, "examples.parquet": EXAMPLE_COLUMNS},
            "kvwb run --n 12 --out {root}/NAME"),
    RunKind("curve", ("curve.parquet", "summary.parquet"),
            {"summary.parquet": ("unit", "informed_error", "random_error", "unrepaired_error", "budget_share")},
            "kvwb curve --tokens 512 --prompts 3 --out {root}/NAME"),
    RunKind("fidelity", tuple(f"{t}.parquet" for t in FIDELITY_TABLES if t != "thresholds"), {},
            "kvwb fidelity --n 40 --out {root}/NAME"),
    RunKind("diagnosis", ("diagnosis.json", *(f"{t}.parquet" for t in DIAGNOSIS_TABLES)), {},
            "kvwb diagnose --example synthetic#3 --out {root}/NAME"),
    RunKind("report", ("index.html",), {}, "kvwb report {root}/RUN --all --out {root}/NAME"),
    RunKind("pipeline", ("requests.parquet", "calls.parquet", "requests"),
            {"requests.parquet": PIPELINE_REQUEST_COLUMNS, "calls.parquet": PIPELINE_CALL_COLUMNS},
            "kvwb pipeline --agents 3 --n 12 --out {root}/NAME"),
)}


def _json(path: Path):
    """A file's parsed JSON, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def run_kind(folder: Path) -> str | None:
    """The kind of run the workbench wrote in `folder`, or None when it did not write it.

    A folder is the workbench's only when its manifest.json parses, carries the workbench's
    marker (`manifest.is_workbench_manifest`) and names a known kind, or, without a manifest,
    its diagnosis.json is a Diagnosis document (a schema version and an example). A file's
    name alone proves nothing: browser extensions and web apps have a manifest.json too."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        manifest = _json(folder / MANIFEST)
        ours = is_workbench_manifest(manifest) and manifest["kind"] in KINDS
        return manifest["kind"] if ours else None
    doc = _json(folder / DIAGNOSIS_FILE) if (folder / DIAGNOSIS_FILE).is_file() else None
    if isinstance(doc, dict) and doc.get("schema_version") in (1, DIAGNOSIS_SCHEMA) and isinstance(doc.get("example"), dict):
        return "diagnosis"
    return None


def owned(folder: Path) -> bool:
    """Whether the workbench wrote `folder` (see `run_kind`)."""
    return run_kind(folder) is not None


def get_kind(name: str) -> RunKind:
    if name not in KINDS:
        raise WorkbenchError(f"unknown run kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]


@dataclass
class RunFolder:
    """One folder under a runs directory: its kind, manifest and what it lacks."""

    name: str
    path: Path
    kind: str | None
    manifest: Manifest | None
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The manifest's status; a "running" one whose writer is gone says so (a killed run)."""
        status = self.manifest.status if self.manifest is not None else "?"
        if status != "running":
            return status
        writer = writer_state(self.path)
        if writer == "gone":
            return STOPPED
        return "stopped (no process holds its lock)" if writer == "none" else status

    @property
    def ok(self) -> bool:
        return not self.problems

    def n_done(self) -> int:
        """Examples finished (sweeps; 1 for a diagnosis; a pipeline's requests every method has done)."""
        if self.kind == "diagnosis":
            return 1
        if self.kind == "pipeline":
            methods = self.manifest.methods if self.manifest is not None else ()
            done = [sum(1 for _ in (self.path / "requests" / m).glob("*.json")) for m in methods]
            return min(done, default=0)
        return sum(1 for p in subfolders(self.path / DIAGNOSES) if (p / "diagnosis.json").is_file())

    def n_target(self) -> int | None:
        """How many examples the run was asked for (sweeps, pipelines; 1 for a diagnosis), else None."""
        if self.kind == "diagnosis":
            return 1
        return self.manifest.n if self.kind in ("sweep", "pipeline") and self.manifest is not None else None

    def last_written(self) -> float:
        """When the run last wrote (epoch seconds): the newest of its folder, manifest and example folders."""
        times = []
        for p in (self.path, self.path / MANIFEST, self.path / DIAGNOSES, self.path / "requests"):
            try:
                times.append(p.stat().st_mtime)
            except OSError:
                continue
        return max(times, default=0.0)


def inspect_folder(path: Path) -> RunFolder | None:
    """The RunFolder of a run-like folder (a manifest, a saved Diagnosis, parquet tables), else None."""
    if (path / MANIFEST).is_file():
        try:
            manifest = load_manifest(path)
        except WorkbenchError as err:
            return RunFolder(path.name, path, None, None, [str(err)])
        kind = manifest.kind
        run = RunFolder(path.name, path, kind, manifest)
        if kind not in KINDS:
            run.problems.append(f"unknown run kind {kind!r} (this version reads {', '.join(KINDS)})")
        else:
            run.problems += KINDS[kind].problems(path)
        return run
    if (path / "diagnosis.json").is_file():  # a Diagnosis saved with Diagnosis.save (no manifest)
        return RunFolder(path.name, path, "diagnosis", None, KINDS["diagnosis"].problems(path))
    if any(path.glob("*.parquet")) or (path / DIAGNOSES).is_dir():
        return RunFolder(path.name, path, None, None, ["missing manifest.json: not a complete run folder "
                                                       "(interrupted before it began, or not made by kvwb)"])
    return None


def scan_runs(root: Path, kinds: tuple[str, ...] | None = None) -> list[RunFolder]:
    """Run folders directly under `root` (of `kinds`, when given), by name."""
    found = []
    for path in subfolders(Path(root)):
        try:
            run = inspect_folder(path)
        except OSError as err:
            run = RunFolder(path.name, path, None, None, [f"unreadable: {err}"])
        if run is not None and (kinds is None or run.kind in kinds):
            found.append(run)
    return found
