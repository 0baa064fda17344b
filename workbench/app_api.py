"""The one face of the workbench the app (`app/`) talks to: its runs (listed, opened, typed), a
Live diagnosis, the choices its pages offer (models, selectors, data sets, signals), and the
analyses they show. The app imports this module (and figure builders from `workbench.plots`,
already a face of tables in, figures out) and nothing else of the library, so a change inside
the library moves this file, not the pages.

    from workbench import app_api as wb
    runs = wb.list_runs("runs", kinds=("sweep",))        # RunFolder: kind, typed Manifest, problems
    sweep = wb.open_run(runs[0].path, "sweep")           # SweepRun (its .manifest a Manifest)
    d = wb.live_diagnose(model, example, config)         # a Diagnosis, the caches dropped
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Callable

from workbench.context import Context, build_context
from workbench.diagnosis import DiagnoseConfig, Diagnosis, check_budgets, diagnose
from workbench.diagnosis.answer_attention import answer_attention, written_answer_ids
from workbench.diagnosis.heads import HeadPatterns, head_patterns
from workbench.diagnosis.lens import logit_lens
from workbench.diagnosis.rebuild import Agreement, compare_outcomes, rebuild
from workbench.diagnosis.reopen import cell_rows, reopen_context
from workbench.errors import WorkbenchError
from workbench.experiments.answer_lines import first_line_table, whole_answers
from workbench.experiments.answer_sources import (
    CREDIT_WORDS, RECITE_WORDS, answer_sources_table, recited_note, run_has_evidence,
)
from workbench.experiments.behind import behind_sentence, examples_behind
from workbench.experiments.blank_answers import ENDED_AT_ONCE, blank_sentence, blank_table, no_token
from workbench.experiments.contrasts import MEASURES as CONTRAST_MEASURES
from workbench.experiments.evidence import evidence_tables
from workbench.experiments.families import (
    PREREGISTRATION, family_selectors, family_table, read_preregistration, suggested_family,
)
from workbench.experiments.find import FILTERS, find_examples
from workbench.experiments.gap_anatomy import anatomy_sentence, cell_anatomy, splice_anatomy
from workbench.experiments.flips import flip_matrix, flip_rates, graded_rates, rescue_overlap, rescues
from workbench.experiments.pipeline_summary import gate_reasons, repair_summary, summarize_pipeline
from workbench.experiments.summary import resolve_reference, summarize, tokens_to_target
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.layout import PromptFormat, build_layout
from workbench.models import EMBEDDED_MODELS, LoadedModel, load_model, model_identity
from workbench.registry import load_plugins
from workbench.report import render_report
from workbench.runstore import (
    KINDS, MANIFEST, CurveRun, FidelityRun, Manifest, PipelineRun, RunFolder, SweepRun, check_out, folder_name,
    inspect_folder, load_curve, load_fidelity, load_pipeline, load_sweep, natural_key, scan_runs,
    write_diagnosis_run,
)
from workbench.runstore.segments import hardware_sentence
from workbench.selectors import (
    SelectorInfo, get_selector, parse_selector, parse_selectors, reference_selectors, selector_names,
)
from workbench.signals.registry import is_log as signal_is_log, label as signal_label
from workbench.tasks import Example, dataset_kinds, load_example, parse_dataset_spec

__all__ = [
    # records and errors
    "DiagnoseConfig", "Diagnosis", "Example", "LoadedModel", "Manifest", "PromptFormat", "SweepConfig",
    "WorkbenchError",
    # runs
    "CurveRun", "FidelityRun", "MANIFEST", "PipelineRun", "RunFolder", "SweepRun", "check_out", "folder_name",
    "inspect_run", "list_runs", "make_command", "natural_key", "open_run", "run_sweep", "save_diagnosis",
    # choices
    "dataset_choices", "load_plugins", "model_choices", "parse_dataset_spec", "parse_selector", "parse_selectors",
    "reference_selectors", "selector_choices", "selector_info", "signal_is_log", "signal_label",
    # live
    "check_budgets", "context_length", "live_diagnose", "load_example", "load_model",
    # a diagnosed example on the model again: attention by head, the logit lens
    "HeadPatterns", "cell_rows", "head_patterns", "logit_lens", "reopen_context", "answer_attention", "written_answer_ids",
    # a kept record's example diagnosed again (the views a record cannot draw)
    "Agreement", "compare_outcomes", "rebuild",
    # analyses
    "CONTRAST_MEASURES", "PREREGISTRATION", "family_selectors", "family_table", "read_preregistration", "suggested_family",
    "anatomy_sentence", "cell_anatomy", "splice_anatomy", "behind_sentence", "examples_behind",
    "FILTERS", "evidence_tables", "find_examples", "flip_matrix", "flip_rates", "gate_reasons", "graded_rates", "render_report", "repair_summary",
    "rescue_overlap", "rescues", "resolve_reference", "summarize", "summarize_pipeline", "tokens_to_target", "whole_answers",
    "first_line_table", "answer_sources_table", "recited_note", "run_has_evidence", "CREDIT_WORDS", "RECITE_WORDS",
    "ENDED_AT_ONCE", "blank_sentence", "blank_table", "no_token", "hardware_sentence",
]

# ----------------------------------------------------------------------------- runs

_OPENERS = {"sweep": load_sweep, "curve": load_curve, "pipeline": load_pipeline, "fidelity": load_fidelity,
            "diagnosis": Diagnosis.load}


def list_runs(root: str | Path, kinds: tuple[str, ...] | None = None) -> list[RunFolder]:
    """The run folders directly under `root` (of `kinds`, when given), by name, each with its typed
    manifest (None when unreadable: the reason is among its problems)."""
    return scan_runs(Path(root), kinds)


def inspect_run(folder: str | Path) -> RunFolder | None:
    """One folder as the run list shows it, or None when it holds no run."""
    return inspect_folder(Path(folder))


def open_run(folder: str | Path, kind: str) -> SweepRun | CurveRun | PipelineRun | FidelityRun | Diagnosis:
    """A run folder of `kind` read back (a "diagnosis" one as its Diagnosis); a clear error when it
    is not one."""
    if kind not in _OPENERS:
        raise WorkbenchError(f"the app opens runs of kind {', '.join(_OPENERS)}, not {kind!r}")
    return _OPENERS[kind](folder)


def make_command(kind: str, root: str | Path | None = None) -> str:
    """An example command that makes a run of `kind`, its folders under `root` (default: runs/)."""
    if kind not in KINDS:
        return "kvwb ..."
    return KINDS[kind].command() if root is None else KINDS[kind].command(shlex.quote(str(root)))


def save_diagnosis(out: Path, diagnosis: Diagnosis, model: LoadedModel) -> Path:
    """`diagnosis` as a run folder of kind "diagnosis" (the caller checked `out` with `check_out`)."""
    return write_diagnosis_run(out, diagnosis, model_identity(model))


# ----------------------------------------------------------------------------- choices

def model_choices() -> tuple[str, ...]:
    """The embedded models (a local HF folder or hub:ORG/NAME load too)."""
    return tuple(EMBEDDED_MODELS)


def selector_choices() -> list[str]:
    """Every registered selector's name (plugins' included)."""
    return list(selector_names())


def selector_info(name: str) -> SelectorInfo:
    """A registered selector's record: units, default unit, whether drawn, matched or a reference."""
    return get_selector(name)


def dataset_choices() -> list[str]:
    """The registered data set kinds (`kind:ARG#ID` specs)."""
    return list(dataset_kinds())


# ----------------------------------------------------------------------------- live

def context_length(model: LoadedModel, example: Example) -> int:
    """The tokens of `example`'s context laid out for `model` (the prompt format's defaults)."""
    return build_layout(model.tokenizer, example, PromptFormat()).n_tokens


def live_diagnose(model: LoadedModel, example: Example, config: DiagnoseConfig,
                  progress_for: Callable[[Context], Callable[[str, int, int], None]] | None = None) -> Diagnosis:
    """One example diagnosed now, with its layer effects; the caches are dropped (the views read
    the tables). `progress_for(ctx)`, given the built context, returns `diagnose`'s progress
    callback `(stage, done, total)`."""
    ctx = build_context(model, example, rerotation=config.rerotation)
    progress = progress_for(ctx) if progress_for is not None else False
    return replace(diagnose(model, example, config, ctx=ctx, progress=progress, layer_effects=True), ctx=None)
