"""The built-in signals: the records the source texts' selectors read, and the token and layer
signals a Diagnosis tabulates from them. Each computation lives in its own module; this file
only registers them (see `workbench.signals.registry`)."""

from __future__ import annotations

import torch

from workbench.signals.attention import suffix_pass
from workbench.signals.check_layer import check_layer_signals
from workbench.signals.deviation import densedev_scores, kv_deviation
from workbench.signals.patching import attribution_check, patch_effects
from workbench.signals.registry import Cost, register_signal
from workbench.signals.saliency import decision_saliency

# ----------------------------------------------------------------------------- records


@register_signal("deviation", per="record", needs_dense=True, label="KV deviation, splice vs dense",
                 cost=lambda s, dev: Cost(forward_passes=1, layer_tokens=s.ctx.layout.suffix_start * s.n_layers))
def deviation(signals):
    """{(kind, metric): [layer, n_reused]}: splice vs dense at every reused token."""
    return kv_deviation(signals.ctx.spliced, signals.ctx.dense, signals.ctx.reused_positions)


def _suffix_cost(signals, sp) -> Cost:
    fed = len(sp.draft.query_positions) - 1  # drafted tokens fed back (fewer when the draft stops early)
    rows = len(signals.ctx.suffix_ids) + fed
    return Cost(forward_passes=1, decode_steps=len(sp.draft.draft_ids), layer_tokens=rows * signals.n_layers)


@register_signal("suffix", per="record", cost=_suffix_cost,
                 label="the question suffix over the splice, once (draft, question attention, greedy answer)")
def suffix(signals):
    """One prefill of the question suffix over the splice with a k-token draft: the draft and
    question attention read its query rows, and the saliency's greedy answer decodes on from it."""
    return suffix_pass(signals.ctx, k=signals.options.draft_k, hooks=signals.hooks)


def _saliency_cost(signals, sal) -> Cost:
    rows = len(signals.ctx.suffix_ids) + len(sal.answer_ids)  # the teacher-forced pass with grad
    return Cost(forward_passes=1, backward_passes=1, decode_steps=len(sal.answer_ids),
                layer_tokens=rows * signals.n_layers, needs_dense=sal.gated_k is not None)


@register_signal("saliency", per="record", cost=_saliency_cost, label="CADENCE decision saliency (one backward)")
def saliency(signals):
    """CADENCE gradients of the splice's own greedy answer (one backward), decoded on from the
    shared suffix pass; gated by the deviation from dense where the context has a dense reference
    (its cost then says it read dense), the gradients alone (CADENCE-Grad's) where it has none."""
    return decision_saliency(signals.ctx, greedy=signals["suffix"].answer(signals.ctx.model), hooks=signals.hooks)


@register_signal("draft", per="record", label="BCR draft attention (k query rows)")
def draft(signals):
    """BCR draft attention (k query rows), draft rolled back; read from the shared suffix pass."""
    return signals["suffix"].draft


@register_signal("question", per="record", label="question-suffix attention")
def question(signals):
    """Attention of the question-suffix queries; read from the shared suffix pass."""
    return signals["suffix"].question


@register_signal("relevance", per="record", label="ProphetKV query relevance (question attention over the cached rows)")
def relevance(signals):
    """Question-suffix attention renormalized over the handed-off rows, every layer; read from the
    shared suffix pass."""
    return signals["suffix"].relevance


@register_signal("check_layer", per="record", label="CacheBlend partial recompute through the check layer",
                 cost=lambda s, sig: Cost(forward_passes=1,
                                          layer_tokens=s.ctx.layout.suffix_start * (s.options.check_layer + 1)))
def check_layer(signals):
    """CacheBlend's partial recompute through the check layer (no dense reference)."""
    return check_layer_signals(signals.ctx, signals.options.check_layer, signals.hooks)


def _patch_cost(signals, frame) -> Cost:
    rows = (len(signals.ctx.suffix_ids) + len(signals["saliency"].answer_ids)) * len(frame)
    return Cost(forward_passes=len(frame), layer_tokens=rows * signals.n_layers)


@register_signal("patch", per="record", needs_dense=True, cost=_patch_cost,
                 label="actual single-token patch effects (every reused token)")
def patch(signals):
    """Actual single-token patch effects (dense K+V rows) on the decision loss, every reused token."""
    return patch_effects(signals.ctx, signals.ctx.reused_positions, signals["saliency"].answer_ids, kinds=("kv",),
                         hooks=signals.hooks)


