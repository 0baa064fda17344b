"""A kept record's example rebuilt on its model, so the explorer can draw what a record lacks (the
token strip, picks, heatmaps, deviation): today's code on the record's own example and config
(`wb.rebuild`), written where the record's regenerate command writes (RUNS/NAME-ID: the button and
`kvwb diagnose` fill the same folder). The views then say how far the rebuild agrees with the
record (`wb.compare_outcomes`): they are drawn from the rebuild, the record's outcomes stay the
evidence."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import state
from compare_panel import same_example
from model_work import gated, model_spec_for
from readable import show_table
from widgets import plain
import workbench.app_api as wb
from workbench.app_api import Diagnosis, RunFolder, WorkbenchError

SHOWN_DIFFERENCES = 20  # differing decisions listed under the warning


def rebuilt_folder(run: RunFolder, d: Diagnosis) -> Path:
    """Where a rebuild of `d` (an example of the kept record `run`) is written and looked for."""
    return state.runs_root() / f"{run.name}-{d.example_id}"


def _config_differences(record: Diagnosis, rebuilt: Diagnosis) -> list[str]:
    a, b = record.config.to_dict(), rebuilt.config.to_dict()
    return [f"{k} {a.get(k)!r} against {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def rebuilt_diagnosis(run: RunFolder, record: Diagnosis) -> Diagnosis | None:
    """The rebuild of `record` kept in `rebuilt_folder`, with one line on how it agrees with the record;
    None (and one line why, when a folder is there) where there is none of this example and config."""
    folder = rebuilt_folder(run, record)
    if not (folder / "diagnosis.json").is_file():
        return None
    try:
        rebuilt = state.read_diagnosis(folder)
    except (WorkbenchError, OSError) as err:
        st.warning(f"{plain(folder)} could not be read ({plain(err)}); move it aside to rebuild this example.")
        return None
    if not same_example(record.example, rebuilt.example):
        st.warning(f"{plain(folder)} holds another example (another question or passages); move it aside to "
                   f"rebuild this one.")
        return None
    differ = _config_differences(record, rebuilt)
    if differ:
        st.warning(f"{plain(folder)} was diagnosed under another config than the record's ({plain('; '.join(differ))}); "
                   f"move it aside to rebuild this example under the record's.")
        return None
    agreement = wb.compare_outcomes(record, rebuilt)
    said = (f"Drawn from a rebuild of this example ({plain(folder)}: today's code on the record's example and "
            f"config); against the record: {plain(agreement)}.")
    if agreement.same:
        st.success(said)
    else:
        st.warning(said + " The record's outcomes are the evidence; the views below are the rebuild's.")
        if not agreement.differing.empty:
            show_table(agreement.differing.head(SHOWN_DIFFERENCES).astype({"record": object, "rebuilt": object}),
                       key="explorer_rebuild_differing")
    return rebuilt


def rebuild_offer(run: RunFolder, record: Diagnosis) -> None:
    """A button that rebuilds `record` here (through the model gate, with a progress bar), writes it to
    `rebuilt_folder` (whole, or nothing) and draws the page again from it."""
    folder = rebuilt_folder(run, record)
    spec = model_spec_for(record, run.manifest)
    n_cells = len(record.outcomes) if "outcomes" in record.tables else 0
    if not st.button(f"Rebuild this example here ({spec}, {record.context.n_tokens} tokens, {n_cells} outcome rows)",
                     key="explorer_rebuild",
                     help=f"Diagnoses the record's example again under its config and writes it to {folder}; "
                          f"on CPU about a minute for a study's sixteen selectors at ~600 tokens."):
        return
    try:
        wb.check_out(folder, kind="diagnosis")
        model = state.load_model(spec)
        bar = st.progress(0.0, text="Rebuilding...")

        def progress(stage: str, done: int, total: int) -> None:
            bar.progress(min(done / total, 1.0) if total else 0.0, text=f"Rebuilding: {stage} ({done} of {total})")

        rebuilt = gated(f"rebuilding example {record.example_id} of {run.name}",
                        lambda: wb.rebuild(model, record, progress=progress))
        wb.check_out(folder, kind="diagnosis")  # it may have appeared while the rebuild ran
        wb.save_diagnosis(folder, rebuilt, model)
    except WorkbenchError as err:
        st.warning(f"Could not rebuild it: {plain(err)}")
        return
    st.rerun()

