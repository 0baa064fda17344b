"""The layer step: the one loop over a decoder's layers that every workbench pass runs.

    embed -> per layer: norm -> q, k, v -> RoPE at absolute positions (`rope`, the family's tables)
    -> attend -> o_proj, MLP
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
from einops import rearrange

from workbench.engine.hooks import EXPLICIT_ATTENTION, Hooks, Rows
from workbench.family import FamilyAdapter, apply_rope

# attend(layer, q [token, head, d_head], k, v [token, kv_head, d_head] post-RoPE, explicit) -> [token, head * d_head]
# explicit: None, or an `Explicit`: the attention is then written out (`attention.explicit_attention`) for its hooks
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
        z = attend(l, q, k, v, Explicit.of(hooks, l, rows))  # [token, head * d_head]
        z = hooks.rows(f"blocks.{l}.attn.hook_z", l, rearrange(z, "t (h d) -> t h d", h=ad.n_heads), rows)
        z = rearrange(z, "t h d -> t (h d)")
        h = ad.finish_layer(l, h, z, LayerHooks(hooks, l, rows))
        h = hooks.rows(f"blocks.{l}.hook_resid_post", l, h, rows)
    if stop_after_qkv and n:
        h, *_ = _rotated_qkv(ad, n - 1, h, tables[n - 1], rows, hooks)
    return h


def final_logits(ad: FamilyAdapter, h: torch.Tensor, rows: Rows | None = None, hooks: Hooks | None = None) -> torch.Tensor:
    """The logits of rows `h` ([token, hidden] -> [token, vocab]) through `ln_final.hook_normalized`
    and `hook_unembed` when hooks are given (`rows`: where those rows sit among the cells)."""
    if not hooks:
        return ad.logits(h)
    return ad.logits(h, LayerHooks(hooks, None, rows))


class LayerHooks:
    """The hooks of one layer as the family adapter calls them: `hook(local name, x) -> x` on
    rows laid end to end, and `local name in hook` (whether anything is registered there)."""

    def __init__(self, hooks: Hooks, layer: int | None, rows: Rows):
        self.hooks, self.layer, self.rows = hooks, layer, rows
        self.prefix = "" if layer is None else f"blocks.{layer}."

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.hooks.rows(self.prefix + name, self.layer, x, self.rows)

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self.hooks


def rope(x: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """RoPE, the one place it is applied: x [row, head, d_head] rotated by its rows' `table`, (cos,
    sin) [row, d_head] from the family (`FamilyAdapter.rope_tables` / `rope_table`: each layer's
    base, scaling and attention factor)."""
    cos, sin = table
    return apply_rope(x, cos[:, None], sin[:, None])


def rotate(ad: FamilyAdapter, x: torch.Tensor, positions: torch.Tensor, layer: int) -> torch.Tensor:
    """Layer `layer`'s RoPE at absolute `positions` ([row]) applied to x ([row, head, d_head])."""
    return rope(x, ad.rope_table(positions, x, layer))


def rotated_qkv(ad: FamilyAdapter, layer: int, x: torch.Tensor, positions: torch.Tensor):
    """Layer-normed hidden rows -> (q, k, v) with RoPE at `positions` ([row]), without hooks: the
    queries and keys layer `layer` attends with. x: [row, hidden] -> q [row, head, d_head], k, v
    [row, kv_head, d_head]."""
    q, k, v = ad.project_qkv(layer, x)
    table = ad.rope_table(positions, x, layer)
    return rope(q, table), rope(k, table), v


