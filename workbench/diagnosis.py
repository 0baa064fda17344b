"""`Diagnosis`: everything measured on one example, as tidy tables that save without pickle.

Tables (pandas DataFrames, saved as parquet; `info` saved as JSON):

    tokens         position, token, segment, passage, reused
    token_signals  signal, position, value           one score per reused token and signal
    layer_signals  signal, layer, position, value    per-layer signals (gradients, attention)
    deviation      layer, position, segment, token, kind, metric, value   splice vs dense
    selections     selector, layout, budget, n_requested, n_recomputed, n_units, skipped,
                   budget_matched, positions (list of absolute positions)
    outcomes       example_id, selector, layout, budget, n_reused, n_recomputed, answer,
                   dense_answer, flip, flip_strict, em, f1, dense_logprob, seconds
    residual       selector, layout, budget, layer, kind, value   deviation left after repair
    costs          selector, forward_passes, backward_passes, decode_steps, layer_tokens,
                   needs_dense, seconds
    attribution    position, segment, kind, estimate, actual      AtP check sample
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.runstore import write_folder
from workbench.tasks import Example

SCHEMA_VERSION = 1
TABLES = ("tokens", "token_signals", "layer_signals", "deviation", "selections", "outcomes", "residual",
          "costs", "attribution")


@dataclass
class Diagnosis:
    """One example's splice, signals, selections and repair outcomes."""

    example: Example
    info: dict  # model, config, answers, attribution summary, versions
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)

    @property
    def example_id(self) -> str:
        return self.example.id

    def signal(self, name: str) -> pd.Series:
        """One token signal as a Series indexed by position."""
        rows = self.tables["token_signals"]
        rows = rows[rows["signal"] == name]
        if rows.empty:
            raise WorkbenchError(f"no token signal {name!r}; have {sorted(self.token_signals['signal'].unique())}")
        return rows.set_index("position")["value"]

    def picks(self, selector: str, budget: float) -> list[int]:
        """Absolute positions a selector (label as in `outcomes`) recomputes at a budget."""
        sel = self.tables["selections"]
        row = sel[(sel["selector"] == selector) & ((sel["budget"] - budget).abs() < 1e-9)]
        if row.empty:
            raise WorkbenchError(f"no selection for {selector!r} at budget {budget}; have selectors "
                                 f"{sorted(sel['selector'].unique())} and budgets {sorted(sel['budget'].unique())}")
        return list(row.iloc[0]["positions"])

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        """Write JSON + parquet into `folder` atomically (a temporary sibling, then a rename)."""
        folder = Path(folder)
        if folder.exists() and not overwrite:
            raise WorkbenchError(f"{folder} exists; pass overwrite=True (or --force) to replace it")
        doc = {"schema_version": SCHEMA_VERSION, "example": self.example.to_dict(), "info": self.info}
        return write_folder(folder, {"diagnosis.json": doc}, self.tables)

    @classmethod
    def load(cls, folder: str | Path) -> Diagnosis:
        folder = Path(folder)
        meta = folder / "diagnosis.json"
        if not meta.is_file():
            raise WorkbenchError(f"{folder} holds no diagnosis.json: not a saved Diagnosis "
                                 f"(make one with `kvwb diagnose ... --out {folder}`)")
        doc = json.loads(meta.read_text())
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise WorkbenchError(f"{folder}: schema version {doc.get('schema_version')} is not "
                                 f"{SCHEMA_VERSION}; re-run the diagnosis with this version")
        tables = {p.stem: pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))}
        return cls(Example.from_dict(doc["example"]), doc["info"], tables)

    def to_html(self, run_manifest: dict | None = None) -> str:
        """A standalone HTML report (plotly.js embedded, every string escaped)."""
        from workbench.report import diagnosis_to_html

        return diagnosis_to_html(self, run_manifest)

    def to_json(self, run_manifest: dict | None = None) -> dict:
        """The report's data as a JSON-safe dict with a `schema_version` (see workbench.report)."""
        from workbench.report import diagnosis_to_json

        return diagnosis_to_json(self, run_manifest)

    def summary(self) -> pd.DataFrame:
        """Outcomes as a compact table: one row per selector and budget."""
        cols = ["selector", "budget", "n_recomputed", "answer", "flip", "flip_strict", "em", "dense_logprob"]
        return self.tables["outcomes"][cols]
