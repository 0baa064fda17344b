"""The layer step: the one loop over a decoder's layers that every workbench pass runs.

    embed -> per layer: norm -> q, k, v -> RoPE at absolute positions -> attend -> o_proj, MLP
    (the family adapter's `finish_layer`) -> the next layer

A pass may stop at its last layer right after q, k, v (`stop_after_qkv`), for callers that only
read that layer's queries, keys or values at their hook points (CacheBlend's check layer).

Rows of one or many cells are laid end to end ([token, hidden]) so the linear layers run on all
of them at once; how they attend is the caller's (`attend(l, q, k, v, pattern)`): the serial
repair writes its rows into one cache and attends over it, the batched cells attend over a shared
base plus their own rows (`engine.attention`). Hook points (`engine.hooks`) sit at every step;
without hooks the loop is the bare computation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.engine.hooks import Hooks, Rows
from workbench.family import FamilyAdapter, rotate_half

# attend(layer, q [token, head, d_head], k, v [token, kv_head, d_head] post-RoPE, pattern) -> [token, head * d_head]
# pattern: None, or fn(probs [cell, head, row, key], key_positions [cell, key]) -> probs (a hook_pattern)
Attend = Callable[..., torch.Tensor]


def run_layers(ad: FamilyAdapter, ids: torch.Tensor, positions: torch.Tensor, rows: Rows, attend: Attend,
               hooks: Hooks | None = None, n_layers: int | None = None, stop_after_qkv: bool = False) -> torch.Tensor:
    """Run rows `ids` ([token]) at absolute `positions` ([token]) through the first `n_layers`
    layers (default: all); returns their hidden states after the last ([token, hidden]).

    `stop_after_qkv`: the last of those layers stops once its q, k, v are made and rotated (its
    hook points through `hook_rot_k`): no attention, o_proj or MLP there (`attend` is not called
    for it), and the hidden states returned are those entering it (after its `hook_resid_pre`)."""
    h = ad.embed(ids)  # [token, hidden]
    if hooks:
        h = hooks.rows("hook_embed", None, h, rows)
    tables = ad.rope_tables(positions, h)  # [layer] of (cos, sin) [token, d_head]
    n = len(ad.layers[:n_layers])
    for l in range(n - 1 if stop_after_qkv else n):
        h, q, k, v = _rotated_qkv(ad, l, h, tables[l], rows, hooks)
        if not hooks:
            h = ad.finish_layer(l, h, attend(l, q, k, v, None))
            continue
        z = attend(l, q, k, v, _pattern_hook(hooks, l, rows))  # [token, head * d_head]
        z = hooks.rows(f"blocks.{l}.attn.hook_z", l, z.view(len(z), ad.n_heads, ad.head_dim), rows).flatten(1)
        h = ad.finish_layer(l, h, z, lambda name, x, l=l: hooks.rows(f"blocks.{l}.{name}", l, x, rows))
        h = hooks.rows(f"blocks.{l}.hook_resid_post", l, h, rows)
    if stop_after_qkv and n:
        h, *_ = _rotated_qkv(ad, n - 1, h, tables[n - 1], rows, hooks)
    return h


def _rotated_qkv(ad: FamilyAdapter, l: int, h: torch.Tensor, rope, rows: Rows, hooks: Hooks | None):
    """Layer l up to its post-RoPE q, k and its v, through their hook points (`hook_resid_pre` to
    `hook_rot_k`). h: [token, hidden]; rope: (cos, sin) [token, d_head]. Returns (h, q, k, v)."""
    if hooks:
        h = hooks.rows(f"blocks.{l}.hook_resid_pre", l, h, rows)
    q, k, v = ad.project_qkv(l, ad.layers[l].input_layernorm(h))  # [token, head | kv_head, d_head]
    if hooks:
        q, k, v = (hooks.rows(f"blocks.{l}.attn.hook_{n}", l, x, rows) for n, x in zip("qkv", (q, k, v)))
    cos, sin = rope
    q = q * cos[:, None] + rotate_half(q) * sin[:, None]
    k = k * cos[:, None] + rotate_half(k) * sin[:, None]
    if hooks:
        q = hooks.rows(f"blocks.{l}.attn.hook_rot_q", l, q, rows)
        k = hooks.rows(f"blocks.{l}.attn.hook_rot_k", l, k, rows)
    return h, q, k, v


def _pattern_hook(hooks: Hooks, layer: int, rows: Rows):
    name = f"blocks.{layer}.attn.hook_pattern"
    if name not in hooks:
        return None

    def pattern(probs: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        return hooks.call(name, probs, rows.point(name, layer, key_positions))
    return pattern


def explicit_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                       scaling: float, key_positions: torch.Tensor, pattern) -> torch.Tensor:
    """Attention with its pattern written out, for a `hook_pattern` to read or edit: fp32 softmax.

    q: [cell, head, row, d_head]; keys, values: [cell, kv_head, key, d_head] (query head h reads kv
    head h // (head / kv_head)); mask: [cell, row, key] (True: visible); key_positions: [cell, key].
    Returns [cell, row, head * d_head]: the fused kernel's result up to rounding."""
    n_cells, n_heads, width, d = q.shape
    group = n_heads // keys.shape[1]
    k = keys.to(q.dtype).repeat_interleave(group, dim=1)  # [cell, head, key, d_head]
    v = values.to(q.dtype).repeat_interleave(group, dim=1)
    scores = torch.einsum("chrd,chkd->chrk", q.float(), k.float()) * scaling
    probs = pattern(scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1), key_positions)
    out = torch.einsum("chrk,chkd->chrd", probs.to(v.dtype), v)  # [cell, head, row, d_head]
    return out.permute(0, 2, 1, 3).reshape(n_cells, width, n_heads * d)
