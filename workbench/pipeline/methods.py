"""Reuse methods of a pipeline call, as a registry (like the selectors).

A method decides how one agent call gets its cache: `fn(ctx: CallContext) -> CallResult`. The
request loop (`pipeline.request`) calls it once per agent in topological order; the state that
lives across calls and requests (KVComm's anchor pool) sits in `MethodState`.

    @register_method("my-method", description="...")
    def my_method(call): ...
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from workbench.decode import draft_confidence
from workbench.registry import Registry
from workbench.kv import KVCache
from workbench.layout import Layout
from workbench.models import LoadedModel
from workbench.pipeline.anchors import KVCOMM_GAMMA, AnchorPool, GateDecision
from workbench.pipeline.calls import Slot, dense_call, kvcomm_call, template_ids
from workbench.pipeline.spec import PipelineSpec
from workbench.splice import prefill
from workbench.tasks import Example


@dataclass
class MethodState:
    """What persists across the calls and requests of one run of a method."""

    pool: AnchorPool = field(default_factory=AnchorPool)
    bases: dict = field(default_factory=dict)  # this request's slot base caches by ids (`calls.base_cache`)
    kvcomm: str = "code"  # the KVComm variant (`calls.KVCOMM_VARIANTS`): a run's `--kvcomm`
    templates: dict = field(default_factory=dict)  # each agent's latest template tail (`calls.tail_base`)


@dataclass(frozen=True)
class CallContext:
    model: LoadedModel
    spec: PipelineSpec
    agent: int
    layout: Layout
    slots: tuple[Slot, ...]
    state: MethodState
    seed: int  # this call's own seed (run seed, request, agent), for drawn policies
    example: Example  # the call's prompt as an Example (its layout was built from it)


@dataclass(frozen=True)
class CallResult:
    cache: KVCache  # the context the answer is decoded over
    reused: bool  # served without a dense prefill of the call
    decisions: tuple[GateDecision, ...] = ()  # per slot, when a gate ran
    suffix_ids: torch.Tensor | None = None  # what is prefilled over `cache` (default: the layout's suffix)
    confidence: float = math.nan  # OpenGate: mean top-1 probability of the draft
    n_repaired: int = 0  # rows recomputed exactly in the served cache (BCR)

    def suffix(self, layout: Layout) -> torch.Tensor:
        """What is prefilled over `cache` before decoding: [pos]."""
        return layout.ids[layout.suffix_start:] if self.suffix_ids is None else self.suffix_ids

    def span(self, layout: Layout) -> KVCache:
        """The handed-off span [0, suffix_start) of the served cache (a served tail left out)."""
        return self.cache.slice(0, layout.suffix_start)


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[[CallContext], CallResult]
    description: str
    make_state: Callable[[], MethodState]

    @property
    def stateful(self) -> bool:
        """Whether a call depends on earlier requests (an anchor pool): the default state holds none."""
        return self.make_state is not MethodState


METHODS: Registry[Method] = Registry("reuse method", replace=False)


def register_method(name: str, description: str, make_state: Callable[[], MethodState] = MethodState):
    def add(fn):
        METHODS.add(name, Method(name, fn, description, make_state))
        return fn
    return add


def get_method(name: str) -> Method:
    return METHODS.get_or_raise(name)


def kvcomm_state(gamma: float = KVCOMM_GAMMA) -> Callable[[], MethodState]:
    """A fresh pool with entropy threshold γ (γ = 0 never reuses; γ = 1 always trusts ≥ 2 anchors);
    the variant is the default ("code") until the run sets `state.kvcomm`."""
    return lambda: MethodState(AnchorPool(gamma=gamma))


@register_method("chat-template", "Dense over the whole prompt tokenized as one text (BCR's Dense)")
def chat_template(call: CallContext) -> CallResult:
    ids = template_ids(call.model.tokenizer, call.layout)  # [pos]
    return CallResult(prefill(call.model, ids[:-1]), reused=False, suffix_ids=ids[-1:])


@register_method("token-matched", "Dense over the reuse path's merged per-segment ids")
def token_matched(call: CallContext) -> CallResult:
    return CallResult(dense_call(call.model, call.layout), reused=False)


def kvcomm_result(call: CallContext, force_dense: bool = False) -> CallResult:
    """KVComm's call (`calls.kvcomm_call`) as a method's result."""
    served = kvcomm_call(call.model, call.state.pool, call.agent, call.layout, call.slots, force_dense,
                         call.state.bases, call.state.kvcomm, call.state.templates)
    return CallResult(served.cache, served.reused, served.decisions, served.suffix_ids)


register_method("kvcomm", f"KVComm: anchors + entropy gate, γ = {KVCOMM_GAMMA:g}", kvcomm_state())(kvcomm_result)
register_method("kvcomm-always", "KVComm's prediction whenever 2 anchors exist (γ = 1)", kvcomm_state(1.0))(kvcomm_result)
for _gamma in (0.5, 0.7):  # the rest of BCR's gate sweep γ ∈ {0.3 (kvcomm), 0.5, 0.7, 1.0 (kvcomm-always)}
    register_method(f"kvcomm-{_gamma:g}", f"KVComm: anchors + entropy gate, γ = {_gamma:g}",
                    kvcomm_state(_gamma))(kvcomm_result)


@register_method("protect-root", f"KVComm γ = {KVCOMM_GAMMA:g}, but entry agents always prefill densely (P3)", kvcomm_state())
def protect_root(call: CallContext) -> CallResult:
    return kvcomm_result(call, force_dense=call.spec.depth(call.agent) == 0)


@register_method("protect-leaf", f"KVComm γ = {KVCOMM_GAMMA:g}, but the deepest agent always prefills densely (P4)",
                 kvcomm_state())
def protect_leaf(call: CallContext) -> CallResult:
    deepest = max(call.spec.depth(a) for a in range(call.spec.n_agents))
    return kvcomm_result(call, force_dense=call.spec.depth(call.agent) == deepest)


@register_method("coin-alloc", f"KVComm γ = {KVCOMM_GAMMA:g}, and a seeded coin forces a dense call with probability "
                 "1 / n_agents, the share the structural policies force (P5)", kvcomm_state())
def coin_alloc(call: CallContext) -> CallResult:
    rng = np.random.default_rng(call.seed)
    return kvcomm_result(call, force_dense=bool(rng.random() < 1.0 / call.spec.n_agents))


@register_method("opengate", "serve KVComm's prediction (γ = 1), draft k = 2 tokens, keep it iff their mean "
                 "top-1 probability >= 0.5, else prefill densely (App. I)", kvcomm_state(1.0))
def opengate(call: CallContext, k: int = 2, theta: float = 0.5) -> CallResult:
    served = kvcomm_result(call)
    if not served.reused:
        return served
    confidence = draft_confidence(call.model, served.cache, served.suffix(call.layout), k)
    if confidence >= theta:
        return replace(served, confidence=confidence)
    return CallResult(dense_call(call.model, call.layout), False, served.decisions, confidence=confidence)
