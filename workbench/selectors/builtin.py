"""The selectors the source texts describe. Each is one short function of a `SignalSet`.

CADENCE: ../shared/papers/000_*; BCR: ../shared/papers/001_* (§3, App. B).
"""

from __future__ import annotations

import torch

from workbench.selectors.units import random_scores
from workbench.selectors.registry import register_selector
from workbench.signals.signal_set import SignalSet

CADENCE = "CADENCE (papers/000)"
BCR = "BCR, Budgeted Cache Repair (papers/001)"


@register_selector("none", fixed="none", units=("single",), source="both papers: reuse-all baseline",
                   description="reuse every spliced row (b = 0)")
def none(signals: SignalSet) -> torch.Tensor:
    return torch.zeros(signals.ctx.n_reused)


@register_selector("full", fixed="all", units=("single",), source="both papers: full re-prefill (b = 1)",
                   description="recompute every reused row: reproduces dense")
def full(signals: SignalSet) -> torch.Tensor:
    return torch.zeros(signals.ctx.n_reused)


@register_selector("random", drawn=True, source=f"{BCR}: the coin control (five draws, as BCR's coin mean)",
                   description="a seeded coin, drawn afresh per example and draw, any unit")
def coin(signals: SignalSet, draw: int) -> torch.Tensor:
    return random_scores(signals.ctx.n_reused, signals.coin_seed(draw))


@register_selector("coin", drawn=True, matched=True,
                   source=f"{BCR}: the matched coin (§4.3: the same chunks, picked by coin, at an identical budget)",
                   description="coin:A recomputes as many rows as A, in A's unit and A's units' sizes, placed by a "
                               "seeded coin")
def matched_coin(signals: SignalSet, draw: int) -> torch.Tensor:
    """Scores are not read: `diagnose` places A's units by `units.matched_coin`."""
    return random_scores(signals.ctx.n_reused, signals.coin_seed(draw))


@register_selector("cacheblend", uses=("check_layer",), source="CacheBlend as shipped (check layer 1, values)",
                   description="||dV||^2 at the check layer after a partial recompute of layers 0..check")
def cacheblend(signals: SignalSet) -> torch.Tensor:
    return signals.token("cacheblend")


@register_selector("relay", uses=("check_layer",), source="RelayCaching's idea; definition in docs/ARCHITECTURE.md",
                   description="check-layer value deviation x attention received from later tokens")
def relay(signals: SignalSet) -> torch.Tensor:
    return signals.token("relay")


@register_selector("densedev", uses=("deviation",), needs_dense=True, source=f"{CADENCE}: DenseDev",
                   description="exact squared K+V deviation from dense, summed over layers")
def densedev(signals: SignalSet) -> torch.Tensor:
    return signals.token("densedev")


@register_selector("cadence", uses=("saliency",), needs_dense=True, source=f"{CADENCE}: gated CADENCE",
                   description="|sum over layers of <dL/dKV, dense - splice>|")
def cadence(signals: SignalSet) -> torch.Tensor:
    return signals.token("cadence")


@register_selector("cadence-grad", uses=("saliency",), source=f"{CADENCE}: CADENCE-Grad",
                   description="sum over layers of ||dL/dK||^2 + ||dL/dV||^2 (no dense reference)")
def cadence_grad(signals: SignalSet) -> torch.Tensor:
    return signals.token("cadence_grad")


@register_selector("bcr", uses=("draft",), default_unit="chunk", default_units=("chunk", "grow", "single"),
                   source=f"{BCR}: draft attention, k = 2",
                   description="attention of a rolled-back 2-token draft, layers >= 1")
def bcr(signals: SignalSet) -> torch.Tensor:
    return signals.token("draft_attention")


@register_selector("qattn", uses=("question",), source="question-suffix attention (a separate signal)",
                   description="attention of the question-suffix queries, layers >= 1")
def qattn(signals: SignalSet) -> torch.Tensor:
    return signals.token("question_attention")


@register_selector("oracle-patch", uses=("saliency", "patch"), needs_dense=True, expensive=True,
                   source="actual single-token patching (upper-bound reference, expensive)",
                   description="|change in decision loss| when a token's dense K/V rows are patched in")
def oracle_patch(signals: SignalSet) -> torch.Tensor:
    return signals.token("patch_effect").float().abs()  # [n] in reused order
