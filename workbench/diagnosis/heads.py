"""Attention by head: what one query row attends to, per layer and head, under dense, the splice
and a repaired cell, read from the engine's `hook_pattern`.

    found = head_patterns(ctx, rows=selected_rows(d, "bcr", 0.2))   # the question's last row
    found.patterns["dense"]      # [layer, head, key] fp32 over keys [0, query]: each row sums to 1
    found.notes["splice"]        # why a cache has no pattern for this query (None: it has one)

The query is the suffix's last row by default (the one that reads the first answer token) or any
position. A suffix row reads each cache through a pass of the suffix over it
(`repair.recompute_rows`: the cell's repaired rows first, then the suffix up to the query). A
context row's pattern is that of the pass that computed it: dense's (the row recomputed over the
dense cache: the dense prefill's row up to rounding), the repair's where the cell recomputes it,
and, for a row no other prefix changed (the prefix, the first passage), the row recomputed over the
cache (every cache computed it as dense does). A changed row the cache reuses was computed by its
sender over its own passage alone: that pass is not run here, and the note says so.

Only the query's row of each layer's pattern is kept. The written-out softmax of `hook_pattern`
rounds later layers differently from the fused kernel (a few 1e-6 of a pattern).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.context import Context
from workbench.engine.masks import check_positions
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.repair import recompute_rows

CACHES = ("dense", "splice", "repaired")


@dataclass(frozen=True)
class HeadPatterns:
    """One query row's attention under each cache: `patterns[cache]` [layer, head, key] fp32 over
    key positions 0..query (None where the cache has none: `notes[cache]` says why)."""

    query: int
    patterns: dict[str, torch.Tensor | None]
    notes: dict[str, str | None]
    tokens: tuple[str, ...]  # the display text of every key position 0..query
    segments: tuple[tuple[str, int, int], ...]  # (name, start, end) of the layout's segments
    evidence: tuple[int, ...]  # the gold evidence rows (empty where the data defines none)
    cell: tuple[int, ...] = ()  # the repaired cell's rows

    def distance(self, a: str = "splice", b: str = "dense") -> torch.Tensor | None:
        """Per layer, the total-variation distance between caches `a` and `b`'s patterns, mean over
        heads: [layer] (None where either has none)."""
        pa, pb = self.patterns.get(a), self.patterns.get(b)
        if pa is None or pb is None:
            return None
        return 0.5 * (pa - pb).abs().sum(-1).mean(-1)


def head_patterns(ctx: Context, query: int | None = None, rows=None,
                  context: torch.Tensor | None = None) -> HeadPatterns:
    """The pattern of `query` (a position; default the suffix's last row) under dense, the splice
    and the cell repairing `rows` ([row] positions; None: no repaired cell) over the splice
    (`context`: its context mask, bool [suffix_start], as `repair` takes)."""
    n, start = ctx.layout.n_tokens, ctx.layout.suffix_start
    query = n - 1 if query is None else int(query)
    if not 0 <= query < n:
        raise WorkbenchError(f"query position {query} is outside the context's {n} tokens (0..{n - 1})")
    dense = ctx.reference("attention by head")
    none = torch.empty(0, dtype=torch.long)
    repaired = None if rows is None else check_positions(rows, start, "rows")
    changed = bool(torch.isin(torch.tensor([query]), ctx.layout.changed_positions).any())
    patterns: dict[str, torch.Tensor | None] = {}
    notes: dict[str, str | None] = {}
    for cache, base, cell in (("dense", dense, none), ("splice", ctx.spliced, none),
                              ("repaired", ctx.spliced, repaired)):
        if cell is None:
            patterns[cache], notes[cache] = None, "no repaired cell chosen"
        elif query >= start or cache == "dense" or not changed or bool((cell == query).any()):
            mask = context if cache == "repaired" else None
            patterns[cache], notes[cache] = _read(ctx, base, cell, query, mask), None
        else:
            patterns[cache] = None
            notes[cache] = (f"position {query} is reused here: its sender computed it over its own passage alone "
                            f"(not rerun here); choose a question row or a row this cell recomputes")
    layout = ctx.layout
    evidence = () if layout.evidence is None else tuple(int(p) for p in layout.evidence)
    return HeadPatterns(query, patterns, notes, tuple(layout.tokens[:query + 1]),
                        tuple((s.name, s.start, s.end) for s in layout.segments), evidence,
                        () if repaired is None else tuple(repaired.tolist()))


def _read(ctx: Context, base: KVCache, cell: torch.Tensor, query: int,
          context: torch.Tensor | None) -> torch.Tensor:
    """The query's pattern at every layer of a pass over `base` recomputing `cell` and the rows from
    the suffix (or the query itself, in the context) up to the query: [layer, head, key <= query]."""
    start, n_layers = ctx.layout.suffix_start, ctx.model.adapter.n_layers
    own = torch.arange(start, query + 1) if query >= start else torch.tensor([query])
    positions = torch.unique(torch.cat([cell[cell <= query], own]))  # sorted, the query among them
    found: dict[int, torch.Tensor] = {}

    def read(probs: torch.Tensor, hook) -> None:  # probs: [1, head, row, key]
        row = int((hook.positions[0] == query).nonzero()[0])
        keys = hook.key_positions[0]  # [key] absolute positions, -1 on padding
        keep = (keys >= 0) & (keys <= query)
        out = probs.new_zeros(probs.shape[1], query + 1, dtype=torch.float32)  # [head, key]
        out[:, keys[keep]] = probs[0, :, row, keep].float()
        found[hook.layer()] = out.cpu()

    read.reads_only = True  # engine.hooks: a reader, so no finite check after it
    hooks = {f"blocks.{l}.attn.hook_pattern": read for l in range(n_layers)}
    recompute_rows(ctx.model, base, ctx.layout.ids, positions, context=context, hooks=hooks)
    return torch.stack([found[l] for l in range(n_layers)])  # [layer, head, key]
