"""The prefills and the splice, through the engine's one forward entry (`repair.recompute_rows`).

    prefill(model, ids)                  the cache of ids [pos]: rows 0..len-1 computed by the engine
    prefill(model, ids, past=prefix)     rows past the prefix's end, over it
    prefill_many(model, [ids_i], past)   the same for many, batched as engine cells (`engine.cells`)
    splice(model, layout, "delta")       each passage prefilled after the prefix, moved, concatenated
    dense_cache(model, layout)           the reference: one prefill of the identical ids

A prefill is the repair of rows past a cache's end: their queries attend over the cache and each
other under the absolute causal mask (and each layer's window), bit-identical to HF's forward on the
CPU in fp32 (tests/unit/test_splice_module.py). The exact re-rotation reads each sender's pre-RoPE
keys at the pass's `hook_k` / `hook_k_normed` points. Keys are stored after RoPE (`kv.KVCache`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.batching import DEFAULT_MAX_BYTES
from workbench.engine.cells import Cell, materialize, run_cells
from workbench.engine.layers import rotate
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.layout import Layout
from workbench.models import LoadedModel
from workbench.repair import recompute_rows

REROTATIONS = ("delta", "exact")


def empty_cache(model: LoadedModel) -> KVCache:
    """A cache of no positions in the model's dtype and device: [layer, kv_head, 0, d_head]."""
    ad = model.adapter
    shape = (ad.n_layers, ad.n_kv_heads, 0, ad.head_dim)
    return KVCache(torch.zeros(shape, dtype=model.dtype, device=model.device),
                   torch.zeros(shape, dtype=model.dtype, device=model.device))


def _checked_ids(ids, what: str = "ids") -> torch.Tensor:
    ids = torch.as_tensor(ids)
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise WorkbenchError(f"{what}: expected a 1-D tensor of token ids, got {ids.dtype} of shape {tuple(ids.shape)}")
    return ids.long()


def prefill(model: LoadedModel, ids: torch.Tensor, past: KVCache | None = None, hooks=None) -> KVCache:
    """The cache of past + ids: `ids` ([pos]) run through the engine at positions past `past`'s end,
    attending over it. `hooks` ({name: fn} or [(name or filter, fn)], `engine.hooks`) see the rows
    as one cell."""
    ids = _checked_ids(ids)
    past = empty_cache(model) if past is None else past
    start = past.n_positions
    positions = torch.arange(start, start + len(ids))  # [pos]
    context_ids = torch.cat([ids.new_zeros(start), ids])  # recompute_rows reads ids by absolute position
    cache, _ = recompute_rows(model, past, context_ids, positions, hooks=hooks)
    return cache


def prefill_many(model: LoadedModel, ids: list[torch.Tensor], past: KVCache | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> list[KVCache]:
    """`prefill(model, ids_i, past)` for each i, in the input's order, as engine cells over `past`
    (each the rows past its end; grouped under `max_bytes`, `engine.cells.run_cells`): equal to the
    one-by-one prefills up to float rounding. Each covers past + ids_i."""
    rows = [_checked_ids(x, f"ids[{i}]") for i, x in enumerate(ids)]
    base = empty_cache(model) if past is None else past
    start = base.n_positions
    cells = [Cell(torch.arange(start, start + len(x)), x) for x in rows]
    return [materialize(base, out) for out in run_cells(model, base, cells, max_bytes=max_bytes)]


def sender_cache(model: LoadedModel, prefix: KVCache, ids: torch.Tensor, hooks=None) -> KVCache:
    """A sender's cache of one passage ([pos] ids) prefilled after the shared prefix: its rows only,
    at the sender's positions [prefix_len, prefix_len + len(ids))."""
    start = prefix.n_positions
    return prefill(model, ids, past=prefix, hooks=hooks).slice(start, start + len(ids))


def dense_cache(model: LoadedModel, layout: Layout) -> KVCache:
    """The reference: one prefill of the identical ids, over the handed-off span [0, suffix_start)."""
    return prefill(model, layout.ids[: layout.suffix_start])


@dataclass(frozen=True)
class Splice:
    """The receiver's spliced cache, how its keys were moved, and the RoPE rounding floor.

    rope_floor: [layer] relative L2 ||K_delta - K_exact|| / ||K_exact|| over the moved passage
    rows: how far the delta rotation R(d)R(p) lands from the dense path's own R(p + d) by float
    rounding alone. Splice error below it is rounding, not lost attention.
    """

    cache: KVCache
    rerotation: str  # "delta" (what reuse systems do) or "exact"
    rope_floor: torch.Tensor  # [layer]


def _pre_rope_keys(model: LoadedModel, store: dict[int, torch.Tensor]) -> dict:
    """A read-only hook per layer keeping the keys before RoPE (after the q/k norm where the family
    has one) in `store`: {layer: [1, row, kv_head, d_head]}."""
    point = "attn.hook_k_normed" if model.adapter.has_qk_norm else "attn.hook_k"

    def keep(x: torch.Tensor, hook) -> None:
        store[hook.layer()] = x

    keep.reads_only = True
    return {f"blocks.{l}.{point}": keep for l in range(model.adapter.n_layers)}


def splice(model: LoadedModel, layout: Layout, rerotation: str = "delta") -> Splice:
    """Prefill each passage in isolation after the shared prefix, move its keys, concatenate.

    Passage i is computed by its sender at positions [P, P + len_i) (P = prefix length) and
    moved to its receiver positions [start_i, end_i); values are copied. `rerotation`:
    "delta" rotates the cached post-RoPE keys by R(start_i - P), as real reuse systems do;
    "exact" applies the dense path's own RoPE at the receiver positions to the sender's
    pre-RoPE keys, so layer 0 equals dense bit for bit. Both are computed to report the floor.
    """
    if rerotation not in REROTATIONS:
        raise WorkbenchError(f"unknown re-rotation {rerotation!r}; use one of {', '.join(REROTATIONS)}")
    ad = model.adapter
    prefix_len = layout.prefix.end
    prefix = prefill(model, layout.ids[:prefix_len])
    parts, diff_sq, ref_sq = [prefix], torch.zeros(ad.n_layers), torch.zeros(ad.n_layers)
    for seg in layout.passages:
        pre_rope: dict[int, torch.Tensor] = {}
        sent = sender_cache(model, prefix, layout.ids[seg.start:seg.end], hooks=_pre_rope_keys(model, pre_rope))
        receiver = torch.arange(seg.start, seg.end, device=model.device)  # [len]
        with torch.inference_mode():
            exact = torch.stack([rotate(ad, pre_rope[l][0], receiver, l).transpose(0, 1)
                                 for l in range(ad.n_layers)])  # [layer, kv_head, len, d_head]
        delta = ad.rerotate(sent.keys, seg.start - prefix_len)
        diff_sq += (delta.float() - exact.float()).flatten(1).square().sum(1).cpu()
        ref_sq += exact.float().flatten(1).square().sum(1).cpu()
        parts.append(KVCache(delta if rerotation == "delta" else exact.to(sent.keys.dtype), sent.values))
    floor = diff_sq.sqrt() / ref_sq.sqrt().clamp_min(1e-30)
    return Splice(KVCache.cat(parts), rerotation, floor)


def splice_cache(model: LoadedModel, layout: Layout, rerotation: str = "delta") -> KVCache:
    """The spliced cache alone (see `splice`)."""
    return splice(model, layout, rerotation).cache
