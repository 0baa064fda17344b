"""Attention signals: how much the receiver's queries attend to each handed-off row.

`draft_attention` is BCR's draft rule (§3, App. B Algorithm 2): prefill the question suffix
over the cache, draft k tokens greedily, keep the last k query rows (the suffix's final
token and the first k-1 generated ones), and score row j of the handed-off cache by

    a_j = sum_{l > 1} mean_{t, h} softmax(Q^l_{t,h} K^l_h^T / sqrt(d_head))_j

with grouped-query keys expanded to query heads. The paper counts layers from 1, so "l > 1"
skips the first layer: with our 0-indexed layers the sum runs over layers 1..L-1.
`question_attention` is the same score from every question-suffix query, without drafting.
`query_relevance` is ProphetKV's per-layer relevance: the question-suffix rows' attention
renormalized over the handed-off rows alone (a softmax over the cached keys [0, n)), mean over
rows and heads, at every layer (layer 0 included).

Both read one `suffix_pass`: a single prefill of the suffix over the cache that records every
query row and then drafts. The pass also keeps the cache and logits at the end of the suffix, so
the cache's own greedy answer (CADENCE's decision) continues from it instead of prefilling the
suffix a third time: a Diagnosis's `SignalSet` runs the suffix over the splice once.

The suffix and each drafted token fed back run through the engine (`decode.question_pass`), under
the caller's hooks (`engine.hooks`: an ablated head changes the queries, the keys, the draft and
the answer): each row's post-RoPE query is read at `hook_rot_q` of the pass that computes it, the
keys are the engine cache's after the last step (post-RoPE). Without hooks the suffix pass equals
HF's forward bit for bit and so does the one-row draft step on the Llama family and Qwen3; on Gemma 3 the
engine's one-row step rounds its sliding-window layers differently from HF's (about 1e-6 in the
logits of the tiny test model). The draft is discarded: the input cache is never changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.context import Context
from workbench.decode import Answer, continue_greedy, question_logits, question_pass
from workbench.engine.attention import attention_probs, grouped_scores
from workbench.engine.decode import StopRule, Walk, decode_greedy
from workbench.engine.hooks import Hooks, with_reads
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


@dataclass(frozen=True)
class SuffixPass:
    """One prefill of the question suffix over a cache, shared by the question attention, the
    draft attention and the cache's greedy answer."""

    question: AttentionScores  # every suffix query row
    draft: AttentionScores | None  # the last suffix row and the first k-1 drafted tokens; None without a draft
    relevance: AttentionScores  # every suffix query row, renormalized over the handed-off rows; all layers
    prefilled: KVCache  # [layer, kv_head, n + suffix, d_head]: the cache at the end of the suffix
    last_logits: torch.Tensor  # [vocab]: the suffix's last position
    hooks: Hooks | None = None  # the hooks the pass ran under

    def answer(self, model: LoadedModel, max_new_tokens: int = 24) -> Answer:
        """The greedy answer over the input cache, as `decode.greedy_answer` gives it under the same
        hooks, decoded on from the end of the suffix."""
        return continue_greedy(model, self.last_logits, self.prefilled, max_new_tokens, hooks=self.hooks)


def draft_attention(ctx: Context, cache: KVCache | None = None, k: int = 2, hooks=None) -> AttentionScores:
    """BCR's draft attention over `cache` (default: the splice) from the last k query rows, under
    `hooks` (`suffix_pass`). Stops drafting early on an end-of-turn token and keeps the rows it has.
    """
    return suffix_pass(ctx, cache, k, hooks).draft


def question_attention(ctx: Context, cache: KVCache | None = None, hooks=None) -> AttentionScores:
    """Attention from every question-suffix query over `cache` (default: the splice); no draft."""
    return suffix_pass(ctx, cache, None, hooks).question


def attention_rows(q: torch.Tensor, keys: torch.Tensor, query_positions: torch.Tensor,
                   scaling: float, window: int | None = None) -> torch.Tensor:
    """Causal softmax attention of one layer, fp32 (`engine.attention.grouped_scores`, then `attention_probs`).

    q: [row, head, d_head] (post-RoPE); keys: [kv_head, key, d_head] (post-RoPE, key i at
    position i); query_positions: [row]. Query head h reads kv head h // (head / kv_head).
    Returns [head, row, key]; each row sums to 1 over keys at positions <= its own (and, for a
    sliding-window layer, > its own minus `window`).
    """
    key_pos = torch.arange(keys.shape[1], device=keys.device)
    visible = visible_keys(query_positions.to(keys.device), key_pos, window)  # [row, key]
    scores = grouped_scores(q.float().transpose(0, 1), keys.float())  # [head, row, key]
    return attention_probs(scores, visible, scaling)


