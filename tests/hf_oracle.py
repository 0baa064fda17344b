"""HF's modules as the tests' oracle: what HF's forward feeds each attention layer, recorded by
forward pre-hooks (no workbench pass runs HF's forward; the engine reads the same rows at its
hook points)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def record_attention_inputs(adapter) -> Iterator[list[list[torch.Tensor]]]:
    """Record each layer's attention input (the layer-normed hidden rows) during the HF forwards run
    inside the block. Yields a list per layer of `[row, hidden]` tensors, one per forward of batch 1."""
    recorded: list[list[torch.Tensor]] = [[] for _ in range(adapter.n_layers)]

    def hook(layer: int):
        def pre_hook(module, args, kwargs):
            recorded[layer].append((args[0] if args else kwargs["hidden_states"])[0])  # [seq, hidden]
        return pre_hook

    handles = [layer.self_attn.register_forward_pre_hook(hook(l), with_kwargs=True)
               for l, layer in enumerate(adapter.layers)]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()
