"""A Diagnosis as the report's JSON document (schema version 2; fields in docs/REPORT_SCHEMA.md).

Every value is JSON-safe: numpy and pandas scalars become Python numbers, NaN, infinities
and missing values become null, tuples become lists.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd

from workbench.atomic import json_safe
from workbench.diagnosis import Diagnosis
from workbench.runstore import Manifest
from workbench.signals.registry import is_log, label

SCHEMA_VERSION = 2
KIND = "kvwb.diagnosis_report"
REPAIR_COLUMNS = ("selector", "unit", "budget", "draw", "n_reused", "n_recomputed", "answer", "flip", "flip_strict",
                  "em", "f1", "contains", "retrieved", "ran_on", "answer_tokens", "evidence_recall",
                  "evidence_precision", "dense_logprob", "dense_logprob_mean", "first_token_agree", "first_kl",
                  "agree_prefix", "f1_to_dense", "seconds")
TOKEN_COLUMNS = ("position", "token", "segment", "passage", "reused", "evidence")


def dumps(doc: dict) -> str:
    """The document as the report's .json text (strict JSON: no NaN)."""
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def table(diagnosis: Diagnosis, name: str) -> pd.DataFrame:
    """A table of the diagnosis, empty when it has none."""
    found = diagnosis.tables.get(name)
    return found if found is not None else pd.DataFrame()


def records(frame: pd.DataFrame, columns=None) -> list[dict]:
    """Rows as JSON-safe dicts (only `columns`, in that order, when given)."""
    if frame.empty:
        return []
    if columns is not None:
        frame = frame[[c for c in columns if c in frame.columns]]
    return [json_safe(row) for row in frame.to_dict(orient="records")]


def matrix(rows: pd.DataFrame) -> dict:
    """layer, position, value rows -> {layers, positions, values[layer][position]}."""
    wide = rows.pivot_table(index="layer", columns="position", values="value", aggfunc="mean")
    return {"layers": json_safe(list(wide.index)), "positions": json_safe(list(wide.columns)),
            "values": json_safe(wide.to_numpy().tolist())}


def _answers(diagnosis: Diagnosis) -> dict:
    dense, spliced = diagnosis.answers.dense, diagnosis.answers.spliced
    flip, flip_strict = spliced.flips(dense)
    return {"dense": json_safe(asdict(dense)), "spliced": json_safe({**asdict(spliced), "flip": flip, "flip_strict": flip_strict}),
            "repairs": records(table(diagnosis, "outcomes"), REPAIR_COLUMNS)}


def _flips(answers: dict) -> dict:
    repairs = answers["repairs"]
    return {"spliced": answers["spliced"]["flip"], "spliced_strict": answers["spliced"]["flip_strict"],
            "n_repairs": len(repairs), "n_flipped": sum(bool(r.get("flip")) for r in repairs),
            "n_flipped_strict": sum(bool(r.get("flip_strict")) for r in repairs),
            "flipped": [{"selector": r["selector"], "budget": r["budget"]} for r in repairs if r.get("flip")]}


def _run(diagnosis: Diagnosis, manifest: Manifest | None) -> dict:
    """Where the diagnosis comes from: model, versions, config, and the run that holds it."""
    model = dict(diagnosis.model)
    fingerprint = manifest.fingerprint if manifest is not None else None
    if fingerprint is not None:
        model["fingerprint"] = fingerprint
    versions = manifest.versions if manifest is not None else None
    run = None
    if manifest is not None:
        run = {"kind": manifest.kind, "dataset": manifest.dataset, "n": manifest.n, "status": manifest.status,
               "start": manifest.start, "end": manifest.end}
    return json_safe({
        "model": model, "workbench_version": diagnosis.workbench_version,
        "versions": versions or {"kv-repair-workbench": diagnosis.workbench_version},
        "versions_source": "run manifest" if versions else "diagnosis",
        "seed": diagnosis.config.signal_options.seed, "config": diagnosis.config.to_dict(),
        "git_revision": manifest.git_revision if manifest is not None else None, "run": run,
        "timing": asdict(diagnosis.timing),
    })


def _token_signals(diagnosis: Diagnosis) -> dict:
    signals = table(diagnosis, "token_signals")
    out = {}
    for name, rows in (signals.groupby("signal", sort=False) if not signals.empty else ()):
        rows = rows.sort_values("position")
        out[str(name)] = {"label": label(str(name), "token"), "log": is_log(str(name), "token"),
                          "positions": json_safe(rows["position"].tolist()), "values": json_safe(rows["value"].tolist())}
    return out


def _layer_signals(diagnosis: Diagnosis) -> dict:
    layer = table(diagnosis, "layer_signals")
    return {str(name): {"label": label(str(name), "layer"), "log": is_log(str(name), "layer"), **matrix(rows)}
            for name, rows in (layer.groupby("signal", sort=False) if not layer.empty else ())}


def _residual(diagnosis: Diagnosis) -> list[dict]:
    res = table(diagnosis, "residual")
    out = []
    if res.empty:
        return out
    if "draw" not in res:  # a diagnosis recorded before draws were kept per residual row
        res = res.assign(draw=pd.NA)
    # one entry per cell: a drawn control's draws apart (draw null for a deterministic selector)
    for (selector, unit, budget, draw, kind), rows in res.groupby(["selector", "unit", "budget", "draw", "kind"],
                                                                  sort=False, dropna=False):
        rows = rows.sort_values("layer")
        out.append(json_safe({"selector": selector, "unit": unit, "budget": budget, "draw": draw, "kind": kind,
                              "layers": rows["layer"].tolist(), "values": rows["value"].tolist()}))
    return out


def diagnosis_to_json(diagnosis: Diagnosis, run_manifest: Manifest | None = None) -> dict:
    """The report's data as a JSON-safe dict (schema: docs/REPORT_SCHEMA.md); `run_manifest` is
    the manifest of the run that holds the diagnosis, when there is one."""
    answers = _answers(diagnosis)
    dev = table(diagnosis, "deviation")
    context = diagnosis.context
    attribution = diagnosis.attribution
    return json_safe({
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "example": diagnosis.example.to_dict(),
        "run": _run(diagnosis, run_manifest),
        "answers": answers,
        "flips": _flips(answers),
        "context": {"n_tokens": context.n_tokens, "n_reused": context.n_reused, "layer0_error": context.layer0_error,
                    "rerotation": context.rerotation, "rope_floor": list(context.rope_floor),
                    "segments": list(context.segments), "draft_ids": list(diagnosis.draft_ids),
                    "tokens": records(table(diagnosis, "tokens"), TOKEN_COLUMNS)},
        "token_signals": _token_signals(diagnosis),
        "picks": records(table(diagnosis, "selections")),
        "layer_signals": _layer_signals(diagnosis),
        "deviation": {f"{kind}/{metric}": matrix(rows) for (kind, metric), rows in
                      (dev.groupby(["kind", "metric"], sort=True) if not dev.empty else ())},
        "residual": _residual(diagnosis),
        "answer_tokens": records(table(diagnosis, "answer_tokens")),
        "costs": records(table(diagnosis, "costs")),
        "attribution": {"summary": diagnosis.attribution_text,
                        "correlations": attribution.correlations if attribution else {},
                        "sample": records(table(diagnosis, "attribution"))},
        "evidence": {"rows": None if context.evidence is None else list(context.evidence),
                     "ranking": records(table(diagnosis, "evidence_ranking")),
                     "attention": records(table(diagnosis, "evidence_attention"))},
    })
