"""A kept record's example diagnosed again, so that the views a record cannot draw (the token strip,
picks, heatmaps, deviation) can be: the record keeps only its outcomes (docs/records/keep.py), and
a rebuild is today's code on the record's own example and config, so it says how far it agrees.

    rebuilt = rebuild(model, record)             # diagnose(model, record.example, record.config)
    agreement = compare_outcomes(record, rebuilt)
    agreement.same, str(agreement)               # "answers and flips equal on 80 of 80 outcome rows; ..."
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.diagnosis.record import Diagnosis
from workbench.diagnosis.reopen import reopen_context
from workbench.diagnosis.run import diagnose
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel

KEY = ("selector", "budget", "draw")  # one outcome row: a selector's cell at a budget (and draw)
DECISIONS = ("answer", "flip", "flip_strict", "em", "contains", "n_recomputed")  # equal, or the rebuild differs
SCORES = ("dense_logprob", "first_kl")  # equal within `tolerance`
TOLERANCE = 1e-4  # issue 44's tolerance on recorded log-probabilities


@dataclass(frozen=True)
class Agreement:
    """How a rebuilt example's outcomes compare with the record's, row by row (`KEY`)."""

    rows: int                 # outcome rows both hold
    differing: pd.DataFrame   # selector, budget, draw, column, record, rebuilt: one row per decision that differs
    only_one: int             # rows that only one of the two holds
    score_gap: float          # the largest |record - rebuilt| over `SCORES`
    tolerance: float = TOLERANCE

    @property
    def same(self) -> bool:
        """Every decision equal and no row missing (the scores are `scores_within`)."""
        return self.differing.empty and self.only_one == 0

    @property
    def scores_within(self) -> bool:
        """Every log-probability within the tolerance."""
        return self.score_gap <= self.tolerance

    def __str__(self) -> str:
        rows_differing = len(self.differing.drop_duplicates(list(KEY))) if not self.differing.empty else 0
        text = (f"answers and flips equal on {self.rows - rows_differing} of {self.rows} outcome rows; "
                f"log-probabilities differ by at most {self.score_gap:.1e} nats"
                f"{'' if self.scores_within else f' (above {self.tolerance:.0e})'}")
        if self.only_one:
            text += f"; {self.only_one} rows held by only one of the two"
        return text


def rebuild(model: LoadedModel, record: Diagnosis, *, progress=False) -> Diagnosis:
    """`record`'s example diagnosed again on `model` under `record`'s config: every table the views
    draw from. Refused (one line) for a hooked record (its hook functions are not kept) or one that
    lays out to another length on `model` (another model or tokenizer)."""
    if record.hooked:
        raise WorkbenchError(f"example {record.example_id} was diagnosed with hooks ({', '.join(record.hooks)}); "
                             f"a rebuild cannot run them again: diagnose it with the same hooks in Python")
    ctx = reopen_context(model, record)  # the length check, before the signals run
    return diagnose(model, record.example, record.config, ctx=ctx, progress=progress)


def _keyed(d: Diagnosis) -> pd.DataFrame:
    table = d.outcomes.copy()
    table["draw"] = table["draw"].astype("Int64").fillna(-1).astype(int)
    table["budget"] = table["budget"].round(9)
    return table.set_index(list(KEY))


def _equal(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return bool((pd.isna(a) and pd.isna(b)) or a == b)
    return a == b


def compare_outcomes(record: Diagnosis, rebuilt: Diagnosis, tolerance: float = TOLERANCE) -> Agreement:
    """`rebuilt`'s outcomes against `record`'s on every row both hold: `DECISIONS` must be equal,
    `SCORES` within `tolerance`."""
    a, b = _keyed(record), _keyed(rebuilt)
    both = a.index.intersection(b.index)
    only_one = len(a.index.symmetric_difference(b.index))
    differing = [(*key, column, a.at[key, column], b.at[key, column])
                 for key in both for column in DECISIONS
                 if column in a.columns and column in b.columns and not _equal(a.at[key, column], b.at[key, column])]
    gaps = [np.nanmax(np.abs(a.loc[both, c].to_numpy(float) - b.loc[both, c].to_numpy(float)), initial=0.0)
            for c in SCORES if c in a.columns and c in b.columns and len(both)]
    return Agreement(rows=len(both), differing=pd.DataFrame(differing, columns=[*KEY, "column", "record", "rebuilt"]),
                     only_one=only_one, score_gap=float(max(gaps, default=0.0)), tolerance=tolerance)
