"""Per-layer recompute effects: at which layer does a repair recover the dense answer?

For one context and one row set (a selector's picks at a budget, `selected_rows`), the question
suffix runs over three caches: the splice, the repaired cell (the rows recomputed over the
splice, then the suffix) and dense. At each layer's output (`blocks.{l}.hook_resid_post`), at
the suffix rows:

    residual_distance   ||h - h_dense|| / ||h_dense|| over the suffix rows (relative L2; dense: 0)
    logprob, rank       the logit lens on the last suffix row (final norm and LM head): log p and
                        rank of dense's first answer token (rank 0: it is the top token)
    top_token           the lens's top token there

    table = layer_effects(ctx, selected_rows(d, "cadence-grad", 0.2))
    plots.layer_effects_figure(table)

Two ways to the residuals, one lens (`effects_table`):

- `layer_effects(ctx, rows)` / `layer_effects_table(ctx, selections)` run the suffix serially,
  with caching hooks (`suffix_residuals`: `repair.recompute_rows`, the suffix rows extending each
  cache), for a notebook's one selection;
- `diagnose(..., layer_effects=True)` reads them from the batched pass it runs anyway
  (`SuffixCapture`: hooks on `engine.answers.answer_cells`, keeping only the suffix rows of the
  cells asked for, never the teacher-forced answer rows after them nor a decode step's rows),
  equal to the serial ones up to float rounding; after any hooks the caller gave diagnose, so
  they see the residual those left (dense's pass runs no user hook). It keeps the table of every
  selection (selector and budget columns; the splice and dense rows repeated beside each) as the
  Diagnosis's "layer_effects" table, which the explorer and the report draw.
"""

from __future__ import annotations

import pandas as pd
import torch

from workbench.context import Context
from workbench.diagnosis.record import Diagnosis
from workbench.engine.hooks import HookPoint, caching_hooks
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


class SuffixCapture:
    """Hooks on a batched pass (`answer_cells`) that keep the suffix rows' residual after every layer
    of the cells asked for (`cells`: indices into the pass's row sets; None: all). A cell's rows are
    its repaired rows, the suffix, then the teacher-forced answer: the suffix rows are found by
    position ([suffix_start, suffix_start + suffix)), so padding (-1), the answer rows and decode
    steps (later positions) are never kept. The answer rows sit after the suffix and attention is
    causal, so they do not change the suffix's residuals."""

    def __init__(self, ctx: Context, cells=None):
        self.start = ctx.layout.suffix_start
        self.end, self.n_layers = self.start + len(ctx.suffix_ids), ctx.model.adapter.n_layers
        self.cells = None if cells is None else set(cells)
        self.found: dict[int, dict[int, torch.Tensor]] = {}  # cell -> layer -> [suffix, hidden] fp32

    def hooks(self) -> dict:
        """{blocks.{l}.hook_resid_post: the capture} for every layer."""
        return {f"blocks.{l}.hook_resid_post": self._keep for l in range(self.n_layers)}

    def _keep(self, x: torch.Tensor, hook: HookPoint) -> None:  # x: [cell, row, hidden]
        inside = (hook.positions >= self.start) & (hook.positions < self.end)  # [cell, row]
        for c in inside.any(1).nonzero().flatten().tolist():
            cell = int(hook.cells[c])
            if self.cells is None or cell in self.cells:
                self.found.setdefault(cell, {})[hook.layer()] = x[c, inside[c]].float()  # [suffix, hidden], a copy

    _keep.reads_only = True  # engine.hooks: a reader, so no finite check after it

    def residuals(self, cell: int) -> list[torch.Tensor]:
        """Cell `cell`'s suffix residuals: [layer] of [suffix, hidden], fp32."""
        got = self.found.get(cell, {})
        if len(got) != self.n_layers or any(len(h) != self.end - self.start for h in got.values()):
            raise WorkbenchError(f"cell {cell}'s pass kept {len(got)} of {self.n_layers} layers' suffix rows")
        return [got[l] for l in range(self.n_layers)]


def layer_effects(ctx: Context, rows) -> pd.DataFrame:
    """The per-layer table of the module docstring for repairing `rows` ([row] positions)."""
    return layer_effects_table(ctx, {None: rows}).drop(columns=["selector", "budget"])


def layer_effects_table(ctx: Context, selections: dict) -> pd.DataFrame:
    """`layer_effects` of each selection ({(selector, budget) or None: rows, or (rows, context
    mask or None)}) in one table, with selector and budget columns; the splice and dense
    (computed once) sit beside each. Serial: one suffix pass per cache."""
    n, none, reference = ctx.layout.suffix_start, torch.empty(0, dtype=torch.long), ctx.reference("layer_effects")
    repaired = {}
    for key, rows in selections.items():
        rows, context = rows if isinstance(rows, tuple) else (rows, None)
        repaired[key] = suffix_residuals(ctx, check_positions(rows, n, "rows"), ctx.spliced, context)
    return effects_table(ctx, suffix_residuals(ctx, none, ctx.spliced), suffix_residuals(ctx, none, reference),
                         repaired)


def effects_table(ctx: Context, splice: list[torch.Tensor], dense: list[torch.Tensor], repaired: dict) -> pd.DataFrame:
    """The table from suffix residuals ([layer] of [suffix, hidden]) of the splice, dense and each
    selection ({(selector, budget) or None: residuals}), however they were computed. Selections that
    share a list of residuals (one cell: `none` and the splice, `full` at every budget) share its lens."""
    with torch.inference_mode():
        dense_logits = _lens_logits(ctx, dense)  # [layer, vocab]
        answer = int(dense_logits[-1].argmax())  # dense's first answer token
        done = {id(splice): _lens(ctx, splice, dense, answer), id(dense): _lens(ctx, dense, dense, answer, dense_logits)}
        out = []
        for key, residual in repaired.items():
            selector, budget = key if key is not None else (None, None)
            if id(residual) not in done:
                done[id(residual)] = _lens(ctx, residual, dense, answer)
            found = {"splice": done[id(splice)], "repaired": done[id(residual)], "dense": done[id(dense)]}
            out += [(selector, budget, cache, *row) for cache in CACHES for row in found[cache]]
    return pd.DataFrame(out, columns=["selector", "budget", *COLUMNS])


def _lens_logits(ctx: Context, residual: list[torch.Tensor]) -> torch.Tensor:
    """The logit lens on the last suffix row of every layer, in one product: [layer, vocab] fp32."""
    last = torch.stack([h[-1] for h in residual])  # [layer, hidden]
    return ctx.model.adapter.logits(last.to(ctx.spliced.keys.dtype)).float()


def _lens(ctx: Context, residual: list[torch.Tensor], dense: list[torch.Tensor], answer: int,
          logits: torch.Tensor | None = None) -> list[tuple]:
    """Per layer: (layer, residual distance from dense, log p and rank of `answer`, the top token)."""
    logits = _lens_logits(ctx, residual) if logits is None else logits  # [layer, vocab]
    logp = torch.log_softmax(logits, -1)
    ranks = (logits > logits[:, answer:answer + 1]).sum(-1).tolist()  # [layer]
    top = [ctx.model.tokenizer.decode([t]) for t in logits.argmax(-1).tolist()]
    return [(l, float((h - ref).norm() / ref.norm().clamp_min(1e-12)), float(logp[l, answer]), ranks[l], top[l])
            for l, (h, ref) in enumerate(zip(residual, dense))]
