"""`kvwb run`: diagnose every example of a data set into a run folder.

    runs/NAME/
      manifest.json          kind "sweep", model, dataset, selectors, budgets, seed, versions,
                             git revision, start/end, status, failures
      examples.parquet       one row per example: question, gold, lengths, dense/spliced answers, EM/F1
      outcomes.parquet       one row per example x selector x budget (see workbench.diagnosis)
      diagnoses/ID/          each example's full Diagnosis (signals for the app)

The per-example step is a plain function of (model, example, config) whose result is saved
atomically before the next begins: killing a run and starting the same command again goes
on where it stopped; on a finished run it recomputes nothing. An example that raises is
recorded in the manifest and skipped.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from tqdm.auto import tqdm

from workbench.diagnose import DEFAULT_BUDGETS, check_budgets, diagnose
from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError
from workbench.experiments.runstore import (
    git_revision, now, package_versions, read_manifest, write_json, write_parquet,
)
from workbench.models import LoadedModel, model_fingerprint
from workbench.selectors import parse_selectors
from workbench.tasks import load_dataset, normalize_answer

SWEEP_SELECTORS = ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad",
                   "bcr", "bcr:grow", "bcr:single", "qattn")


@dataclass(frozen=True)
class SweepConfig:
    """What a sweep computes: the arguments that must match for a run to be resumed."""

    dataset: str = "synthetic"
    n: int = 40
    selectors: tuple[str, ...] = SWEEP_SELECTORS
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    seed: int = 0
    target_words: int | None = None  # synthetic only: pad passages to about this many words
    attribution: bool = False  # the AtP check (192 patched forwards per example)
    options: dict = field(default_factory=dict)  # further diagnose() keywords

    def checked(self) -> SweepConfig:
        specs = parse_selectors(list(self.selectors))
        return SweepConfig(self.dataset, self.n, tuple(str(s) for s in specs), tuple(check_budgets(self.budgets)),
                           self.seed, self.target_words, self.attribution, dict(self.options))


def example_folder(out: Path, example_id: str) -> Path:
    return out / "diagnoses" / quote(example_id, safe="")


def run_sweep(model: LoadedModel, config: SweepConfig, out: str | Path, progress: bool = True) -> Path:
    """Diagnose every example of `config.dataset` into `out`, resuming a compatible run there."""
    config = config.checked()
    out = Path(out)
    kwargs = {"target_words": config.target_words} if config.target_words else {}
    examples = load_dataset(config.dataset, n=config.n, **kwargs)  # raises if n exceeds a file
    manifest = _open_run(out, model, config)
    manifest.update(status="running", resumed_at=now() if manifest.get("end") else None)
    failures = {f["example_id"]: f for f in manifest.get("failures", [])}
    write_json(out / "manifest.json", manifest)

    bar = tqdm(examples, desc="examples", unit="example", disable=not progress)
    try:
        for example in bar:
            folder = example_folder(out, example.id)
            if (folder / "diagnosis.json").is_file():
                continue
            bar.set_postfix_str(f"example {example.id}")
            try:
                diagnosis = diagnose(model, example, config.selectors, config.budgets, seed=config.seed,
                                     attribution=config.attribution, progress=False, **config.options)
            except Exception as err:  # noqa: BLE001 - one bad example must not end the run
                failures[example.id] = {"example_id": example.id, "error": f"{type(err).__name__}: {err}",
                                        "traceback": traceback.format_exc(limit=3)}
                manifest["failures"] = list(failures.values())
                write_json(out / "manifest.json", manifest)
                continue
            diagnosis.save(folder, overwrite=True)
            failures.pop(example.id, None)
            write_tables(out, examples)
    except KeyboardInterrupt:
        manifest.update(status="interrupted", end=now(), failures=list(failures.values()))
        write_json(out / "manifest.json", manifest)
        raise
    write_tables(out, examples)
    manifest.update(status="complete", end=now(), failures=list(failures.values()),
                    n_done=sum(example_folder(out, e.id).is_dir() for e in examples))
    write_json(out / "manifest.json", manifest)
    return out


def _open_run(out: Path, model: LoadedModel, config: SweepConfig) -> dict:
    """A new manifest, or the existing one if its arguments match (else say which differ)."""
    args = asdict(config)
    identity = {"model": model_fingerprint(model), "args": args}
    if out.exists() and any(out.iterdir()):
        manifest = read_manifest(out, kind="sweep")
        old = {"model": manifest.get("model", {}).get("fingerprint"), "args": manifest.get("args")}
        old_args, diffs = old["args"] or {}, []
        for key, value in args.items():
            if _jsonish(old_args.get(key)) != _jsonish(value):
                diffs.append(f"{key}: {old_args.get(key)!r} in the run vs {value!r} now")
        if old["model"] != _jsonish(identity["model"]):
            diffs.append(f"model: {old['model']} in the run vs {identity['model']} now")
        if diffs:
            raise WorkbenchError(f"{out} holds a run made with other arguments; use a new --out or the "
                                 f"same arguments. Differences: " + "; ".join(diffs))
        return manifest
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnoses").mkdir(exist_ok=True)
    return {"kind": "sweep", "model": {**model.describe(), "fingerprint": identity["model"]}, "args": args,
            "versions": package_versions(), "git_revision": git_revision(), "start": now(), "end": None,
            "status": "running", "failures": []}


def _jsonish(value):
    """The value as it reads back from JSON (tuples become lists), for comparing arguments."""
    return json.loads(json.dumps(value, default=str))


def write_tables(out: Path, examples) -> None:
    """Rebuild examples.parquet and outcomes.parquet from the saved diagnoses (atomically)."""
    rows, outcomes = [], []
    for example in examples:
        folder = example_folder(out, example.id)
        if not (folder / "diagnosis.json").is_file():
            continue
        diagnosis = Diagnosis.load(folder)
        dense, spliced = diagnosis.info["answers"]["dense"], diagnosis.info["answers"]["spliced"]
        rows.append({"example_id": example.id, "question": example.question, "gold": " | ".join(example.gold),
                     "type": example.meta.get("type"), "n_tokens": diagnosis.info["n_tokens"],
                     "n_reused": diagnosis.info["n_reused"], "dense_answer": dense["text"],
                     "spliced_answer": spliced["text"], "dense_em": dense["em"], "dense_f1": dense["f1"],
                     "spliced_em": spliced["em"], "spliced_f1": spliced["f1"],
                     "splice_flip": normalize_answer(spliced["text"]) != normalize_answer(dense["text"])})
        outcomes.append(diagnosis.outcomes)
    write_parquet(out / "examples.parquet", pd.DataFrame(rows))
    if outcomes:
        write_parquet(out / "outcomes.parquet", pd.concat(outcomes, ignore_index=True))
