"""BCR as a reuse method (§3, App. B): serve KVComm's prediction, then recompute a budget of its
rows exactly before the call decodes, so the repaired output is what successors read.

Rows are scored by the attention of a rolled-back 2-token draft over the served cache (Algorithm
2, layers ≥ 1) and spent in 64-row chunks over all slot rows with Algorithm 1's skip rule
(M < 2B or ρM < B: served unrepaired), at ρ = 0.2. `bcr-coin` is the matched control: the same
chunks chosen by a seeded coin (the call's own seed), no draft. There is no dense reference at
serve time: the draft reads only the served cache. Where KVComm served the prompt's tail too
(`--kvcomm code`), the draft reads the handed-off span, the repair overwrites slot rows only and
the served tail stays as KVComm predicted it.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.context import Context
from workbench.pipeline.anchors import KVCOMM_GAMMA
from workbench.pipeline.methods import CallContext, CallResult, kvcomm_result, kvcomm_state, register_method
from workbench.repair import budget_rows, repair
from workbench.selectors.units import UnitOptions, random_scores, select_rows
from workbench.signals.attention import draft_attention
from workbench.signals.signal_set import SignalOptions

RHO = 0.2  # BCR's recompute ratio in its multi-agent runs
CHUNK, DRAFT_K = UnitOptions.chunk_size, SignalOptions.draft_k  # the diagnosis defaults (BCR's B and k)


def _repaired(call: CallContext, served: CallResult, drawn: bool) -> CallResult:
    if not served.reused:
        return served
    layout = call.layout
    pool = layout.reused_positions  # [n]: every slot row (all of them are predicted)
    if drawn:
        scores = random_scores(len(pool), call.seed)
    else:  # no dense reference exists at serve time; the draft reads only the served cache
        span = served.span(layout)  # the draft prefills the suffix over the handed-off span
        ctx = Context(call.model, call.example, layout, spliced=span, dense=span)
        scores = draft_attention(ctx, k=DRAFT_K).scores(pool)
    chosen = select_rows(scores, budget_rows(RHO, len(pool)), "chunk", chunk_size=CHUNK)
    positions = pool[chosen.rows]  # [k] absolute positions
    if len(positions) == 0:
        return served
    return replace(served, cache=repair(call.model, served.cache, layout.ids, positions), n_repaired=len(positions))


@register_method("bcr", "KVComm γ = 0.3, then BCR's draft-attention repair of ρ = 0.2 of the slot rows in "
                 "64-row chunks on every reused call (Algorithm 1)", kvcomm_state(0.3))
def bcr(call: CallContext) -> CallResult:
    return _repaired(call, kvcomm_result(call), drawn=False)


@register_method("bcr-coin", "the same chunks at the same budget chosen by a seeded coin, no draft (BCR's "
                 "matched control)", kvcomm_state(0.3))
def bcr_coin(call: CallContext) -> CallResult:
    return _repaired(call, kvcomm_result(call), drawn=True)
