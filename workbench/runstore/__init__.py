"""The run store: the folder contract of every kind of run (layout, manifest, atomic writes,
out-path checks, one writer at a time, loaders, discovery). Nothing else writes a manifest.

    from workbench import runstore
    runstore.check_out("runs/x", force=False)             # before any model work
    run = runstore.load_sweep("runs/study")               # examples, outcomes, manifest (typed)
    run.manifest.dataset, run.manifest.selectors          # a Manifest: runstore.load_manifest(folder)
    runstore.scan_runs("runs")                            # what the app lists
"""

from workbench.runstore.kinds import (
    DIAGNOSES, KINDS, STOPPED, RunFolder, RunKind, get_kind, inspect_folder, owned, run_kind, scan_runs,
)
from workbench.runstore.loaders import (
    CurveRun, FidelityRun, PipelineRun, SweepRun, load_curve, load_fidelity, load_pipeline, load_sweep,
    natural_key, upgrade_table,
)
from workbench.runstore.lock import lock_holder, run_lock, writer_state
from workbench.runstore.manifest import (
    MANIFEST, Manifest, check_resumable, finished, git_revision, identity_differences, interruption,
    is_workbench_manifest,
    load_manifest, new_manifest, now, package_versions, read_manifest, resume_manifest, write_manifest,
)
from workbench.runstore.out import check_out, enclosing_run
from workbench.runstore.paths import folder_name, move_aside, subfolders
from workbench.runstore.writers import SweepStore, example_row, write_diagnosis_run, write_run

__all__ = [
    "DIAGNOSES", "KINDS", "MANIFEST", "STOPPED", "CurveRun", "FidelityRun", "Manifest", "PipelineRun", "RunFolder",
    "RunKind", "SweepRun", "SweepStore",
    "check_out", "enclosing_run", "example_row", "finished", "folder_name", "get_kind", "git_revision",
    "check_resumable", "identity_differences", "inspect_folder", "interruption", "is_workbench_manifest", "lock_holder", "load_curve", "load_fidelity",
    "load_manifest", "load_pipeline", "load_sweep", "move_aside", "natural_key", "new_manifest", "now", "owned", "package_versions",
    "read_manifest", "resume_manifest", "run_kind", "run_lock", "scan_runs", "subfolders", "upgrade_table",
    "write_diagnosis_run", "write_manifest", "write_run", "writer_state",
]
