"""CacheBlend's check-layer deviation and a RelayCaching-style attention influence.

CacheBlend (as shipped: YaoJiayi/CacheBlend `check_layers=[1]`, `recomp_ratio=0.16`;
LMCache `blend_check_layers=1`, ratio 0.15) recomputes every reused token through layers
0..c (layer 0 is a full prefill) and scores a token by the squared L2 of its **value**
deviation at the check layer c: ||V_fresh^c - V_spliced^c||^2 over kv heads and d_head.
No dense reference is needed: the fresh rows at layers <= c are what a partial prefill gives.

RelayCaching's code is not public; its description is "deviation x accumulated attention
influence". The workbench defines it precisely as: the same check-layer value deviation,
times the attention the token receives at the check layer from every later token of the
handed-off span (mean over query heads, sum over those later queries, causal softmax over
the freshly recomputed keys). Both come out of one partial recompute of layers 0..c that stops
at layer c right after its q, k, v (`stop_after_qkv`): the check layer's post-RoPE queries and
keys and its values are read at its hook points (`hook_rot_q`, `hook_rot_k`, `hook_v`), the very
tensors the full recompute would attend with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.context import Context
from workbench.engine.hooks import Hooks, caching_hooks, with_reads
from workbench.errors import WorkbenchError
from workbench.repair import recompute_rows
from workbench.signals.attention import attention_rows


@dataclass(frozen=True)
class CheckLayerSignals:
    """Per reused token, from one partial recompute through layers 0..check_layer."""

    check_layer: int
    value_deviation: torch.Tensor  # [n] ||V_fresh - V_spliced||^2 at the check layer
    influence: torch.Tensor  # [n] attention received from later handed-off tokens at the check layer
    seconds: float

    @property
    def relay(self) -> torch.Tensor:
        """Deviation x influence. [n]"""
        return self.value_deviation * self.influence


def check_layer_signals(ctx: Context, check_layer: int = 1, hooks=None) -> CheckLayerSignals:
    """Recompute every handed-off token through layers 0..check_layer and score the reused rows;
    `hooks` (`engine.hooks`) run on that recompute, before the reads of the check layer's q, k, v."""
    ad = ctx.model.adapter
    if not 0 <= check_layer < ad.n_layers:
        raise WorkbenchError(f"check layer {check_layer} out of range [0, {ad.n_layers})")
    start = time.perf_counter()
    n = ctx.layout.suffix_start
    rows = torch.arange(n)
    names = [f"blocks.{check_layer}.attn.hook_{name}" for name in ("rot_q", "rot_k", "v")]
    acts: dict[str, torch.Tensor] = {}
    reads = with_reads(Hooks.of(hooks, ad), caching_hooks(names, acts))  # the caller's hooks, then the reads
    recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=check_layer + 1,
                   hooks=reads, stop_after_qkv=True)  # layer c: no attention, MLP
    q, k, v = (acts[name][0] for name in names)  # [pos, head | kv_head, d_head]
    pos = rows.to(ctx.model.device)
    with torch.inference_mode():
        probs = attention_rows(q, k.transpose(0, 1), pos, ad.scaling, ad.windows[check_layer])  # [head, query, key]
        received = probs.mean(0)  # [query, key]
        influence = received.tril(-1).sum(0)  # [key]: from strictly later queries
        spliced_v = ctx.spliced.values[check_layer].transpose(0, 1)  # [pos, kv_head, d_head]
        dev = (v.float() - spliced_v.float()).square().sum((1, 2))  # [pos]
    reused = ctx.reused_positions.to(dev.device)
    return CheckLayerSignals(check_layer, dev[reused].cpu(), influence[reused].float().cpu(),
                             time.perf_counter() - start)
