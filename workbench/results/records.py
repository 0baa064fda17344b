"""The committed records a table reads: each restored once per invocation, each read once.

A record is a folder of `docs/records/` as its `keep.py` writes it; `Records.run(name)` restores it
(`keep.restore`, the records' own script) into a scratch folder and reads it back as a sweep;
`Records.summary(name, measure)` is `kvwb summary`'s table of it, computed once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError


class Records:
    """The records under `folder`, restored on first use into `runs` (a scratch folder)."""

    def __init__(self, folder, runs) -> None:
        self.folder, self.runs = Path(folder), Path(runs)
        if not self.folder.is_dir():
            raise WorkbenchError(f"{self.folder} is not a folder of records")
        self._runs, self._summaries, self._evidence, self._keep = {}, {}, {}, None

    def _keep_module(self):
        """The records' own `keep.py`, loaded from the folder it keeps."""
        if self._keep is None:
            path = self.folder / "keep.py"
            if not path.is_file():
                raise WorkbenchError(f"{self.folder} has no keep.py: it is not a folder of records")
            spec = importlib.util.spec_from_file_location("_kvwb_records_keep", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self._keep = module
        return self._keep

    def has(self, name: str) -> bool:
        """Whether the records hold a folder `name`."""
        return (self.folder / name).is_dir()

    def path(self, name: str) -> Path:
        path = self.folder / name
        if not path.exists():
            raise WorkbenchError(f"{self.folder} has no record {name!r}")
        return path

    def run(self, name: str):
        """The record `name` restored and read back as a sweep (`runstore.load_sweep`), once."""
        if name not in self._runs:
            from workbench.runstore import load_sweep

            self.path(name)
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    folder = self._keep_module().restore(name, records=self.folder, runs=self.runs)
                except SystemExit as err:
                    raise WorkbenchError(f"record {name!r} could not be restored: {err}") from None
            self._runs[name] = load_sweep(folder)
        return self._runs[name]

    def summary(self, name: str, measure: str = "em") -> pd.DataFrame:
        """`kvwb summary RUN --measure MEASURE`'s table of the record (`summarize`), once."""
        key = (name, measure)
        if key not in self._summaries:
            from workbench.experiments.summary import summarize

            self._summaries[key] = summarize(self.run(name), measure=measure)
        return self._summaries[key]

    def evidence(self, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """`experiments.evidence.evidence_tables` of the record (ranking, attention), once."""
        if name not in self._evidence:
            from workbench.experiments.evidence import evidence_tables

            self._evidence[name] = evidence_tables(self.run(name))
        return self._evidence[name]

    def csvs(self, name: str) -> dict[str, pd.DataFrame]:
        """Each CSV of the record folder `name` (a grid's rows), by file stem, as it is now."""
        return {p.stem: pd.read_csv(p, keep_default_na=False, na_values=[""])
                for p in sorted(self.path(name).glob("*.csv"))}
