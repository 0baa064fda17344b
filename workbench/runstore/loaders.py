"""Reading run folders back, by kind. Folders of the first version (schema 1) load too."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError
from workbench.runstore.kinds import DIAGNOSES, FIDELITY_TABLES
from workbench.runstore.manifest import MANIFEST, Manifest, load_manifest


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise WorkbenchError(f"{path} is unreadable ({type(err).__name__}: {err}); re-run the command "
                             f"that wrote it") from None


def upgrade_table(table: pd.DataFrame) -> pd.DataFrame:
    """A table of the first version under today's column names (`layout` is now `unit`)."""
    return table.rename(columns={"layout": "unit"}) if "layout" in table.columns else table


def natural_key(example_id) -> tuple[list, str]:
    """A sort key that orders example ids as people count them: "2" before "10", "ex#2" before "ex#10";
    a total order (ids that count alike, "ex1" and "ex01", fall back to their text), so a sort by it
    is the same in every process."""
    text = str(example_id)
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)], text


@dataclass(frozen=True)
class SweepRun:
    """A sweep's folder read back: its manifest, examples and outcomes."""

    folder: Path
    manifest: Manifest
    examples: pd.DataFrame  # one row per finished example (column `folder`: its diagnosis folder)
    outcomes: pd.DataFrame  # one row per example x selector x budget

    @property
    def n_failed(self) -> int:
        return len(self.manifest.failures)

    @property
    def failures(self) -> dict[str, dict]:
        return self.manifest.failures_by_id

    @property
    def example_ids(self) -> list[str]:
        return [str(i) for i in self.examples["example_id"]]

    def diagnosis_folder(self, example_id: str) -> Path:
        rows = self.examples[self.examples["example_id"].astype(str) == str(example_id)]
        if rows.empty:
            raise WorkbenchError(f"example {example_id!r} is not in {self.folder}; "
                                 f"examples there: {', '.join(self.example_ids[:5])}"
                                 f"{', ...' if len(self.examples) > 5 else ''} ({len(self.examples)} in all)")
        return self.folder / DIAGNOSES / str(rows.iloc[0]["folder"])

    def diagnosis(self, example_id: str) -> Diagnosis:
        return Diagnosis.load(self.diagnosis_folder(example_id))


def load_sweep(folder: str | Path) -> SweepRun:
    """Read a `kvwb run` folder; a clear error when it is not one or holds no outcomes yet."""
    folder = Path(folder)
    manifest = load_manifest(folder, kind="sweep")
    missing = [name for name in ("examples.parquet", "outcomes.parquet") if not (folder / name).is_file()]
    if missing:
        raise WorkbenchError(f"{folder} has no {' or '.join(missing)} yet: no example has finished "
                             f"(status {manifest.status!r}); run `kvwb run ... --out {folder}` again")
    examples = upgrade_table(_read_parquet(folder / "examples.parquet"))
    if "folder" not in examples.columns:  # the first version named folders by URL-quoting the id
        examples["folder"] = [quote(str(i), safe="") for i in examples["example_id"]]
    outcomes = upgrade_table(_read_parquet(folder / "outcomes.parquet"))
    if "retrieved" not in outcomes.columns or "spliced_ran_on" not in examples.columns:
        examples, outcomes = _retrieval_from_answers(folder, examples, outcomes)
    return SweepRun(folder, manifest, examples, _in_natural_order(outcomes))


def _in_natural_order(outcomes: pd.DataFrame) -> pd.DataFrame:
    """The outcome rows ordered by example id as `natural_key` counts them (stable within an
    example), so that no reading depends on the order the table was written in (a run writes the
    data set's, a restored record its ids'): a bootstrap and a sampled sign-flip test draw examples
    by their place."""
    ids = outcomes["example_id"].astype(str)
    rank = {i: r for r, i in enumerate(sorted(set(ids), key=natural_key))}  # a total order: no tie
    return outcomes.iloc[np.argsort(ids.map(rank).to_numpy(), kind="stable")].reset_index(drop=True)


