"""Attention of many cells over one shared base: each cell's keys are the base's (those it does
not overlay), its known rows' and its new rows', under one softmax.

q: [cell, head, row, d_head]; base_k/v: [kv_head, pos, d_head] (shared); known_k/v, new_k/v:
[cell, kv_head, *, d_head]; mask: [cell, row, pos + known + row] (True: visible). Each returns
[cell, row, head * d_head].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.engine.layers import explicit_attention


def attend(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask, key_pos=None, explicit=None) -> torch.Tensor:
    """Many rows per cell run torch's fused kernel over each cell's keys laid end to end (its
    scores are never held whole). A few rows per cell (a decode step) score the shared base with
    one product for all cells instead, which copies no cell's keys. A `hook_attn_scores` or
    `hook_pattern` (`explicit`, on `key_pos`, [cell, key]) writes the softmax out
    (`layers.explicit_attention`)."""
    if explicit is not None:
        keys, values = _laid_end_to_end(base_k, base_v, new_k, new_v, known_k, known_v, q.shape[0])
        return explicit_attention(q, keys, values, mask, ad.scaling, key_pos, explicit)
    if q.shape[2] > 8:
        return _attend_fused(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask)
    return _attend_split(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask)


def _laid_end_to_end(base_k, base_v, new_k, new_v, known_k, known_v, n_cells: int):
    """Each cell's keys and values: base, known, new. Each [cell, kv_head, key, d_head]."""
    parts_k = [base_k[None].expand(n_cells, -1, -1, -1)] + ([known_k] if known_k is not None else []) + [new_k]
    parts_v = [base_v[None].expand(n_cells, -1, -1, -1)] + ([known_v] if known_v is not None else []) + [new_v]
    return torch.cat(parts_k, dim=2), torch.cat(parts_v, dim=2)


def _attend_fused(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask) -> torch.Tensor:
    n_cells, _, width, d = q.shape
    keys, values = _laid_end_to_end(base_k, base_v, new_k, new_v, known_k, known_v, n_cells)
    out = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask[:, None],
                                         scale=ad.scaling, enable_gqa=ad.n_heads != ad.n_kv_heads)
    return out.permute(0, 2, 1, 3).reshape(n_cells, width, ad.n_heads * d)  # [cell, row, head * d_head]


def _attend_split(ad, q, base_k, base_v, new_k, new_v, known_k, known_v, mask) -> torch.Tensor:
    n_cells, _, width, d = q.shape
    kv, group, n_base = ad.n_kv_heads, ad.n_heads // ad.n_kv_heads, base_k.shape[1]
    qg = q.reshape(n_cells, kv, group, width, d)  # [cell, kv_head, g, row, d]
    flat = qg.permute(1, 0, 2, 3, 4).reshape(kv, -1, d)  # [kv_head, cell*g*row, d]
    base_scores = torch.bmm(flat, base_k.transpose(1, 2).to(q.dtype))  # one product for every cell
    parts = [base_scores.view(kv, n_cells, group, width, n_base).permute(1, 0, 2, 3, 4)]
    if known_k is not None:
        parts.append(torch.einsum("ckgrd,ckjd->ckgrj", qg, known_k.to(q.dtype)))
    parts.append(torch.einsum("ckgrd,ckjd->ckgrj", qg, new_k.to(q.dtype)))
    scores = (torch.cat(parts, dim=-1).float() * ad.scaling).masked_fill(~mask[:, None, None], float("-inf"))
    probs = scores.softmax(-1).to(q.dtype)  # [cell, kv_head, g, row, key]
    p_base = probs[..., :n_base].permute(1, 0, 2, 3, 4).reshape(kv, -1, n_base)
    out = torch.bmm(p_base, base_v.to(q.dtype)).view(kv, n_cells, group, width, d).permute(1, 0, 2, 3, 4)
    n_known = 0 if known_k is None else known_k.shape[2]
    if known_k is not None:
        out = out + torch.einsum("ckgrj,ckjd->ckgrd", probs[..., n_base:n_base + n_known], known_v.to(q.dtype))
    out = out + torch.einsum("ckgrj,ckjd->ckgrd", probs[..., n_base + n_known:], new_v.to(q.dtype))
    return out.reshape(n_cells, ad.n_heads, width, d).permute(0, 2, 1, 3).reshape(n_cells, width, ad.n_heads * d)
