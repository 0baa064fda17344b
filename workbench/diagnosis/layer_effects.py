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


def suffix_residuals(ctx: Context, rows: torch.Tensor, base) -> list[torch.Tensor]:
    """The residual stream after each layer at the suffix rows, the suffix run over `base` with
    `rows` recomputed first: [layer] of [suffix, hidden], fp32."""
    n, n_layers = ctx.layout.suffix_start, ctx.model.adapter.n_layers
    tail = torch.arange(n, n + len(ctx.suffix_ids))
    names, acts = [f"blocks.{l}.hook_resid_post" for l in range(n_layers)], {}
    recompute_rows(ctx.model, base, ctx.layout.ids, torch.cat([rows, tail]), hooks=caching_hooks(names, acts))
    return [acts[name][0, -len(tail):].float() for name in names]  # [suffix, hidden]: the suffix rows come last


def layer_effects(ctx: Context, rows) -> pd.DataFrame:
    """The per-layer table of the module docstring for repairing `rows` ([row] positions)."""
    rows = check_positions(rows, ctx.layout.suffix_start, "rows")
    none = torch.empty(0, dtype=torch.long)
    residual = {"splice": suffix_residuals(ctx, none, ctx.spliced),
                "repaired": suffix_residuals(ctx, rows, ctx.spliced),
                "dense": suffix_residuals(ctx, none, ctx.dense)}
    ad, tokenizer = ctx.model.adapter, ctx.model.tokenizer
    with torch.inference_mode():
        answer = int(ad.logits(residual["dense"][-1][-1:].to(ctx.dense.keys.dtype)).argmax())
        out = []
        for cache in CACHES:
            for l, h in enumerate(residual[cache]):
                dense = residual["dense"][l]
                logits = ad.logits(h[-1:].to(ctx.dense.keys.dtype))[0].float()  # [vocab]: the lens on the last row
                logp = torch.log_softmax(logits, -1)
                out.append((cache, l, float((h - dense).norm() / dense.norm().clamp_min(1e-12)), float(logp[answer]),
                            int((logits > logits[answer]).sum()), tokenizer.decode([int(logits.argmax())])))
    return pd.DataFrame(out, columns=list(COLUMNS))
