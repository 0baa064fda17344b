"""Attention, written once: a query's softmax over the keys its mask leaves it, for the serial
repair (one cell over one cache) and for many cells over one shared base (each cell's keys are
the base's, its known rows' and its new rows', under one softmax).

`over_keys` is the one dense attention (torch's fused kernel, or written out in fp32 for
`hook_attn_scores` / `hook_pattern`: `explicit_attention`); `attend` lays a cell's keys end to end
for it, or, for a decode step's few rows, scores the shared base with one product for every cell
(`_attend_split`, the base's keys never copied per cell). Where the scores are written out (the
hooked attention, the decode step's known and new keys, the signals' attention rows) q·kᵀ is
`grouped_scores` (query heads grouped over their kv head, no key copied per group) and the
softmax `attention_probs`, once each.
`_attend_split` does not call the fused kernel: that would need each cell's keys laid end to end
(the copy it exists to avoid), and its rounding differs from the written-out softmax's.

q: [cell, head, row, d_head]; base_k/v: [kv_head, pos, d_head] (shared); known_k/v, new_k/v:
[cell, kv_head, *, d_head]; mask: [cell, row, pos + known + row] (True: visible). Each returns
[cell, row, head * d_head].
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from einops import rearrange


def over_keys(ad, q, keys, values, mask, key_pos=None, explicit=None) -> torch.Tensor:
    """Each cell's rows attend over its keys. q: [cell, head, row, d_head]; keys, values: [cell,
    kv_head, key, d_head]; mask: [cell, row, key] (True: visible) -> [cell, row, head * d_head].
    torch's fused kernel, or with `explicit` (an `engine.layers.Explicit`, on `key_pos` [cell, key])
    the attention written out for its hooks."""
    if explicit is not None:
        return explicit_attention(q, keys, values, mask, ad.scaling, key_pos, explicit)
    if _plain_causal(q, keys, mask):  # a prefix prefilled alone: the kernel's causal path, no mask
        out = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), is_causal=True,
                                             scale=ad.scaling, enable_gqa=ad.n_heads != ad.n_kv_heads)
    else:
        out = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask[:, None],
                                             scale=ad.scaling, enable_gqa=ad.n_heads != ad.n_kv_heads)
    return rearrange(out, "c h r d -> c r (h d)")


def _plain_causal(q, keys, mask) -> bool:
    """Whether every cell's mask is exactly causal over its own rows (no cache before them, no
    window, no padding), on the CPU: there torch's causal path gives the masked kernel's numbers bit
    for bit and skips the mask (1.85x faster attention at 1,024 rows). CUDA keeps the masked call
    (not checked on a device). mask: [cell, row, key]."""
    rows = q.shape[2]
    if q.device.type != "cpu" or keys.shape[2] != rows or rows < 2:
        return False
    return bool(torch.equal(mask, _causal(rows, mask.device).expand_as(mask)))


@lru_cache(maxsize=2)
def _causal(rows: int, device: torch.device) -> torch.Tensor:
    """The lower-triangular [1, rows, rows] mask, kept for the last sizes (a prefill's layers share it)."""
    return torch.ones(rows, rows, dtype=torch.bool, device=device).tril()[None]


def attend(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask, key_pos=None, explicit=None) -> torch.Tensor:
    """Many rows per cell run torch's fused kernel over each cell's keys laid end to end (its
    scores are never held whole). A few rows per cell (a decode step) score the shared base with
    one product for all cells instead, which copies no cell's keys. A `hook_attn_scores` or
    `hook_pattern` (`explicit`, on `key_pos`, [cell, key]) writes the softmax out
    (`explicit_attention`)."""
    if explicit is not None or q.shape[2] > 8:
        keys, values = _laid_end_to_end(base_k, base_v, new_k, new_v, known_k, known_v, q.shape[0])
        return over_keys(ad, q, keys, values, mask, key_pos, explicit)
    return _attend_split(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask)


def _laid_end_to_end(base_k, base_v, new_k, new_v, known_k, known_v, n_cells: int):
    """Each cell's keys and values: base, known, new. Each [cell, kv_head, key, d_head]."""
    parts_k = [base_k[None].expand(n_cells, -1, -1, -1)] + ([known_k] if known_k is not None else []) + [new_k]
    parts_v = [base_v[None].expand(n_cells, -1, -1, -1)] + ([known_v] if known_v is not None else []) + [new_v]
    return torch.cat(parts_k, dim=2), torch.cat(parts_v, dim=2)


def grouped_scores(q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Raw scores q·kᵀ, unscaled, in the inputs' dtype: query head h reads kv head h // (head / kv_head),
    the kv heads never copied per group. q: [..., head, row, d_head]; keys: [..., kv_head, key, d_head]
    (the same leading axes) -> [..., head, row, key]."""
    qg = rearrange(q, "... (k g) r d -> ... k g r d", k=keys.shape[-3])
    return rearrange(torch.einsum("...kgrd,...kjd->...kgrj", qg, keys), "... k g r j -> ... (k g) r j")


def attention_probs(scores: torch.Tensor, visible: torch.Tensor, scaling: float, edit=None) -> torch.Tensor:
    """The written-out softmax: raw scores q·k ([..., key]) scaled in fp32, -inf where `visible`
    (broadcast to them) is False, softmax over the keys. `edit(kind, x) -> x`, when given, sees
    the masked scores ("attn_scores") and the probabilities ("pattern"). Returns fp32 [..., key].
    `scores` is the caller's own fresh product: scaled and masked in place where it is fp32."""
    scores = scores.float().mul_(scaling).masked_fill_(~visible, float("-inf"))
    if edit is None:
        return scores.softmax(-1)
    return edit("pattern", edit("attn_scores", scores).softmax(-1))


def _attend_split(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask) -> torch.Tensor:
    """`attend` for a few rows per cell: the shared base scored with one product for every cell,
    each cell's known and new keys by its own; one softmax (`attention_probs`) over the three."""
    n_cells = q.shape[0]
    kv, group, n_base = ad.n_kv_heads, ad.n_heads // ad.n_kv_heads, base_k.shape[1]
    qg = rearrange(q, "c (k g) r d -> c k g r d", k=kv)  # query head h reads kv head h // g
    flat = rearrange(qg, "c k g r d -> k (c g r) d")
    base_scores = torch.bmm(flat, base_k.transpose(1, 2).to(q.dtype))  # one product for every cell
    parts = [rearrange(base_scores, "k (c g r) n -> c k g r n", c=n_cells, g=group)]
    for keys in ([known_k] if known_k is not None else []) + [new_k]:  # [cell, kv_head, key, d_head]
        parts.append(rearrange(grouped_scores(q, keys.to(q.dtype)), "c (k g) r j -> c k g r j", k=kv))
    probs = attention_probs(torch.cat(parts, dim=-1), mask[:, None, None], ad.scaling).to(q.dtype)
    # probs: [cell, kv_head, g, row, key]
    p_base = rearrange(probs[..., :n_base], "c k g r n -> k (c g r) n")
    out = rearrange(torch.bmm(p_base, base_v.to(q.dtype)), "k (c g r) d -> c k g r d", c=n_cells, g=group)
    n_known = 0 if known_k is None else known_k.shape[2]
    if known_k is not None:
        out = out + torch.einsum("ckgrj,ckjd->ckgrd", probs[..., n_base:n_base + n_known], known_v.to(q.dtype))
    out = out + torch.einsum("ckgrj,ckjd->ckgrd", probs[..., n_base + n_known:], new_v.to(q.dtype))
    return rearrange(out, "c k g r d -> c r (k g d)")


def explicit_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                       scaling: float, key_positions: torch.Tensor, explicit) -> torch.Tensor:
    """Attention with its scores and pattern written out, for `hook_attn_scores` / `hook_pattern`
    to read or edit (`explicit(kind, x, key_positions) -> x`, kind "attn_scores" then "pattern":
    an `engine.layers.Explicit`): fp32 scores and softmax.

    q: [cell, head, row, d_head]; keys, values: [cell, kv_head, key, d_head] (query head h reads kv
    head h // (head / kv_head)); mask: [cell, row, key] (True: visible); key_positions: [cell, key].
    Returns [cell, row, head * d_head]: the fused kernel's result up to rounding."""
    scores = grouped_scores(q.float(), keys.float())  # [cell, head, row, key]
    probs = attention_probs(scores, mask[:, None], scaling,
                            lambda kind, x: explicit(kind, x, key_positions))  # [cell, head, row, key]
    pg = rearrange(probs.to(q.dtype), "c (k g) r j -> c k g r j", k=keys.shape[1])
    out = torch.einsum("ckgrj,ckjd->ckgrd", pg, values.to(q.dtype))  # [cell, kv_head, group, row, d_head]
    return rearrange(out, "c k g r d -> c r (k g d)")