def _retrieval_from_answers(folder: Path, examples: pd.DataFrame, outcomes: pd.DataFrame):
    """A run made before the retrieval measure was recorded (2026-12-05) gets it on reading: `retrieved`
    of every answer from its stored text and its example's gold and rule (a function of the two alone,
    so exactly what a run today records), and the splice's `ran_on` and both answers' lengths from
    diagnosis.json's token ids. A cell's `ran_on` and `answer_tokens` need its token ids, which such a
    run did not keep: they stay missing."""
    docs = {}
    for example_id, name in zip(examples["example_id"].astype(str), examples["folder"]):
        try:
            docs[example_id] = Diagnosis.from_document(
                json.loads((folder / DIAGNOSES / str(name) / "diagnosis.json").read_text()), {})
        except (OSError, ValueError, KeyError, TypeError, WorkbenchError) as err:
            raise WorkbenchError(f"{folder}: example {example_id!r}'s diagnosis.json is unreadable ({err}); the run "
                                 "predates the retrieval measure, which is read from it") from None
    examples = examples.assign(
        dense_retrieved=[docs[i].answers.dense.retrieved for i in examples["example_id"].astype(str)],
        spliced_retrieved=[docs[i].answers.spliced.retrieved for i in examples["example_id"].astype(str)],
        dense_answer_tokens=[docs[i].answers.dense.n_tokens for i in examples["example_id"].astype(str)],
        spliced_answer_tokens=[docs[i].answers.spliced.n_tokens for i in examples["example_id"].astype(str)],
        spliced_ran_on=[docs[i].answers.splice_ran_on for i in examples["example_id"].astype(str)])
    if "retrieved" not in outcomes.columns:
        outcomes = outcomes.assign(retrieved=[docs[str(i)].example.retrieved(text)
                                              for i, text in zip(outcomes["example_id"], outcomes["answer"])])
    return examples, outcomes


@dataclass(frozen=True)
class CurveRun:
    """A unit-of-choice curve folder read back."""

    folder: Path
    manifest: Manifest
    curve: pd.DataFrame  # one row per prompt x unit x method x seed
    summary: pd.DataFrame  # one row per unit


def load_curve(folder: str | Path) -> CurveRun:
    """Read a `kvwb curve` folder."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file() and (folder / "diagnosis.json").is_file():
        raise WorkbenchError(f"{folder} holds a saved Diagnosis, not a curve run (make one with "
                             f"`kvwb curve --out {folder}`)")
    manifest = load_manifest(folder, kind="curve")
    missing = [n for n in ("curve", "summary") if not (folder / f"{n}.parquet").is_file()]
    if missing:
        raise WorkbenchError(f"{folder} lacks {', '.join(m + '.parquet' for m in missing)}")
    return CurveRun(folder, manifest, _read_parquet(folder / "curve.parquet"), _read_parquet(folder / "summary.parquet"))


@dataclass(frozen=True)
class PipelineRun:
    """A `kvwb pipeline` folder read back: one row per (method, request) and per call."""

    folder: Path
    manifest: Manifest
    requests: pd.DataFrame
    calls: pd.DataFrame
    repair: pd.DataFrame  # the final calls' repair outcomes (empty without --repair-on)


def load_pipeline(folder: str | Path) -> PipelineRun:
    """Read a `kvwb pipeline` folder."""
    folder = Path(folder)
    manifest = load_manifest(folder, kind="pipeline")
    missing = [n for n in ("requests", "calls") if not (folder / f"{n}.parquet").is_file()]
    if missing:
        raise WorkbenchError(f"{folder} lacks {', '.join(m + '.parquet' for m in missing)} (no request finished "
                             f"yet; run `kvwb pipeline --out {folder}` again to go on)")
    repair = folder / "repair.parquet"
    return PipelineRun(folder, manifest, _read_parquet(folder / "requests.parquet"),
                       _read_parquet(folder / "calls.parquet"),
                       _read_parquet(repair) if repair.is_file() else pd.DataFrame())


@dataclass(frozen=True)
class FidelityRun:
    """A fidelity-probe folder read back: conditions, anchors, augmentation and answers tables."""

    folder: Path
    manifest: Manifest
    tables: dict[str, pd.DataFrame]


def load_fidelity(folder: str | Path) -> FidelityRun:
    """Read a `kvwb fidelity` folder."""
    folder = Path(folder)
    manifest = load_manifest(folder, kind="fidelity")
    present = [n for n in FIDELITY_TABLES if (folder / f"{n}.parquet").is_file()]
    missing = [n for n in FIDELITY_TABLES if n not in present and n != "thresholds"]  # first runs had none
    if missing:
        raise WorkbenchError(f"{folder} lacks {', '.join(m + '.parquet' for m in missing)}")
    return FidelityRun(folder, manifest, {n: _read_parquet(folder / f"{n}.parquet") for n in present})
