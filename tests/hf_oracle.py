"""HF's modules as the tests' oracle: what HF's forward feeds each attention layer, recorded by
forward pre-hooks, and HF's greedy decode steps (no workbench pass runs HF's forward; the engine
reads the same rows at its hook points and steps its own `Decoder`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from workbench.engine.decode import Answer, StopRule, Walk, decode_greedy


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


class HFSteps:
    """The decode loop's stepper through HF's modules over an HF cache of one sequence (extended in
    place, kept as `.cache`): the steps `workbench.decode` took before the engine's."""

    def __init__(self, model, cache):
        self.model, self.cache = model, cache

    def __call__(self, keep: list[int], tokens: list[int]) -> torch.Tensor:
        ids = torch.tensor(tokens, device=self.model.device)[:, None]  # [1, 1]
        out = self.model.hf(input_ids=ids, cache=self.cache, use_cache=True)
        self.cache = out.cache
        return out.logits[:, -1]  # [1, vocab]


@torch.inference_mode()
def hf_continue_greedy(model, logits: torch.Tensor, cache, max_new_tokens: int = 24, stop_at_newline: bool = True,
                       observe=None) -> Answer:
    """Greedy decoding on from HF's prefill (its last `logits` [vocab] and its HF `cache`, extended)
    through HF's steps, under the workbench's stop rule: the oracle of `decode.continue_greedy`.
    `observe` as `engine.decode.decode_greedy`'s."""
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    walk = Walk()
    if max_new_tokens >= 1:
        decode_greedy(rule, [walk], HFSteps(model, cache), logits[None], observe)
    return rule.answer(walk)
