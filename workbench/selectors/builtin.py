"""The selectors the source texts describe. Each is one short function of a `SignalSet`.

CADENCE: ../shared/papers/000_*; BCR: ../shared/papers/001_* (§3, App. B).
"""

from __future__ import annotations

import torch

from workbench.selectors.budget import budget_rows
from workbench.selectors.units import random_scores
from workbench.selectors.registry import register_selector
from workbench.signals.deviation import densedev_scores, mean_row_norms
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


@register_selector("relay", uses=("check_layer",), source="RelayCaching's idea; definition in docs/PROTOCOLS.md",
                   description="check-layer value deviation x attention received from later tokens")
def relay(signals: SignalSet) -> torch.Tensor:
    return signals.token("relay")


@register_selector("densedev", uses=("deviation",), needs_dense=True, source=f"{CADENCE}: DenseDev",
                   description="exact squared K+V deviation from dense, summed over layers")
def densedev(signals: SignalSet) -> torch.Tensor:
    """`densedev_norm` "none": the signal as it is; "layer": each layer over its mean dense row norm."""
    norm, ctx = signals.options.densedev_norm, signals.ctx
    if norm == "none":
        return signals.token("densedev")  # [n_reused]
    return densedev_scores(signals["deviation"], norm, mean_row_norms(ctx.dense, ctx.reused_positions))


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


# ----------------------------------------------------------------------------- the field's methods (issue 28)

EPIC = "EPIC (Hu et al., ICML 2025): LegoLink"
PROPHETKV = "ProphetKV (Wang et al., ICML 2026, arXiv 2602.02579)"
RELAXKV = "RelaxKV (Qi et al., 2026)"


def _epic_rows(signals: SignalSet, pool: torch.Tensor, n_rows: int) -> int:
    """The budget's rows, or with a fixed k (`epic_k`) the first k rows of every passage in the pool."""
    k = signals.options.epic_k
    return n_rows if k is None else int((signals.ctx.layout.segment_offsets()[pool] < k).sum())


@register_selector("epic", units=("single",), spend=_epic_rows,
                   source=f"{EPIC}: the first k tokens of every cached chunk (k <= 32; its TTFT figure runs k = 16); "
                          "k here spreads the budget over the pool's passages, or --epic-k fixes it",
                   description="the first rows of every passage in the pool (position only, query-blind)")
def epic(signals: SignalSet) -> torch.Tensor:
    """Earlier in its passage ranks higher, so the budget's top rows are the first k of every
    passage in the pool, k spread evenly (ties: the earlier passage takes the extra row)."""
    return -signals.ctx.layout.segment_offsets()[signals.ctx.reused_positions].float()  # [n_reused]


@register_selector("prophetkv", uses=("relevance",),
                   source=f"{PROPHETKV}: user-query relevance against the crowding-out effect; stage 1 runs the "
                          "query over the reused cache, stage 2 recomputes the fused top rows (only the abstract was "
                          "readable: the softmax over the cached keys and the mean over layers follow a summary of it)",
                   description="the question's attention over the cached rows (softmax over them), mean over layers")
def prophetkv(signals: SignalSet) -> torch.Tensor:
    return signals.token("query_relevance")


def _query_context(signals: SignalSet, positions: torch.Tensor, ranking: torch.Tensor, budget: float) -> torch.Tensor:
    """RelaxKV's recompute context: the prefix, the repaired rows, and the top share of the passage
    rows by `ranking` (`relaxkv_context`, else the budget's share). bool [suffix_start]"""
    ctx, share = signals.ctx, signals.options.relaxkv_context
    keep = torch.zeros(ctx.layout.suffix_start, dtype=torch.bool)
    keep[:ctx.layout.prefix.end] = True  # the receiver's own frame (the attention sink)
    keep[positions] = True
    n_context = budget_rows(budget if share is None else share, ctx.n_reused)
    keep[ctx.reused_positions[torch.sort(ranking.cpu(), descending=True, stable=True).indices[:n_context]]] = True
    return keep


@register_selector("relaxkv", uses=("relevance",), restrict=_query_context,
                   source=f"{RELAXKV}: targets by query relevance, each recomputed over a query-relevant context "
                          "only (only the abstract was found: the context, the prefix, the targets and the budget's "
                          "share of the most relevant passage rows, and one target set for every layer, the paper's "
                          "being per layer, are the workbench's reading)",
                   description="ProphetKV's rows, each recomputed over the query-relevant rows only")
def relaxkv(signals: SignalSet) -> torch.Tensor:
    return signals.token("query_relevance")
