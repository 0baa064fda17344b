"""Attention signals: how much the receiver's queries attend to each handed-off row.

`draft_attention` is BCR's draft rule (§3, App. B Algorithm 2): prefill the question suffix
over the cache, draft k tokens greedily, keep the last k query rows (the suffix's final
token and the first k-1 generated ones), and score row j of the handed-off cache by

    a_j = sum_{l > 1} mean_{t, h} softmax(Q^l_{t,h} K^l_h^T / sqrt(d_head))_j

with grouped-query keys expanded to query heads. The paper counts layers from 1, so "l > 1"
skips the first layer: with our 0-indexed layers the sum runs over layers 1..L-1.
`question_attention` is the same score from every question-suffix query, without drafting.

Queries are recorded by the family adapter's attention-input recorder (each layer's
attention input is already layer-normed), projected with the family adapter and rotated at their true
positions; keys are the post-RoPE keys of the HF cache after the last step. The draft is
discarded: the input cache is wrapped in a fresh DynamicCache and never changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.context import Context
from workbench.decode import stop_token_ids
from workbench.errors import WorkbenchError
from workbench.family import visible_keys
from workbench.kv import KVCache
from workbench.models import LoadedModel


@dataclass(frozen=True)
class AttentionScores:
    """Attention from a few receiver queries to the handed-off rows [0, n_positions)."""

    per_layer: torch.Tensor  # [layer, pos]: mean over query rows and heads, fp32
    draft_ids: tuple[int, ...]  # the first k greedy tokens (stop token excluded); () for the question
    query_positions: tuple[int, ...]  # absolute positions of the query rows used
    layers_summed: range  # layers that `scores` sums (1..L-1: the paper's l > 1)
    seconds: float

    @property
    def n_positions(self) -> int:
        return self.per_layer.shape[1]

    def scores(self, positions=None) -> torch.Tensor:
        """Sum over `layers_summed` of per_layer at `positions` (default: all rows). [n]"""
        summed = self.per_layer[self.layers_summed.start:self.layers_summed.stop].sum(0)  # [pos]
        return summed if positions is None else summed[torch.as_tensor(positions, dtype=torch.long)]


def draft_attention(ctx: Context, cache: KVCache | None = None, k: int = 2) -> AttentionScores:
    """BCR's draft attention over `cache` (default: the splice) from the last k query rows.

    Stops drafting early on an end-of-turn token and keeps the rows it has.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise WorkbenchError(f"k (draft query rows) must be an integer >= 1, got {k!r}")
    return _attention_scores(ctx, cache, k)


def question_attention(ctx: Context, cache: KVCache | None = None) -> AttentionScores:
    """Attention from every question-suffix query over `cache` (default: the splice); no draft."""
    return _attention_scores(ctx, cache, None)


def attention_rows(q: torch.Tensor, keys: torch.Tensor, query_positions: torch.Tensor,
                   scaling: float, window: int | None = None) -> torch.Tensor:
    """Causal softmax attention of one layer, fp32, keys expanded to query heads.

    q: [row, head, d_head] (post-RoPE); keys: [kv_head, key, d_head] (post-RoPE, key i at
    position i); query_positions: [row]. Query head h reads kv head h // (head / kv_head).
    Returns [head, row, key]; each row sums to 1 over keys at positions <= its own (and, for a
    sliding-window layer, > its own minus `window`).
    """
    group = q.shape[1] // keys.shape[0]
    k = keys.float().repeat_interleave(group, dim=0)  # [head, key, d_head]
    logits = torch.einsum("rhd,hkd->hrk", q.float(), k) * scaling  # [head, row, key]
    key_pos = torch.arange(keys.shape[1], device=keys.device)
    visible = visible_keys(query_positions.to(keys.device), key_pos, window)  # [row, key]
    return logits.masked_fill(~visible, float("-inf")).softmax(-1)


def _attention_scores(ctx: Context, cache: KVCache | None, k: int | None) -> AttentionScores:
    """Draft k tokens (k=None: question suffix only), recording queries; score the cache rows."""
    start = time.perf_counter()
    model = ctx.model
    cache = ctx.spliced if cache is None else cache
    n = cache.n_positions
    if n != ctx.layout.suffix_start:
        raise WorkbenchError(f"the cache covers {n} positions but the question suffix starts at "
                             f"{ctx.layout.suffix_start}; pass a cache of the handed-off span")
    suffix = ctx.suffix_ids
    hidden, hf_cache, draft_ids = record_queries(model, cache, suffix, k)
    first = n if k is None else n + len(suffix) - 1  # the suffix's first (or last) token
    query_pos = torch.arange(first, first + hidden[0].shape[0])  # [row]
    ad = model.adapter
    per_layer = torch.empty(ad.n_layers, n, dtype=torch.float32)  # [layer, pos]
    with torch.inference_mode():
        for l in range(ad.n_layers):
            q, _, _ = ad.project_qkv(l, hidden[l])  # [row, head, d_head]
            q = ad.rotate(q, query_pos, l)
            keys = hf_cache.layers[l].keys[0]  # [kv_head, key, d_head]
            probs = attention_rows(q, keys, query_pos, ad.scaling, ad.windows[l])  # [head, row, key]
            per_layer[l] = probs.mean(dim=(0, 1))[:n].cpu()
    return AttentionScores(per_layer=per_layer, draft_ids=draft_ids,
                           query_positions=tuple(query_pos.tolist()),
                           layers_summed=range(1, ad.n_layers),
                           seconds=time.perf_counter() - start)


@torch.inference_mode()
def record_queries(model: LoadedModel, cache: KVCache, suffix: torch.Tensor, k: int | None):
    """Prefill `suffix` over `cache`, then k-1 greedy steps, recording each layer's attention input.

    Returns (per layer the layer-normed hidden rows of the kept queries [row, hidden], the HF
    cache after the last step, the greedy ids). k=None keeps every suffix row and drafts nothing.
    """
    keep_all = k is None
    with model.adapter.record_attention_inputs(keep=None if keep_all else (lambda x: x[-1:])) as recorded:
        out = model.hf(input_ids=suffix.to(model.device)[None], cache=cache.to_hf(),
                       use_cache=True)
        draft_ids: list[int] = []
        if not keep_all:
            stops = stop_token_ids(model)
            for step in range(k):
                next_id = int(out.logits[0, -1].argmax())
                if next_id in stops:
                    break
                draft_ids.append(next_id)
                if step == k - 1:
                    break
                out = model.hf(input_ids=torch.tensor([[next_id]], device=model.device),
                               cache=out.cache, use_cache=True)
    hidden = [torch.cat(rows) for rows in recorded]  # per layer [row, hidden]
    return hidden, out.cache, tuple(draft_ids)
