"""Selective recompute: run only chosen rows through every layer over a cache (BCR App. B).

Per layer, in order: the chosen rows' hidden states go through the projections and RoPE at
their true positions; their new K/V overwrite their own slots *before* attention (so a
repaired row attending to another repaired row sees the corrected value); their queries
attend over the whole cache under a causal mask built from absolute positions (key
position <= query position, and inside the layer's sliding window where it has one; a
bottom-right mask would let scattered rows see later keys); then o-projection and MLP feed
the next layer. Cost: O(|S| * n) attention and |S| rows of every linear layer. The input cache
is never mutated. The loop is the engine's layer step (`engine.layers.run_layers`) over one cell,
so a repair takes the engine's hooks (`engine.hooks`, `Context.run_with_cache`).

A *context mask* (`context`, bool [n_context]) narrows what a repaired row attends to (RelaxKV's
restricted recompute): a row at a position inside the mask's span sees only keys whose position
the mask holds, and its own key; rows past its end (the receiver's own text) see every key.
Without a mask, or with an all-True one, the repair is today's exactly (the same mask).
"""

from __future__ import annotations

import torch
from einops import rearrange

from workbench.engine.hooks import Hooks, Rows
from workbench.engine.attention import over_keys
from workbench.engine.layers import run_layers
from workbench.engine.masks import check_context, check_positions, context_allows
from workbench.kv import KVCache
from workbench.models import LoadedModel

__all__ = ["check_context", "check_positions", "context_allows", "recompute_rows", "repair"]


def recompute_rows(model: LoadedModel, cache: KVCache, ids: torch.Tensor,
                   positions: torch.Tensor, n_layers: int | None = None,
                   context: torch.Tensor | None = None, hooks=None,
                   stop_after_qkv: bool = False) -> tuple[KVCache, torch.Tensor]:
    """Exactly recompute rows `positions` of `cache` (ids: the context's token ids, [pos]).

    Returns (new cache, hidden states of the rows after the last layer run, [row, hidden]).
    `positions` must already be validated and sorted (see `check_positions`). Rows beyond the
    cache's end extend it. `n_layers` stops after that many layers (CacheBlend's partial
    recompute up to its check layer); layers above keep the input cache's rows. `context`
    narrows what the rows attend to (the module docstring). `hooks` ({name: fn}, `engine.hooks`)
    see the rows as one cell: `[1, row, ...]`. `stop_after_qkv`: the last layer run stops after
    its q, k, v hook points (`engine.layers.run_layers`): its cache rows stay the input's, and the
    hidden states returned are those entering it.

    Grad mode: where grad is enabled and the cache's keys or values require grad (leaves a caller
    differentiates into, CADENCE's saliency), the pass runs with autograd instead of under
    `inference_mode`, each layer's rows in a tensor of their own (autograd keeps what a layer
    attended to; a later layer's write must not touch it); the values are the same.
    """
    ad = model.adapter
    device = model.device
    hooks = Hooks.of(hooks, ad)
    n = max(cache.n_positions, int(positions.max()) + 1 if positions.numel() else 0)
    grad = torch.is_grad_enabled() and (cache.keys.requires_grad or cache.values.requires_grad)
    keys = _grown(cache.keys, n)  # [layer, kv_head, pos, d_head]
    values = _grown(cache.values, n)
    if grad:  # [layer] of [kv_head, pos, d_head], each its own tensor
        keys, values = [k.clone() for k in keys], [v.clone() for v in values]
    if positions.numel() == 0:
        return KVCache(_stacked(keys), _stacked(values)), torch.empty(0, model.config.hidden_size, device=device)
    pos = positions.to(device)
    key_pos = torch.arange(n, device=device)
    allowed = context_allows(check_context(context), pos, key_pos) if context is not None else None  # [row, pos]

    def attend(l: int, q, k, v, explicit) -> torch.Tensor:  # q: [row, head, d_head]; k, v: [row, kv_head, d_head]
        keys[l][:, pos] = rearrange(k, "r k d -> k r d")  # overwrite before attending
        values[l][:, pos] = rearrange(v, "r k d -> k r d")
        mask = ad.visible(pos, key_pos, l)  # [row, pos] by absolute position
        mask = mask if allowed is None else mask & allowed
        # one cell: [1, head, row, d_head] over [1, kv_head, pos, d_head] -> [row, head * d_head]
        q1 = rearrange(q, "r h d -> 1 h r d")
        return over_keys(ad, q1, keys[l][None], values[l][None], mask[None], key_pos[None], explicit)[0]

    with torch.inference_mode(not grad):
        rows = Rows.one_cell(pos) if hooks else None
        h = run_layers(ad, ids.to(device)[pos], pos, rows, attend, hooks, n_layers, stop_after_qkv)
    return KVCache(_stacked(keys), _stacked(values)), h


def repair(model: LoadedModel, cache: KVCache, ids: torch.Tensor, positions,
           context: torch.Tensor | None = None, hooks=None) -> KVCache:
    """A new cache with rows `positions` recomputed exactly (over `context` only, when given: bool
    [n_context], see the module docstring); `cache` is left unchanged. `hooks`: {name: fn}, run
    on the pass (`engine.hooks`)."""
    pos = check_positions(positions, cache.n_positions)
    if context is not None:
        check_context(context)
    if pos.numel() == 0:
        return cache.clone()
    fixed, _ = recompute_rows(model, cache, ids, pos, context=context, hooks=hooks)
    return fixed


def _stacked(t) -> torch.Tensor:
    """`t` ([layer, kv_head, pos, d_head]) as it is, or its layers (grad mode: a list) stacked into one."""
    return t if isinstance(t, torch.Tensor) else torch.stack(t)


def _grown(t: torch.Tensor, n: int) -> torch.Tensor:
    """A copy of t ([layer, kv_head, pos, d_head]) with its position axis padded to n."""
    out = t.new_zeros(t.shape[0], t.shape[1], n, t.shape[3])
    out[:, :, : t.shape[2]] = t
    return out
