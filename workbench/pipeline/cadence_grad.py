"""CADENCE-Grad as a reuse method: serve KVComm's prediction, then recompute exactly the ρ = 0.2 of
the slot rows whose cache gradient ‖∂L/∂KV‖² of the call's own greedy answer over the served cache
is largest (CADENCE's serve-time score: it reads no dense reference), single rows, before the call
decodes (`served_repair`). `cadence-grad-coin` is its matched control: as many single rows chosen
by a seeded coin (the call's own seed).
"""

from __future__ import annotations

from workbench.pipeline.anchors import KVCOMM_GAMMA
from workbench.pipeline.served_repair import RHO, coin_scorer, register_repair, selector_scorer
from workbench.selectors import parse_selectors

CADENCE_GRAD, COIN = parse_selectors("cadence-grad,random:single")  # the same unit, single rows

cadence_grad = register_repair(
    "cadence-grad", selector_scorer(CADENCE_GRAD),
    f"KVComm γ = {KVCOMM_GAMMA:g}, then CADENCE-Grad's repair of ρ = {RHO:g} of the slot rows (the largest ‖∂L/∂KV‖² of the "
    "call's own greedy answer over the served cache) on every reused call")
cadence_grad_coin = register_repair(
    "cadence-grad-coin", coin_scorer(COIN),
    "the same number of single rows chosen by a seeded coin (CADENCE-Grad's matched control)")
