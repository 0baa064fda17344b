"""The logit lens on every answer token: per layer, what the residual stream would predict if the
model stopped there, under dense, the splice and a repaired cell.

The suffix and dense's answer, teacher-forced (each cache reads the same answer so far), run over
each cache (`repair.recompute_rows`: the cell's repaired rows first; read-only hooks at
`hook_resid_post`); the row before each answer token predicts it. Per cache, layer and answer
token (`step`), through the final norm and the LM head (`FamilyAdapter.logits`, a soft-cap
included):

    target, target_token            dense's answer token there (its id and text)
    p_target, rank                  its probability and rank (0: the top token)
    top_ids, top_tokens, top_probs  the k most probable tokens, most probable first

    table = logit_lens(ctx, d.answers.dense.token_ids, rows=selected_rows(d, "bcr", 0.2))

The last layer's lens is the model's own output distribution.
"""

from __future__ import annotations

import pandas as pd
import torch

from workbench.context import Context
from workbench.engine.masks import check_positions
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.repair import recompute_rows

COLUMNS = ("cache", "layer", "step", "target", "target_token", "p_target", "rank", "top_ids", "top_tokens",
           "top_probs")


def logit_lens(ctx: Context, answer_ids, rows=None, context: torch.Tensor | None = None, k: int = 5,
               max_steps: int = 32) -> pd.DataFrame:
    """The table of the module docstring for dense's answer `answer_ids` (its first `max_steps`
    tokens) under dense, the splice and the cell repairing `rows` ([row] positions; None: no such
    cell) over the splice (`context`: its context mask, as `repair` takes)."""
    answer = answer_tokens(ctx, answer_ids, max_steps, "dense's answer is empty: the logit lens has no answer "
                                                        "token to follow")
    vocab = ctx.model.adapter.lm_head.weight.shape[0]
    if k < 1:
        raise WorkbenchError(f"k (the top tokens kept) must be at least 1, got {k}")
    none = torch.empty(0, dtype=torch.long)
    cells = [("dense", ctx.reference("the logit lens"), none, None), ("splice", ctx.spliced, none, None)]
    if rows is not None:
        cells.append(("repaired", ctx.spliced, check_positions(rows, ctx.layout.suffix_start, "rows"), context))
    decoded: dict[int, str] = {}  # each token's text, decoded once (the top tokens repeat across layers)

    def text(t: int) -> str:
        if t not in decoded:
            decoded[t] = ctx.model.tokenizer.decode([t])
        return decoded[t]

    texts = [text(t) for t in answer]
    target = torch.tensor(answer)
    out = []
    with torch.inference_mode():
        for cache, base, cell, mask in cells:
            h = torch.stack(_answer_residuals(ctx, base, cell, answer, mask))  # [layer, step, hidden]
            # one product for every layer: the LM head's weights read once, not once a layer
            every = ctx.model.adapter.logits(h.flatten(0, 1).to(ctx.spliced.keys.dtype)).float()
            for layer, logits in enumerate(every.unflatten(0, h.shape[:2])):  # logits: [step, vocab]
                logp = logits.log_softmax(-1)
                picked = logp.gather(1, target[:, None].to(logp.device))  # [step, 1]
                ranks = (logp > picked).sum(-1).tolist()
                top = logp.topk(min(k, vocab), dim=-1)
                # each layer's numbers read back once (not a device sync per step)
                p_target, top_ids = picked[:, 0].exp().tolist(), top.indices.tolist()
                top_probs = top.values.exp().tolist()
                for step, t in enumerate(answer):
                    out.append((cache, layer, step, t, texts[step], p_target[step], ranks[step], top_ids[step],
                                [text(i) for i in top_ids[step]], top_probs[step]))
    return pd.DataFrame(out, columns=COLUMNS)


def answer_tokens(ctx: Context, answer_ids, max_steps: int, empty: str) -> list[int]:
    """`answer_ids`' first `max_steps` token ids, refused (`empty` as the message) where there is none,
    or where one lies outside the model's vocabulary."""
    answer = [int(t) for t in answer_ids][:max_steps]
    vocab = ctx.model.adapter.lm_head.weight.shape[0]
    if not answer:
        raise WorkbenchError(empty)
    if any(not 0 <= t < vocab for t in answer):
        raise WorkbenchError(f"answer token ids must lie in [0, {vocab}), got {answer[:8]}")
    return answer


def answer_pass(ctx: Context, answer: list[int], cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, positions) of the pass that teacher-forces `answer` over a cache: the context's ids and the
    answer's but its last ([n + step - 1]); `cell`'s rows, then the suffix and the answer's rows. Row
    n - 1 + i writes answer token i."""
    n = ctx.layout.n_tokens
    ids = torch.cat([ctx.layout.ids, torch.tensor(answer[:-1], dtype=torch.long)])
    return ids, torch.cat([cell, torch.arange(ctx.layout.suffix_start, n + len(answer) - 1)])


def _answer_residuals(ctx: Context, base: KVCache, cell: torch.Tensor, answer: list[int],
                      context: torch.Tensor | None) -> list[torch.Tensor]:
    """The residual after every layer at the rows that predict each answer token (the suffix's last
    row, then each answer token but the last), `cell` recomputed first: [layer] of [step, hidden]."""
    n, n_layers = ctx.layout.n_tokens, ctx.model.adapter.n_layers
    ids, positions = answer_pass(ctx, answer, cell)  # [n + step - 1], [row]
    found: dict[int, torch.Tensor] = {}

    def read(x: torch.Tensor, hook) -> None:  # x: [1, row, hidden]
        found[hook.layer()] = x[0, hook.positions[0] >= n - 1].float()  # [step, hidden]

    read.reads_only = True  # engine.hooks: a reader, so no finite check after it
    hooks = {f"blocks.{l}.hook_resid_post": read for l in range(n_layers)}
    recompute_rows(ctx.model, base, ids, positions, context=context, hooks=hooks)
    return [found[l] for l in range(n_layers)]
