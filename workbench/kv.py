"""KV caches: the container, the dense prefill and the splice of isolated passage caches.

Keys are stored after RoPE, as HF caches hold them; deviation metrics compare post-RoPE keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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

    def to_hf(self, config):
        """A fresh DynamicCache over these tensors (it grows by concatenation, so ours stay intact)."""
        from transformers import DynamicCache

        layers = [(self.keys[l][None], self.values[l][None]) for l in range(self.n_layers)]
        return DynamicCache(layers, config=config)

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


@torch.inference_mode()
def prefill(model: LoadedModel, ids: torch.Tensor, past: KVCache | None = None) -> KVCache:
    """Run `ids` ([pos]) through the HF model after `past`; return the cache of past + ids."""
    ids = ids.to(model.device)[None]
    hf_cache = past.to_hf(model.config) if past is not None else None
    out = model.hf(input_ids=ids, cache=hf_cache, use_cache=True)
    return KVCache.from_hf(out.cache)


def dense_cache(model: LoadedModel, layout: Layout) -> KVCache:
    """The reference: one prefill of the identical ids, over the handed-off span [0, suffix_start)."""
    return prefill(model, layout.ids[: layout.suffix_start])


def splice_cache(model: LoadedModel, layout: Layout) -> KVCache:
    """Prefill each passage in isolation after the shared prefix, re-rotate, concatenate.

    Passage i is computed by its sender at positions [P, P + len_i) (P = prefix length) and
    moved to its receiver positions [start_i, end_i) by a delta rotation of its keys; values
    are copied. Passage 1 sits at its sender's positions already (delta 0).
    """
    prefix_len = layout.prefix.end
    prefix = prefill(model, layout.ids[:prefix_len])
    parts = [prefix]
    for seg in layout.passages:
        sent = prefill(model, layout.ids[seg.start:seg.end], past=prefix).slice(prefix_len, prefix_len + len(seg))
        keys = model.adapter.rerotate(sent.keys, seg.start - prefix_len)
        parts.append(KVCache(keys, sent.values))
    return KVCache.cat(parts)


def relative_error(cache: KVCache, reference: KVCache) -> dict[str, torch.Tensor]:
    """Per-layer relative L2 error ||cache - reference|| / ||reference|| of K and V. Each [layer]."""
    def rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = (a.float() - b.float()).flatten(1).norm(dim=1)
        return diff / b.float().flatten(1).norm(dim=1).clamp_min(1e-12)
    return {"k": rel(cache.keys, reference.keys), "v": rel(cache.values, reference.values)}
