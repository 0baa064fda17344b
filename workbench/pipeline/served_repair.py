"""A selector's repair of the cache a reuse method served (BCR §3, App. B's setting): on a reused
call, score every slot row over the served cache, choose ρ = 0.2 of them in the selector's unit,
recompute them exactly, then decode, so the repaired output is what successors read.

There is no dense reference at serve time: a selector's scores are read through a `SignalSet` over
a Context whose splice is the served span and which has no dense cache, so only selectors that need
no dense reference can repair here (BCR's draft, CADENCE-Grad's gradients). A matched coin scores
the same rows with the call's own seed and spends them in the same unit. Where KVComm served the
prompt's tail too (`--kvcomm code`), the scores read the handed-off span, the repair overwrites
slot rows only and the served tail stays as KVComm predicted it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from workbench.context import Context
from workbench.pipeline.methods import CallContext, CallResult, kvcomm_result, kvcomm_state, register_method
from workbench.repair import repair
from workbench.selectors import SelectorSpec, UnitOptions, choose, random_scores
from workbench.signals import SignalSet

RHO = 0.2  # BCR's recompute ratio in its multi-agent runs
UNITS = UnitOptions()  # the diagnosis defaults: BCR's B = 64 (the draft's k: SignalOptions().draft_k = 2)

# (call, served, n slot rows) -> the selector that spends the scores, and its scores [n]
Scorer = Callable[[CallContext, CallResult, int], tuple[SelectorSpec, torch.Tensor]]


def selector_scorer(spec: SelectorSpec) -> Scorer:
    """`spec`'s own scores over every slot row, read over the served span with no dense reference."""
    def scores(call: CallContext, served: CallResult, n: int) -> tuple[SelectorSpec, torch.Tensor]:
        ctx = Context(call.model, call.example, call.layout, spliced=served.span(call.layout))
        return spec, spec.info.score(SignalSet(ctx))  # [n]
    return scores


def coin_scorer(spec: SelectorSpec) -> Scorer:
    """A seeded coin (the call's own seed) spent as `spec` spends rows: the matched control."""
    return lambda call, served, n: (spec, random_scores(n, call.seed))


def chosen_positions(call: CallContext, served: CallResult, scorer: Scorer) -> torch.Tensor:
    """The slot rows `scorer`'s selector repairs in the served cache: [k] absolute positions."""
    pool = call.layout.pool_positions("all")  # [n]: every slot row (all of them are predicted)
    spec, scores = scorer(call, served, len(pool))
    rows, _ = choose(spec, scores, RHO, pool, UNITS)
    return pool[rows]


def repaired(call: CallContext, served: CallResult, scorer: Scorer) -> CallResult:
    """`served` with the chosen rows recomputed exactly (unchanged where nothing was reused or chosen)."""
    if not served.reused:
        return served
    positions = chosen_positions(call, served, scorer)  # [k]
    if len(positions) == 0:
        return served
    return replace(served, cache=repair(call.model, served.cache, call.layout.ids, positions),
                   n_repaired=len(positions))


def register_repair(name: str, scorer: Scorer, description: str) -> Callable[[CallContext], CallResult]:
    """Register (and return) the method `name`: KVComm γ = 0.3, then `scorer`'s repair of ρ = 0.2 of
    the slot rows on every reused call."""
    def method(call: CallContext) -> CallResult:
        return repaired(call, kvcomm_result(call), scorer)
    return register_method(name, description, kvcomm_state())(method)  # `kvcomm`'s gate, γ = KVCOMM_GAMMA
