"""Writing run folders: a one-shot folder (curve, fidelity, one diagnosis) and a sweep's store,
which grows one example at a time and can be resumed.

    runs/NAME/                         (a sweep)
      manifest.json                    the run's identity, status, failures and segments (which
                                       environment computed each example: `segments.py`)
      examples.parquet                 one row per finished example
      outcomes.parquet                 one row per example x selector x budget
      diagnoses/FOLDER/                each example's Diagnosis (FOLDER = paths.folder_name(id))

Every file is written atomically; the tables are rewritten from rows held in memory after
each example (no saved diagnosis is read again), so a run of n examples costs O(n) reads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from workbench.atomic import write_folder, write_parquet
from workbench.diagnosis import Diagnosis
from workbench.diagnosis.record import hooks_text
from workbench.errors import WorkbenchError
from workbench.runstore.kinds import DIAGNOSES
from workbench.runstore.manifest import (
    MANIFEST, finished, interruption, new_manifest, resume_manifest, write_manifest,
)
from workbench.runstore.paths import folder_name, move_aside, subfolders
from workbench.runstore.segments import open_segment, record
from workbench.selectors import selector_code, signal_code


def write_run(out: Path, manifest: dict, tables: dict[str, pd.DataFrame], files: dict[str, object] | None = None) -> Path:
    """A whole run folder at once: the manifest, parquet tables and other files (a str is written as
    text, anything else as a JSON document), atomically (the caller checked `out` with `out.check_out`)."""
    return write_folder(out, {**(files or {}), MANIFEST: manifest}, tables)


def write_diagnosis_run(out: Path, diagnosis: Diagnosis, model_identity: dict) -> Path:
    """One Diagnosis as a run folder of kind "diagnosis" (`kvwb diagnose --out`)."""
    args = {"example_id": diagnosis.example_id, "config": diagnosis.config.to_dict(),
            "selector_code": selector_code(diagnosis.config.selectors),
            "signal_code": signal_code(diagnosis.config.selectors),
            **({"hooks": diagnosis.hooks} if diagnosis.hooked else {})}  # a hooked diagnosis says so
    manifest = finished(new_manifest("diagnosis", model_identity, args), seconds=diagnosis.timing.total_s)
    return write_run(out, manifest, diagnosis.tables, {"diagnosis.json": diagnosis.to_document()})


def example_row(diagnosis: Diagnosis, folder: str) -> dict:
    """A sweep's examples.parquet row for one diagnosis."""
    ex, answers = diagnosis.example, diagnosis.answers
    return {"example_id": ex.id, "folder": folder, "question": ex.question, "gold": " | ".join(ex.gold),
            "type": ex.meta.get("type"), "n_tokens": diagnosis.context.n_tokens,
            "n_reused": diagnosis.context.n_reused, "dense_answer": answers.dense.text,
            "spliced_answer": answers.spliced.text, "dense_em": answers.dense.em, "dense_f1": answers.dense.f1,
            "dense_contains": answers.dense.contains, "spliced_em": answers.spliced.em, "spliced_f1": answers.spliced.f1,
            "spliced_contains": answers.spliced.contains,
            "splice_flip": answers.splice_flip, "splice_flip_strict": answers.splice_flip_strict,
            "dense_retrieved": answers.dense.retrieved, "spliced_retrieved": answers.spliced.retrieved,
            "dense_answer_tokens": answers.dense.n_tokens, "spliced_answer_tokens": answers.spliced.n_tokens,
            "spliced_ran_on": answers.splice_ran_on,
            "n_evidence": None if diagnosis.context.evidence is None else len(diagnosis.context.evidence),
            "distractors_short": _distractors_short(ex.meta), "hooks": hooks_text(diagnosis.hooks) or None}


def _distractors_short(meta: dict) -> int | None:
    """How many distractors fewer than `gold+K` asked the example's record held (0: none fewer);
    None where the setting draws none (`tasks.loaders.load_hotpotqa`)."""
    asked, kept = meta.get("distractors_asked"), meta.get("n_distractors")
    return asked - kept if isinstance(asked, int) and isinstance(kept, int) else None


def check_hooks(diagnosis_hooks, run_hooks, where: str) -> None:
    """Refuse a diagnosis whose hooks are not the run's (a hooked one among unhooked ones, or the reverse):
    a run's examples are all computed on one model, unmodified or under the same hooks."""
    if (diagnosis_hooks or None) != (run_hooks or None):
        mine = f"under hooks ({hooks_text(diagnosis_hooks)})" if diagnosis_hooks else "without hooks"
        theirs = f"under hooks ({hooks_text(run_hooks)})" if run_hooks else "without hooks"
        raise WorkbenchError(f"{where} was computed {mine}, but this run's examples are computed {theirs}: a run "
                             f"never mixes the two; use another --out")


