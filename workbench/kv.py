"""KV caches: the container, the dense prefill and the splice of isolated passage caches.

Keys are stored after RoPE, as HF caches hold them; deviation metrics compare post-RoPE keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.batching import DEFAULT_MAX_BYTES, pack_sizes
from workbench.errors import WorkbenchError
from workbench.layout import Layout
from workbench.models import LoadedModel


@dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer for positions [0, n_positions). Never mutated in place."""

    keys: torch.Tensor  # [layer, kv_head, pos, d_head], post-RoPE
    values: torch.Tensor  # [layer, kv_head, pos, d_head]

    @property
    def n_layers(self) -> int:
        return self.keys.shape[0]

    @property
    def n_positions(self) -> int:
        return self.keys.shape[2]

    def clone(self) -> KVCache:
        return KVCache(self.keys.clone(), self.values.clone())

    def to_hf(self):
        """A fresh full-length HF cache over these tensors (it grows by concatenation, so ours stay
        intact; see `hf_cache`)."""
        return hf_cache([(self.keys[l][None], self.values[l][None]) for l in range(self.n_layers)])

    @classmethod
    def from_hf(cls, cache) -> KVCache:
        """Stack a batch-1 HF cache's layers."""
        keys = torch.stack([layer.keys[0] for layer in cache.layers])
        values = torch.stack([layer.values[0] for layer in cache.layers])
        return cls(keys, values)

    def slice(self, start: int, end: int) -> KVCache:
        return KVCache(self.keys[:, :, start:end], self.values[:, :, start:end])

    @staticmethod
    def cat(parts: list[KVCache]) -> KVCache:
        return KVCache(torch.cat([p.keys for p in parts], dim=2), torch.cat([p.values for p in parts], dim=2))

    def place(self, positions, keys: torch.Tensor | None = None, values: torch.Tensor | None = None) -> KVCache:
        """A copy with rows written at `positions` (absolute, [row]) of every layer: `keys` and
        `values` ([layer, kv_head, row, d_head]; None keeps this cache's). Grown, with zero rows,
        when the positions pass its end. The one way rows go into a cache."""
        pos = torch.as_tensor(positions, dtype=torch.long).to(self.keys.device)
        n = max(self.n_positions, int(pos.max()) + 1 if pos.numel() else 0)
        grown = (self.n_layers, self.keys.shape[1], n, self.keys.shape[3])
        new_keys, new_values = self.keys.new_zeros(grown), self.values.new_zeros(grown)
        new_keys[:, :, : self.n_positions], new_values[:, :, : self.n_positions] = self.keys, self.values
        if keys is not None:
            new_keys[:, :, pos] = keys.to(new_keys.device, new_keys.dtype)
        if values is not None:
            new_values[:, :, pos] = values.to(new_values.device, new_values.dtype)
        return KVCache(new_keys, new_values)

    def with_rows(self, source: KVCache, positions, keys: bool = True, values: bool = True) -> KVCache:
        """A copy with `source`'s rows at `positions` (absolute, [row]) at every layer: its K and V
        rows, or only its keys or only its values."""
        pos = torch.as_tensor(positions, dtype=torch.long).to(source.keys.device)
        return self.place(pos, source.keys[:, :, pos] if keys else None, source.values[:, :, pos] if values else None)

    def moved(self, adapter, delta: int) -> KVCache:
        """These rows `delta` positions on: keys by a delta rotation (`FamilyAdapter.rerotate`),
        values as they are (they do not depend on position)."""
        return KVCache(adapter.rerotate(self.keys, delta), self.values)


def assemble(adapter, parts: list[tuple[KVCache, int]]) -> KVCache:
    """Caches laid end to end, each (cache, delta) moved `delta` positions first (`KVCache.moved`)."""
    return KVCache.cat([cache.moved(adapter, delta) for cache, delta in parts])


def hf_cache(layers=None):
    """An HF DynamicCache whose every layer keeps all its rows (`layers`: per layer (keys, values)
    `[batch, kv_head, pos, d_head]`, or None for an empty one).

    Built without the model's config on purpose: with it, transformers gives sliding-window layers
    (Gemma 3) a cache that drops rows older than the window, and the workbench's caches hold every
    position of every layer. The model's own masks still apply each layer's window by position.
    """
    from transformers import DynamicCache

    return DynamicCache(layers) if layers else DynamicCache()


