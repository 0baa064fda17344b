"""Per-layer recompute effects: at which layer does a repair recover the dense answer?

For one context and one row set (a selector's picks at a budget, `selected_rows`), the question
suffix runs over three caches through the engine's hooked layer step (`repair.recompute_rows`,
the suffix rows extending each cache): the splice, the repaired cell (the rows recomputed over
the splice, then the suffix) and dense. At each layer's output (`blocks.{l}.hook_resid_post`), at the suffix rows:

    residual_distance   ||h - h_dense|| / ||h_dense|| over the suffix rows (relative L2; dense: 0)
    logprob, rank       the logit lens on the last suffix row (final norm and LM head): log p and
                        rank of dense's first answer token (rank 0: it is the top token)
    top_token           the lens's top token there

    table = layer_effects(ctx, selected_rows(d, "cadence-grad", 0.2))
    plots.layer_effects_figure(table)

`diagnose(..., layer_effects=True)` keeps the table of every selection (`layer_effects_table`:
selector and budget columns; the splice and dense rows repeated beside each) as the
Diagnosis's "layer_effects" table, which the explorer and the report draw.
"""

from __future__ import annotations

import pandas as pd
import torch

from workbench.context import Context
from workbench.diagnosis.record import Diagnosis
from workbench.engine.hooks import caching_hooks
from workbench.engine.masks import check_positions
from workbench.errors import WorkbenchError
from workbench.repair import recompute_rows

CACHES = ("splice", "repaired", "dense")
COLUMNS = ("cache", "layer", "residual_distance", "logprob", "rank", "top_token")


def selected_rows(d: Diagnosis, selector: str, budget: float, draw: int | None = None) -> torch.Tensor:
    """The positions `selector` repaired at `budget` in a Diagnosis (a drawn one: `draw`, default
    the first). [row]"""
    sel = d.tables["selections"]
    hit = sel[(sel["selector"] == selector) & ((sel["budget"] - budget).abs() < 1e-9)]
    if draw is not None:
        hit = hit[hit["draw"] == draw]
    if hit.empty:
        raise WorkbenchError(f"the diagnosis has no selection of {selector!r} at budget {budget:g}; it has "
                             f"{sorted(set(zip(sel['selector'], sel['budget'])))[:8]}")
    return torch.as_tensor(list(hit.iloc[0]["positions"]), dtype=torch.long)


def suffix_residuals(ctx: Context, rows: torch.Tensor, base, context: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The residual stream after each layer at the suffix rows, the suffix run over `base` with
    `rows` recomputed first (over `context` only, when given: `repair`'s context mask):
    [layer] of [suffix, hidden], fp32."""
    n, n_layers = ctx.layout.suffix_start, ctx.model.adapter.n_layers
    tail = torch.arange(n, n + len(ctx.suffix_ids))
    names, acts = [f"blocks.{l}.hook_resid_post" for l in range(n_layers)], {}
    recompute_rows(ctx.model, base, ctx.layout.ids, torch.cat([rows, tail]), context=context,
                   hooks=caching_hooks(names, acts))
    return [acts[name][0, -len(tail):].float() for name in names]  # [suffix, hidden]: the suffix rows come last


def layer_effects(ctx: Context, rows) -> pd.DataFrame:
    """The per-layer table of the module docstring for repairing `rows` ([row] positions)."""
    return layer_effects_table(ctx, {None: rows}).drop(columns=["selector", "budget"])


def layer_effects_table(ctx: Context, selections: dict) -> pd.DataFrame:
    """`layer_effects` of each selection ({(selector, budget) or None: rows, or (rows, context
    mask or None)}) in one table, with selector and budget columns; the splice and dense
    (computed once) sit beside each."""
    n, none, reference = ctx.layout.suffix_start, torch.empty(0, dtype=torch.long), ctx.reference("layer_effects")
    shared = {"splice": suffix_residuals(ctx, none, ctx.spliced), "dense": suffix_residuals(ctx, none, reference)}
    ad, dtype = ctx.model.adapter, reference.keys.dtype
    with torch.inference_mode():
        answer = int(ad.logits(shared["dense"][-1][-1:].to(dtype)).argmax())  # dense's first answer token
        lens = {cache: _lens(ctx, h, shared["dense"], answer) for cache, h in shared.items()}
        out = []
        for key, rows in selections.items():
            selector, budget = key if key is not None else (None, None)
            rows, context = rows if isinstance(rows, tuple) else (rows, None)
            repaired = suffix_residuals(ctx, check_positions(rows, n, "rows"), ctx.spliced, context)
            found = {**lens, "repaired": _lens(ctx, repaired, shared["dense"], answer)}
            out += [(selector, budget, cache, *row) for cache in CACHES for row in found[cache]]
    return pd.DataFrame(out, columns=["selector", "budget", *COLUMNS])


def _lens(ctx: Context, residual: list[torch.Tensor], dense: list[torch.Tensor], answer: int) -> list[tuple]:
    """Per layer: (layer, residual distance from dense, log p and rank of `answer`, the top token)."""
    ad, dtype = ctx.model.adapter, ctx.dense.keys.dtype
    rows = []
    for l, (h, ref) in enumerate(zip(residual, dense)):
        logits = ad.logits(h[-1:].to(dtype))[0].float()  # [vocab]: the lens on the last suffix row
        logp = torch.log_softmax(logits, -1)
        rows.append((l, float((h - ref).norm() / ref.norm().clamp_min(1e-12)), float(logp[answer]),
                     int((logits > logits[answer]).sum()), ctx.model.tokenizer.decode([int(logits.argmax())])))
    return rows