def _rotated_qkv(ad: FamilyAdapter, l: int, h: torch.Tensor, table, rows: Rows, hooks: Hooks | None):
    """Layer l up to its post-RoPE q, k and its v, through their hook points (`hook_resid_pre` to
    `hook_rot_k`). h: [token, hidden]; table: (cos, sin) [token, d_head]. Returns (h, q, k, v)."""
    hook = None
    if hooks:
        h = hooks.rows(f"blocks.{l}.hook_resid_pre", l, h, rows)
        hook = LayerHooks(hooks, l, rows)
    norm = ad.layers[l].input_layernorm
    x = norm(h) if hook is None else ad.norm(norm, h, hook, "ln1.hook_normalized")
    q, k, v = ad.project_qkv(l, x, hook)  # [token, head | kv_head, d_head]
    q, k = rope(q, table), rope(k, table)
    if hooks:
        q = hooks.rows(f"blocks.{l}.attn.hook_rot_q", l, q, rows)
        k = hooks.rows(f"blocks.{l}.attn.hook_rot_k", l, k, rows)
    return h, q, k, v


class Explicit:
    """The hooks of a layer's written-out attention: `hook_attn_scores` (before the softmax) and
    `hook_pattern` (after it), each seen by absolute key position ([cell, head, row, n], keys
    0..n-1, `HookPoint.key_positions`): the caller's key axis (the batched cells' base, known and
    new rows; a decode step's) is scattered there, a repaired position once (its stale base copy,
    which the mask hides, dropped), and gathered back after the hook. `engine.attention` writes the
    attention out for it (`explicit_attention`)."""

    def __init__(self, hooks: Hooks, layer: int, rows: Rows):
        self.hooks, self.layer, self.rows = hooks, layer, rows

    @classmethod
    def of(cls, hooks: Hooks, layer: int, rows: Rows) -> Explicit | None:
        """None when neither point of `layer` is hooked (the caller then runs its fused kernel)."""
        if not any(f"blocks.{layer}.{name}" in hooks for name in EXPLICIT_ATTENTION):
            return None
        return cls(hooks, layer, rows)

    def __call__(self, kind: str, x: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """Run the hooks of `attn.hook_{kind}` on x ([cell, head, row, key] over `key_positions`,
        [cell, key], -1 on padding); returns x as they left it, on the caller's key axis."""
        name = f"blocks.{self.layer}.attn.hook_{kind}"
        if name not in self.hooks:
            return x
        fill = float("-inf") if kind == "attn_scores" else 0.0
        n = int(key_positions.max()) + 1 if key_positions.numel() else 0
        if key_positions.shape[1] == n and bool((key_positions == torch.arange(n, device=x.device)).all()):
            # already by absolute position (the serial repair): no scatter, no copy
            return self.hooks.call(name, x, self.rows.point(name, self.layer, key_positions, self.hooks.context(name)))
        column = _absolute_columns(key_positions, n)  # [cell, key]: its absolute position, or n (dropped)
        index = column[:, None, None].expand_as(x)
        full = x.new_full((*x.shape[:3], n + 1), fill).scatter_(-1, index, x)  # [cell, head, row, n + 1]
        absolute = torch.arange(n, device=x.device).expand(len(x), n)  # [cell, key]
        seen = self.hooks.call(name, full[..., :n].contiguous(),
                               self.rows.point(name, self.layer, absolute, self.hooks.context(name)))
        back = torch.cat([seen, seen.new_full((*seen.shape[:3], 1), fill)], dim=-1).gather(-1, index)
        return back.masked_fill((column == n)[:, None, None], fill)


def _absolute_columns(key_positions: torch.Tensor, n: int) -> torch.Tensor:
    """Each key's absolute position, or `n` for padding (-1) and for a position that appears again
    later on the key axis (a stale base row its cell recomputes). key_positions: [cell, key]."""
    order = torch.arange(key_positions.shape[1], device=key_positions.device).expand_as(key_positions)
    slot = torch.where(key_positions >= 0, key_positions, n)
    last = torch.full((len(key_positions), n + 1), -1, dtype=torch.long, device=key_positions.device)
    last = last.scatter_reduce(1, slot, order, "amax")
    live = (last.gather(1, slot) == order) & (key_positions >= 0)
    return torch.where(live, key_positions, n)
