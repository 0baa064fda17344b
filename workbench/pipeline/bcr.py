"""BCR as a reuse method (§3, App. B): serve KVComm's prediction, then recompute a budget of its
rows exactly before the call decodes (`served_repair`).

Rows are scored by the attention of a rolled-back 2-token draft over the served cache (Algorithm
2, layers ≥ 1) and spent in 64-row chunks over all slot rows with Algorithm 1's skip rule
(M < 2B or ρM < B: served unrepaired), at ρ = 0.2: the `bcr` selector's rows (chunk unit).
`bcr-coin` is the matched control: the same chunks chosen by a seeded coin (the call's own
seed), no draft (`random:chunk`).
"""

from __future__ import annotations

from workbench.pipeline.anchors import KVCOMM_GAMMA
from workbench.pipeline.served_repair import RHO, UNITS, coin_scorer, register_repair, selector_scorer
from workbench.selectors import parse_selectors

BCR, COIN = parse_selectors("bcr,random:chunk")  # the draft-attention selector and a coin, both in chunks
DRAFT, DRAWN = selector_scorer(BCR), coin_scorer(COIN)

bcr = register_repair("bcr", DRAFT, f"KVComm γ = {KVCOMM_GAMMA:g}, then BCR's draft-attention repair of ρ = {RHO:g} of "
                      f"the slot rows in {UNITS.chunk_size}-row chunks on every reused call (Algorithm 1)")
bcr_coin = register_repair("bcr-coin", DRAWN, "the same chunks at the same budget chosen by a seeded coin, no "
                           "draft (BCR's matched control)")