@torch.inference_mode()
def prefill(model: LoadedModel, ids: torch.Tensor, past: KVCache | None = None) -> KVCache:
    """Run `ids` ([pos]) through the HF model after `past`; return the cache of past + ids."""
    ids = ids.to(model.device)[None]
    out = model.hf(input_ids=ids, cache=past.to_hf() if past is not None else hf_cache(), use_cache=True)
    return KVCache.from_hf(out.cache)


def kv_bytes_per_position(model: LoadedModel) -> int:
    """Bytes one cached position holds: K and V over every layer and KV head, in the model's dtype."""
    ad = model.adapter
    return ad.n_layers * ad.n_kv_heads * ad.head_dim * 2 * model.dtype.itemsize


@torch.inference_mode()
def prefill_many(model: LoadedModel, ids: list[torch.Tensor], past: KVCache | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> list[KVCache]:
    """`prefill(model, ids_i, past)` for each i, in the input's order, run as right-padded batches
    of similar length (causal attention keeps the padding out of every real row) whose caches
    (past expanded per row, plus the padded ids) fit in `max_bytes`; each covers past + ids_i."""
    base = 0 if past is None else past.n_positions
    per_position = kv_bytes_per_position(model)
    sizes = [len(x) for x in ids]
    groups = pack_sizes(sizes, lambda members: len(members) * (base + sizes[members[-1]]) * per_position <= max_bytes)
    out: list[KVCache | None] = [None] * len(ids)
    for members in groups:
        group = [ids[i] for i in members]
        width = max(len(x) for x in group)
        rows = torch.stack([F.pad(x, (0, width - len(x))) for x in group]).to(model.device)  # [B, width]
        cache = hf_cache()
        if past is not None:
            cache = hf_cache([(past.keys[l][None].expand(len(group), -1, -1, -1).contiguous(),
                               past.values[l][None].expand(len(group), -1, -1, -1).contiguous())
                              for l in range(past.n_layers)])
        result = model.hf(input_ids=rows, cache=cache, use_cache=True, logits_to_keep=1).cache
        keys = torch.stack([layer.keys for layer in result.layers])  # [layer, B, kv_head, pos, d_head]
        values = torch.stack([layer.values for layer in result.layers])
        for b, (i, x) in enumerate(zip(members, group)):
            out[i] = KVCache(keys[:, b, :, :base + len(x)].clone(), values[:, b, :, :base + len(x)].clone())
    return out


def sender_cache(model: LoadedModel, prefix: KVCache, ids: torch.Tensor) -> KVCache:
    """A sender's cache of one passage ([pos] ids) prefilled after the shared prefix: its rows only,
    at the sender's positions [prefix_len, prefix_len + len(ids))."""
    start = prefix.n_positions
    return prefill(model, ids, past=prefix).slice(start, start + len(ids))


def dense_cache(model: LoadedModel, layout: Layout) -> KVCache:
    """The reference: one prefill of the identical ids, over the handed-off span [0, suffix_start)."""
    return prefill(model, layout.ids[: layout.suffix_start])


REROTATIONS = ("delta", "exact")


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
        with ad.record_attention_inputs() as inputs:  # per layer [len, hidden]
            sent = sender_cache(model, prefix, layout.ids[seg.start:seg.end])
        receiver = torch.arange(seg.start, seg.end, device=model.device)  # [len]
        with torch.inference_mode():
            exact = torch.stack([ad.rotated_qkv(l, inputs[l][0], receiver)[1].transpose(0, 1)
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


def relative_error(cache: KVCache, reference: KVCache) -> dict[str, torch.Tensor]:
    """Per-layer relative L2 error ||cache - reference|| / ||reference|| of K and V. Each [layer]."""
    def rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = (a.float() - b.float()).flatten(1).norm(dim=1)
        return diff / b.float().flatten(1).norm(dim=1).clamp_min(1e-12)
    return {"k": rel(cache.keys, reference.keys), "v": rel(cache.values, reference.values)}
