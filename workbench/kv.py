"""KV caches: the container (below the engine). The prefills and the splice that fill it run
through the engine, above it (`workbench.splice`).

Keys are stored after RoPE, as HF caches hold them; deviation metrics compare post-RoPE keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


def kv_bytes_per_position(model: LoadedModel) -> int:
    """Bytes one cached position holds: K and V over every layer and KV head, in the model's dtype."""
    ad = model.adapter
    return ad.n_layers * ad.n_kv_heads * ad.head_dim * 2 * model.dtype.itemsize


def relative_error(cache: KVCache, reference: KVCache) -> dict[str, torch.Tensor]:
    """Per-layer relative L2 error ||cache - reference|| / ||reference|| of K and V. Each [layer]."""
    def rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = (a.float() - b.float()).flatten(1).norm(dim=1)
        return diff / b.float().flatten(1).norm(dim=1).clamp_min(1e-12)
    return {"k": rel(cache.keys, reference.keys), "v": rel(cache.values, reference.values)}