def suffix_pass(ctx: Context, cache: KVCache | None = None, k: int | None = 2, hooks=None) -> SuffixPass:
    """Prefill the question suffix over `cache` (default: the splice) recording every query row,
    draft k tokens (k=None: none), and score the cache's rows from the suffix and the draft.
    `hooks` ({name: fn} or [(name or filter, fn)], `engine.hooks`) run on the suffix pass and on
    each drafted token's pass (a cell of one), and on the answer decoded on from it (`SuffixPass.answer`)."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise WorkbenchError(f"k (draft query rows) must be an integer >= 1, got {k!r}")
    hooks = Hooks.of(hooks, ctx.model.adapter)
    start = time.perf_counter()
    model = ctx.model
    cache = ctx.spliced if cache is None else cache
    n = cache.n_positions
    if n != ctx.layout.suffix_start:
        raise WorkbenchError(f"the cache covers {n} positions but the question suffix starts at "
                             f"{ctx.layout.suffix_start}; pass a cache of the handed-off span")
    rec = record_queries(model, cache, ctx.suffix_ids, k, hooks)
    n_suffix, n_rows = len(ctx.suffix_ids), rec.queries[0].shape[0]  # suffix rows, then one per drafted token fed back
    rows = {"question": range(0, n_suffix), "relevance": range(0, n_suffix),
            "draft": range(n_suffix - 1, n_rows)}  # recorded rows each reads
    per_layer = _attention_per_layer(model, rec, n, rows if k is not None else
                                     {name: r for name, r in rows.items() if name != "draft"})
    seconds = time.perf_counter() - start
    n_layers = model.adapter.n_layers

    def scores(name: str, draft_ids: tuple[int, ...], first_layer: int = 1) -> AttentionScores:
        return AttentionScores(per_layer=per_layer[name], draft_ids=draft_ids,
                               query_positions=tuple(n + r for r in rows[name]),
                               layers_summed=range(first_layer, n_layers), seconds=seconds)

    return SuffixPass(question=scores("question", ()),
                      draft=None if k is None else scores("draft", rec.draft_ids),
                      relevance=scores("relevance", (), first_layer=0),
                      prefilled=rec.prefilled, last_logits=rec.last_logits, hooks=hooks)


def _attention_per_layer(model: LoadedModel, rec: RecordedQueries, n: int,
                         rows: dict[str, range]) -> dict[str, torch.Tensor]:
    """For each named set of recorded query rows, the attention to the cache rows [0, n), mean over
    those rows and the heads: {name: [layer, pos]}, fp32 on cpu. Keys are the engine cache's after
    the last step; a row sees only keys at or before its own position. "relevance" renormalizes each
    row's attention over the cache rows [0, n) before the mean (a row that sees none of them adds 0)."""
    ad = model.adapter
    out = {name: torch.empty(ad.n_layers, n, dtype=torch.float32) for name in rows}  # [layer, pos]
    positions = torch.arange(n, n + rec.queries[0].shape[0])  # [row]: absolute positions
    with torch.inference_mode():
        for l in range(ad.n_layers):
            probs = attention_rows(rec.queries[l], rec.keys.keys[l], positions, ad.scaling,
                                   ad.windows[l])  # [head, row, key]
            for name, r in rows.items():
                cached = probs[:, r.start:r.stop, :n]  # [head, row, pos]
                if name == "relevance":
                    cached = cached / cached.sum(-1, keepdim=True).clamp_min(torch.finfo(cached.dtype).tiny)
                out[name][l] = cached.mean(dim=(0, 1)).cpu()
    return out


@dataclass(frozen=True)
class RecordedQueries:
    """A suffix prefill and its draft, with every query row's post-RoPE query."""

    queries: list[torch.Tensor]  # per layer [row, head, d_head] (hook_rot_q): the suffix rows, then one per drafted token fed back
    keys: KVCache  # [layer, kv_head, n + row, d_head]: the cache after the last step (keys of every row recorded)
    draft_ids: tuple[int, ...]  # the greedy tokens drafted (stop token excluded)
    prefilled: KVCache  # [layer, kv_head, n + suffix, d_head]: the cache at the end of the suffix
    last_logits: torch.Tensor  # [vocab]: the suffix's last position


def record_queries(model: LoadedModel, cache: KVCache, suffix: torch.Tensor, k: int | None,
                   hooks=None) -> RecordedQueries:
    """Run `suffix` over `cache` through the engine, then k-1 greedy steps (k=None: none), each a
    one-row engine pass, under `hooks`; record each layer's post-RoPE queries (`hook_rot_q`, after
    the caller's hooks) of every row run."""
    ad = model.adapter
    hooks = Hooks.of(hooks, ad)
    recorded: list[list[torch.Tensor]] = [[] for _ in range(ad.n_layers)]

    def keep(q: torch.Tensor, hook) -> None:  # q: [1, row, head, d_head]
        recorded[hook.layer()].append(q[0].detach())

    keep.reads_only = True
    passes = with_reads(hooks, {f"blocks.{l}.attn.hook_rot_q": keep for l in range(ad.n_layers)})  # `.ctx` kept
    prefilled, h = question_pass(model, cache, suffix, passes)
    last_logits = question_logits(model, h[-1:], torch.tensor([prefilled.n_positions - 1]), hooks)[0]  # [vocab]
    walk, drafted = Walk(), prefilled

    def advance(keep_rows: list[int], tokens: list[int]) -> torch.Tensor:
        nonlocal drafted
        drafted, h = question_pass(model, drafted, torch.tensor(tokens), passes)
        return question_logits(model, h, torch.tensor([drafted.n_positions - 1]), hooks)  # [1, vocab]

    if k:  # the last drafted token is kept, never fed back
        decode_greedy(StopRule.of(model, k, stop_at_newline=False), [walk], advance, last_logits[None])
    queries = [torch.cat(rows) for rows in recorded]  # per layer [row, head, d_head]
    return RecordedQueries(queries, drafted, tuple(walk.generated), prefilled, last_logits)