class SweepStore:
    """A sweep's run folder, opened new or resumed; one writer holds it (see `lock.run_lock`)."""

    def __init__(self, out: Path, manifest: dict):
        self.out = Path(out)
        self.manifest = manifest
        self.failures: dict[str, dict] = {f["example_id"]: f for f in manifest.get("failures") or []}
        self.corrupt: list[str] = []  # example folders found unreadable on resume (moved aside, recomputed)
        self.hooks = (manifest.get("args") or {}).get("hooks")  # what every example runs under (None: unhooked)
        self._rows: dict[str, dict] = {}
        self._outcomes: dict[str, pd.DataFrame] = {}
        self._started = time.perf_counter()
        for folder in subfolders(self.out / DIAGNOSES):
            self._read_back(folder)
        for example_id in [i for i in self.failures if self.done(i)]:  # saved after its failure was
            self.failures.pop(example_id)  # recorded (a Ray worker killed between saving and returning)

    @classmethod
    def open(cls, out: Path, model_identity: dict, args: dict, environment: dict | None = None) -> SweepStore:
        """A new run in `out`, or the run already there when its identity matches (else a clear
        error listing every difference). `environment`: what computes this session's examples
        (default: this process's); a resume in another one opens a new segment (`segments.py`)."""
        out = Path(out)
        fresh = not (out / MANIFEST).is_file()
        manifest = resume_manifest(out, "sweep", model_identity, args)
        if fresh and environment is not None:
            manifest["environment"] = environment
        store = cls(out, manifest)  # reads the saved examples back: one under other hooks is refused here
        write_manifest(out, manifest)  # then: a folder with a manifest is a run, whatever else it holds yet
        (out / DIAGNOSES).mkdir(parents=True, exist_ok=True)
        store.manifest = open_segment(manifest, store.done_ids, out, environment)
        write_manifest(out, store.manifest)
        return store

    def _read_back(self, folder: Path) -> None:
        """Hold the rows of a finished example; move an unreadable one aside to recompute it."""
        doc_path = folder / "diagnosis.json"
        if not doc_path.is_file():
            return
        try:
            doc = json.loads(doc_path.read_text())
            outcomes = pd.read_parquet(folder / "outcomes.parquet")
            diagnosis = Diagnosis.from_document(doc, {"outcomes": outcomes})
        except Exception as err:  # noqa: BLE001 - any damage: recompute the example
            move_aside(folder)
            self.corrupt.append(f"{folder.name} ({type(err).__name__}: {err})")
            return
        check_hooks(diagnosis.hooks, self.hooks, f"{folder}")
        self._rows[diagnosis.example_id] = example_row(diagnosis, folder.name)
        self._outcomes[diagnosis.example_id] = outcomes

    def done(self, example_id: str) -> bool:
        return example_id in self._rows

    @property
    def n_done(self) -> int:
        return len(self._rows)

    @property
    def done_ids(self) -> tuple[str, ...]:
        """The ids of the finished examples, in the order they were read back or saved."""
        return tuple(self._rows)

    def save(self, diagnosis: Diagnosis, order: list[str]) -> None:
        """Save one example's Diagnosis and rewrite the run's tables (rows in `order` of ids)."""
        name = folder_name(diagnosis.example_id)
        check_hooks(diagnosis.hooks, self.hooks, f"example {diagnosis.example_id!r}")
        diagnosis.save(self.out / DIAGNOSES / name, overwrite=True)
        self._rows[diagnosis.example_id] = example_row(diagnosis, name)
        self._outcomes[diagnosis.example_id] = diagnosis.outcomes
        self.failures.pop(diagnosis.example_id, None)
        self.write_tables(order)
        self._note(diagnosis.example_id)

    def adopt(self, example_id: str, name: str, order: list[str]) -> None:
        """Take in an example another process saved into `diagnoses/name` (a Ray worker), then
        rewrite the run's tables; an unreadable folder is moved aside and recorded as failed."""
        self._read_back(self.out / DIAGNOSES / name)
        if not self.done(example_id):
            self.fail(example_id, f"its saved folder {name!r} could not be read back; run again to recompute it", "")
            return
        self.failures.pop(example_id, None)
        self.write_tables(order)
        self._note(example_id)

    def _note(self, example_id: str, computed: bool = True) -> None:
        """Write the manifest with a saved example listed under this session's segment (a failed
        one taken out of any) and the failures as they stand."""
        record(self.manifest, example_id, computed)
        self.manifest["failures"] = list(self.failures.values())
        write_manifest(self.out, self.manifest)

    def fail(self, example_id: str, error: str, traceback: str) -> None:
        """Record an example that raised (the run goes on)."""
        self.failures[example_id] = {"example_id": example_id, "error": error, "traceback": traceback}
        self._note(example_id, computed=False)

    def write_tables(self, order: list[str]) -> None:
        """examples.parquet and outcomes.parquet from the rows in memory, in the data set's order."""
        ids = [i for i in order if i in self._rows] + [i for i in self._rows if i not in set(order)]
        if not ids:
            return
        write_parquet(self.out / "examples.parquet", pd.DataFrame([self._rows[i] for i in ids]))
        write_parquet(self.out / "outcomes.parquet", pd.concat([self._outcomes[i] for i in ids], ignore_index=True))

    def finish(self, status: str, order: list[str], **details) -> dict:
        """Stamp the end of this session of the run: status, failures, examples done."""
        self.write_tables(order)
        self.manifest = finished({**self.manifest, "failures": list(self.failures.values())}, status,
                                 seconds=time.perf_counter() - self._started,
                                 **{"n_done": self.n_done, **details})
        write_manifest(self.out, self.manifest)
        return self.manifest

    def interrupted(self, order: list[str], cause: BaseException, **details) -> None:
        """Stamp this session `interrupted` as it ends on `cause`: Ctrl-C or SIGTERM as they are, any
        other error written into the manifest's details. If even that cannot be written, the
        manifest stays `running` (`kvwb runs` reads it as stopped) and `cause` is what the caller raises."""
        try:
            self.finish("interrupted", order, **details, **interruption(cause))
        except Exception:  # noqa: BLE001 - the error that ended the session is the one to raise
            pass
