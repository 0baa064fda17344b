"""Where an answer looks while it is written: per layer and answer token, its attention mass on each
region of what it reads, under dense, the splice and a repaired cell.

The suffix and a given answer, teacher-forced (each cache reads the same answer so far), run over each
cache exactly as the logit lens runs them (`lens.answer_pass`; the cell's repaired rows first;
read-only hooks at `hook_pattern`, the written-out softmax); the row before each answer token (`step`)
is the one that writes it. Its attention, mean over heads, is summed over the key positions of each
region, named as `experiments.answer_sources` names where an answer's words come from:

    evidence        the gold evidence rows (`Layout.evidence`)
    prompt          the prefix and the suffix (system text, question, template)
    same_passage    the rest of the passages that hold evidence rows
    other_passages  the passages that hold none
    answer          the answer so far (0 at step 0)

so a repair whose answer recites the haystack's filler can be asked whether it also looks there while it
writes it. An example without evidence rows records NaN for `evidence` and `same_passage` and counts
every passage in `other_passages` (no zeros that would read as misses).

    table = answer_attention(ctx, answer_ids, rows=cell_rows(ctx, d, "cadence-grad", 0.2)[0])
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from workbench.context import Context
from workbench.diagnosis.lens import answer_pass, answer_tokens
from workbench.engine.masks import check_positions
from workbench.kv import KVCache
from workbench.repair import recompute_rows

REGIONS = ("evidence", "prompt", "same_passage", "other_passages", "answer")
COLUMNS = ("cache", "layer", "step", "token", *REGIONS)


def regions(ctx: Context, n_keys: int) -> dict[str, torch.Tensor | None]:
    """{region: bool [key]} over key positions 0..n_keys-1 (the context, then the answer); None for
    `evidence` and `same_passage` where the example has no evidence rows."""
    layout, n = ctx.layout, ctx.layout.n_tokens
    evidence = torch.zeros(n_keys, dtype=torch.bool)
    has = layout.evidence is not None and len(layout.evidence) > 0
    if has:
        evidence[layout.evidence] = True
    prompt, same, other = (torch.zeros(n_keys, dtype=torch.bool) for _ in range(3))
    for seg in layout.segments:
        if seg.kind != "passage":
            prompt[seg.start:seg.end] = True
        elif bool(evidence[seg.start:seg.end].any()):
            same[seg.start:seg.end] = ~evidence[seg.start:seg.end]
        else:
            other[seg.start:seg.end] = True
    answer = torch.arange(n_keys) >= n
    return {"evidence": evidence if has else None, "prompt": prompt, "same_passage": same if has else None,
            "other_passages": other, "answer": answer}


def answer_attention(ctx: Context, answer_ids, rows=None, context: torch.Tensor | None = None,
                     max_steps: int = 48) -> pd.DataFrame:
    """The table of the module docstring for the answer `answer_ids` (its first `max_steps` tokens:
    dense's, or a cell's own, re-tokenized) under dense, the splice and the cell repairing `rows`
    ([row] positions; None: no such cell) over the splice (`context`: its context mask)."""
    answer = answer_tokens(ctx, answer_ids, max_steps, "the answer is empty: there is no answer token whose "
                                                       "attention to read")
    none = torch.empty(0, dtype=torch.long)
    cells = [("dense", ctx.reference("the answer's attention"), none, None), ("splice", ctx.spliced, none, None)]
    if rows is not None:
        cells.append(("repaired", ctx.spliced, check_positions(rows, ctx.layout.suffix_start, "rows"), context))
    n_keys = ctx.layout.n_tokens + len(answer) - 1
    masks = regions(ctx, n_keys)
    tokens = [ctx.model.tokenizer.decode([t]) for t in answer]
    out = []
    for cache, base, cell, mask in cells:
        per_layer = _answer_patterns(ctx, base, cell, answer, mask, n_keys)  # [layer] of [step, key]
        for layer, probs in enumerate(per_layer):
            mass = {name: (probs[:, m].sum(-1).tolist() if m is not None else [math.nan] * len(answer))
                    for name, m in masks.items()}
            out += [(cache, layer, step, tokens[step], *(mass[name][step] for name in REGIONS))
                    for step in range(len(answer))]
    return pd.DataFrame(out, columns=COLUMNS)


def written_answer_ids(ctx: Context, text: str) -> list[int]:
    """A cell's answer text as token ids to teacher-force (a record keeps each cell's text, not its ids:
    the re-tokenized text, which may split a word otherwise than the decode did)."""
    return list(ctx.model.tokenizer(str(text), add_special_tokens=False)["input_ids"])


def _answer_patterns(ctx: Context, base: KVCache, cell: torch.Tensor, answer: list[int],
                     context: torch.Tensor | None, n_keys: int) -> list[torch.Tensor]:
    """The attention, mean over heads, of the rows that write each answer token (the suffix's last row,
    then each answer token but the last) over key positions 0..n_keys-1, `cell` recomputed first:
    [layer] of [step, key] fp32."""
    n, n_layers = ctx.layout.n_tokens, ctx.model.adapter.n_layers
    ids, positions = answer_pass(ctx, answer, cell)  # [n + step - 1], [row]
    found: dict[int, torch.Tensor] = {}

    def read(probs: torch.Tensor, hook) -> None:  # probs: [1, head, row, key]
        rows = hook.positions[0] >= n - 1  # [row]: the rows that write an answer token
        keys = hook.key_positions[0]  # [key] absolute positions, -1 on padding
        keep = keys >= 0
        out = probs.new_zeros(int(rows.sum()), n_keys, dtype=torch.float32)  # [step, key]
        out[:, keys[keep]] = probs[0][:, rows][:, :, keep].float().mean(0)
        found[hook.layer()] = out.cpu()

    read.reads_only = True  # engine.hooks: a reader, so no finite check after it
    hooks = {f"blocks.{l}.attn.hook_pattern": read for l in range(n_layers)}
    with torch.inference_mode():
        recompute_rows(ctx.model, base, ids, positions, context=context, hooks=hooks)
    return [found[l] for l in range(n_layers)]
