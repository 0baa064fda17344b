"""BCR as a reuse method (§3, App. B): serve KVComm's prediction, then recompute a budget of its
rows exactly before the call decodes, so the repaired output is what successors read.

Rows are scored by the attention of a rolled-back 2-token draft over the served cache (Algorithm
2, layers ≥ 1) and spent in 64-row chunks over all slot rows with Algorithm 1's skip rule
(M < 2B or ρM < B: served unrepaired), at ρ = 0.2. `bcr-coin` is the matched control: the same
chunks chosen by a seeded coin (the call's own seed), no draft. There is no dense reference at
serve time: the draft reads only the served cache. Where KVComm served the prompt's tail too
(`--kvcomm code`), the draft reads the handed-off span, the repair overwrites slot rows only and
the served tail stays as KVComm predicted it.

The rows are the `bcr` selector's (chunk unit), scored through a `SignalSet` over a Context with
no dense reference and chosen by `selectors.choose`; the coin's are `random:chunk`'s over the
call's own coin scores.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from workbench.context import Context
from workbench.pipeline.anchors import KVCOMM_GAMMA
from workbench.pipeline.methods import CallContext, CallResult, kvcomm_result, kvcomm_state, register_method
from workbench.repair import repair
from workbench.selectors import SelectorSpec, UnitOptions, choose, parse_selectors, random_scores
from workbench.signals import SignalSet

RHO = 0.2  # BCR's recompute ratio in its multi-agent runs
BCR, COIN = parse_selectors("bcr,random:chunk")  # the draft-attention selector and a coin, both in chunks
UNITS = UnitOptions()  # the diagnosis defaults: BCR's B = 64 (the draft's k: SignalOptions().draft_k = 2)


def scored(call: CallContext, served: CallResult, drawn: bool, n: int) -> tuple[SelectorSpec, torch.Tensor]:
    """The selector BCR (or, `drawn`, its coin) chooses with, and its scores over the `n` slot rows [n]."""
    if drawn:
        return COIN, random_scores(n, call.seed)  # the call's own coin
    # no dense reference exists at serve time: the draft prefills the suffix over the handed-off span
    ctx = Context(call.model, call.example, call.layout, spliced=served.span(call.layout))
    return BCR, BCR.info.score(SignalSet(ctx))  # [n_reused]: every slot row


def chosen_positions(call: CallContext, served: CallResult, drawn: bool) -> torch.Tensor:
    """The slot rows BCR (or its coin) repairs in the served cache: [k] absolute positions."""
    pool = call.layout.pool_positions("all")  # [n]: every slot row (all of them are predicted)
    spec, scores = scored(call, served, drawn, len(pool))
    rows, _ = choose(spec, scores, RHO, pool, UNITS)
    return pool[rows]


def _repaired(call: CallContext, served: CallResult, drawn: bool) -> CallResult:
    if not served.reused:
        return served
    positions = chosen_positions(call, served, drawn)  # [k]
    if len(positions) == 0:
        return served
    return replace(served, cache=repair(call.model, served.cache, call.layout.ids, positions),
                   n_repaired=len(positions))


@register_method("bcr", "KVComm γ = 0.3, then BCR's draft-attention repair of ρ = 0.2 of the slot rows in "
                 "64-row chunks on every reused call (Algorithm 1)", kvcomm_state(0.3))
def bcr(call: CallContext) -> CallResult:
    return _repaired(call, kvcomm_result(call), drawn=False)


@register_method("bcr-coin", "the same chunks at the same budget chosen by a seeded coin, no draft (BCR's "
                 "matched control)", kvcomm_state(0.3))
def bcr_coin(call: CallContext) -> CallResult:
    return _repaired(call, kvcomm_result(call), drawn=True)
