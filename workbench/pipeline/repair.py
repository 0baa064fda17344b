"""Repair on top of a predicted cache (BCR §3, App. B): a whole Diagnosis of one agent call whose
"splice" is the cache KVComm assembled and whose dense reference is the call's token-matched
Dense. Every selector of the workbench, each unit (chunk, grow, single), the five-draw coin and
Algorithm 1's skip rule then run there unchanged.

    outcomes = repair_call(model, layout, predicted, call_example, REPAIR)   # the Diagnosis's outcomes

Every slot of a predicted call is approximate (the task too), so the candidate pool is all slot
rows (`pool="all"`); the outcomes' `n_spent_exact` column, which counts rows of the first passage
as exact, does not apply here.
"""

from __future__ import annotations

import pandas as pd

from workbench.context import Context
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.kv import KVCache
from workbench.layout import Layout
from workbench.models import LoadedModel
from workbench.pipeline.calls import dense_call
from workbench.tasks import Example

REPAIR_BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.4)  # BCR's ρ
REPAIR_SELECTORS = ("none", "full", "random", "bcr", "bcr:grow", "bcr:single", "cacheblend", "densedev",
                    "cadence-grad")
REPAIR = DiagnoseConfig(selectors=REPAIR_SELECTORS, budgets=REPAIR_BUDGETS, pool="all", attribution=False)


def repair_call(model: LoadedModel, layout: Layout, predicted: KVCache, call_example: Example,
                config: DiagnoseConfig = REPAIR) -> pd.DataFrame:
    """The outcomes (one row per selector, budget and draw) of repairing `predicted`, the cache of
    the call laid out as `layout` ([0, suffix_start)), against the call's token-matched Dense."""
    ctx = Context(model, call_example, layout, spliced=predicted, dense=dense_call(model, layout))
    return diagnose(model, call_example, config, ctx=ctx, progress=False).outcomes