@register_signal("attribution", per="record", needs_dense=True,
                 cost=lambda s, check: Cost(forward_passes=len(check.frame)),
                 label="attribution check: first-order estimates vs actual patching")
def attribution(signals):
    """First-order estimates against actual patching (K+V, K only, V only) on a stratified sample."""
    opts = signals.options
    return attribution_check(signals.ctx, signals["saliency"], opts.patch_max_tokens, opts.seed, hooks=signals.hooks)


# ----------------------------------------------------------------------------- per token [n_reused]


@register_signal("densedev", per="token", reads=("deviation",), log=True,
                 label="exact deviation score (densedev)")
def densedev(signals) -> torch.Tensor:
    """Squared K+V deviation from dense, summed over layers (`deviation.densedev_scores`, raw)."""
    return densedev_scores(signals["deviation"])


@register_signal("cadence_grad", per="token", reads=("saliency",), log=True,
                 label="CADENCE-Grad (decision saliency)")
def cadence_grad(signals) -> torch.Tensor:
    return signals["saliency"].cadence_grad


@register_signal("cadence", per="token", reads=("saliency",), needs_dense=True, log=True, label="gated CADENCE")
def cadence(signals) -> torch.Tensor:
    return signals["saliency"].cadence


@register_signal("first_order", per="token", reads=("saliency",), needs_dense=True,
                 label="first-order effect estimate (AtP)")
def first_order(signals) -> torch.Tensor:
    return signals["saliency"].first_order


@register_signal("draft_attention", per="token", reads=("draft",), label="draft attention (BCR)")
def draft_attention_scores(signals) -> torch.Tensor:
    return signals["draft"].scores(signals.ctx.reused_positions)


@register_signal("question_attention", per="token", reads=("question",), label="question attention")
def question_attention_scores(signals) -> torch.Tensor:
    return signals["question"].scores(signals.ctx.reused_positions)


@register_signal("query_relevance", per="token", reads=("relevance",), label="query relevance (ProphetKV)")
def query_relevance_scores(signals) -> torch.Tensor:
    """ProphetKV's layer fusion: the mean over every layer of the query's relevance."""
    return signals["relevance"].per_layer[:, signals.ctx.reused_positions].mean(0)


@register_signal("cacheblend", per="token", reads=("check_layer",), log=True,
                 label="CacheBlend check-layer value deviation")
def cacheblend(signals) -> torch.Tensor:
    return signals["check_layer"].value_deviation


@register_signal("relay", per="token", reads=("check_layer",), log=True, label="RelayCaching score")
def relay(signals) -> torch.Tensor:
    return signals["check_layer"].relay


@register_signal("patch_effect", per="token", reads=("patch",), label="actual patch effect")
def patch_effect(signals) -> torch.Tensor:
    return torch.tensor(signals["patch"]["delta_loss"].to_numpy())


# ----------------------------------------------------------------------------- per layer [layer, n_reused]


@register_signal("grad_sq_k", per="layer", reads=("saliency",), log=True, label="squared gradient, keys")
def grad_sq_k(signals) -> torch.Tensor:
    return signals["saliency"].grad_sq_k


@register_signal("grad_sq_v", per="layer", reads=("saliency",), log=True, label="squared gradient, values")
def grad_sq_v(signals) -> torch.Tensor:
    return signals["saliency"].grad_sq_v


@register_signal("gated_k", per="layer", reads=("saliency",), needs_dense=True, log=True,
                 label="gated saliency, keys")
def gated_k(signals) -> torch.Tensor:
    return signals["saliency"].gated("k")


@register_signal("gated_v", per="layer", reads=("saliency",), needs_dense=True, log=True,
                 label="gated saliency, values")
def gated_v(signals) -> torch.Tensor:
    return signals["saliency"].gated("v")


@register_signal("draft_attention", per="layer", reads=("draft",), label="draft attention")
def draft_attention_layers(signals) -> torch.Tensor:
    return signals["draft"].per_layer[:, signals.ctx.reused_positions]


@register_signal("question_attention", per="layer", reads=("question",), label="question attention")
def question_attention_layers(signals) -> torch.Tensor:
    return signals["question"].per_layer[:, signals.ctx.reused_positions]


@register_signal("query_relevance", per="layer", reads=("relevance",), label="query relevance")
def query_relevance_layers(signals) -> torch.Tensor:
    return signals["relevance"].per_layer[:, signals.ctx.reused_positions]
