"""`SignalSet`: every signal of one Context, computed once on first use, with its cost.

Selectors read their scores from here, so one signal serves every selector and budget
(CADENCE-Grad and gated CADENCE share one backward; `bcr` in any layout shares one draft).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch

from workbench.context import Context
from workbench.signals.attention import AttentionScores, draft_attention, question_attention
from workbench.signals.check_layer import CheckLayerSignals, check_layer_signals
from workbench.signals.deviation import kv_deviation
from workbench.signals.patching import AttributionCheck, attribution_check, patch_effects
from workbench.signals.saliency import Saliency, decision_saliency


@dataclass(frozen=True)
class Cost:
    """What producing a score cost. `layer_tokens` counts token rows x layers computed."""

    forward_passes: int = 0
    backward_passes: int = 0
    decode_steps: int = 0
    layer_tokens: int = 0
    needs_dense: bool = False
    seconds: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.forward_passes + other.forward_passes, self.backward_passes + other.backward_passes,
                    self.decode_steps + other.decode_steps, self.layer_tokens + other.layer_tokens,
                    self.needs_dense or other.needs_dense, self.seconds + other.seconds)


class SignalSet:
    """Lazily computed signals of `ctx`; `costs[name]` records what each one took."""

    def __init__(self, ctx: Context, *, check_layer: int = 1, draft_k: int = 2,
                 patch_max_tokens: int = 64, seed: int = 0):
        self.ctx = ctx
        self.check_layer_index = check_layer
        self.draft_k = draft_k
        self.patch_max_tokens = patch_max_tokens
        self.seed = seed
        self.costs: dict[str, Cost] = {}
        self._values: dict[str, object] = {}

    def _get(self, name: str, compute) -> object:
        if name not in self._values:
            start = time.perf_counter()
            value, cost = compute()
            self._values[name] = value
            self.costs[name] = Cost(**{**cost.__dict__, "seconds": time.perf_counter() - start})
        return self._values[name]

    @property
    def computed(self) -> tuple[str, ...]:
        return tuple(self._values)

    @property
    def n_layers(self) -> int:
        return self.ctx.model.adapter.n_layers

    @property
    def deviation(self) -> dict[tuple[str, str], torch.Tensor]:
        """(kind, metric) -> [layer, n]: splice vs dense at every reused token."""
        def compute():
            dev = kv_deviation(self.ctx.spliced, self.ctx.dense, self.ctx.reused_positions)
            tokens = self.ctx.layout.suffix_start
            return dev, Cost(forward_passes=1, layer_tokens=tokens * self.n_layers, needs_dense=True)
        return self._get("deviation", compute)

    @property
    def saliency(self) -> Saliency:
        """CADENCE gradients of the splice's own greedy answer (one backward)."""
        def compute():
            sal = decision_saliency(self.ctx)
            rows = len(self.ctx.suffix_ids) + len(sal.answer_ids)
            return sal, Cost(forward_passes=1, backward_passes=1, decode_steps=len(sal.answer_ids),
                             layer_tokens=rows * self.n_layers, needs_dense=True)
        return self._get("saliency", compute)

    @property
    def draft(self) -> AttentionScores:
        """BCR draft attention (k query rows), draft rolled back."""
        def compute():
            att = draft_attention(self.ctx, k=self.draft_k)
            rows = len(self.ctx.suffix_ids) + max(0, len(att.draft_ids) - 1)
            return att, Cost(forward_passes=1, decode_steps=len(att.draft_ids), layer_tokens=rows * self.n_layers)
        return self._get("draft", compute)

    @property
    def question(self) -> AttentionScores:
        """Attention of the question-suffix queries."""
        def compute():
            att = question_attention(self.ctx)
            return att, Cost(forward_passes=1, layer_tokens=len(self.ctx.suffix_ids) * self.n_layers)
        return self._get("question", compute)

    @property
    def check_layer(self) -> CheckLayerSignals:
        """CacheBlend's partial recompute through the check layer (no dense reference)."""
        def compute():
            sig = check_layer_signals(self.ctx, self.check_layer_index)
            tokens = self.ctx.layout.suffix_start
            return sig, Cost(forward_passes=1, layer_tokens=tokens * (self.check_layer_index + 1))
        return self._get("check_layer", compute)

    @property
    def patch(self) -> pd.DataFrame:
        """Actual single-token patch effects (dense K+V rows) on the decision loss, every reused token."""
        def compute():
            answer = self.saliency.answer_ids
            frame = patch_effects(self.ctx, self.ctx.reused_positions, answer, kinds=("kv",))
            rows = (len(self.ctx.suffix_ids) + len(answer)) * len(frame)
            return frame, Cost(forward_passes=len(frame), layer_tokens=rows * self.n_layers, needs_dense=True)
        return self._get("patch", compute)

    @property
    def attribution(self) -> AttributionCheck:
        """First-order estimates against actual patching (K+V, K only, V only) on a stratified sample."""
        def compute():
            check = attribution_check(self.ctx, self.saliency, self.patch_max_tokens, self.seed)
            return check, Cost(forward_passes=len(check.frame), needs_dense=True)
        return self._get("attribution", compute)
