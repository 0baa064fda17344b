"""Activation patching on a splice: TransformerLens's classic experiment, dense as the clean run.

The question runs over the dense cache (clean) and over the spliced cache (corrupted), each with
`ctx.run_with_cache`. The metric is the logit difference, at the question's last row, of dense's
first answer token against the splice's, normalised so that the splice scores 0 and dense 1:

    metric = (diff(patched) - diff(splice)) / (diff(dense) - diff(splice))

A patch copies dense's activation at a hook point into the spliced pass: `blocks.L.hook_resid_post`
at one question row (per layer and row), or one head of `blocks.L.attn.hook_z` at the scanned rows
(per layer and head). Every patched pass is one cell of `engine.cells.run_cells` over the splice
extended with its own question rows: a cell recomputes the question from its first patched row on
(the rows before it are causally untouched and read from the splice's pass), so a scan of many
patches runs batched.

    p = activation_patching(ctx)                 # ctx: an example whose splice flips dense's first token
    p.resid                                      # [layer, row] normalised metric
    p.z                                          # [layer, head]
    logits = patched_logits(ctx, [[Patch("blocks.3.hook_resid_post", (40, 41))]])   # [set, vocab]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.context import Context
from workbench.engine.cells import Cell, run_cells
from workbench.engine.hooks import hook_names
from workbench.errors import WorkbenchError
from workbench.repair import recompute_rows


@dataclass(frozen=True)
class Patch:
    """Dense's activation at `name`, copied into the spliced pass at absolute positions `rows`
    (question rows); `head`: only that head (for `attn.hook_z`, `hook_q`, ...; None: all)."""

    name: str
    rows: tuple[int, ...]
    head: int | None = None


@dataclass(frozen=True)
class Patching:
    """One example's patching scan. resid: [layer, row] (dense's `hook_resid_post` at one question
    row), z: [layer, head] (one head's `hook_z` at `z_rows`), both normalised 0 = splice, 1 = dense."""

    resid: np.ndarray  # [layer, row]
    layers: list[int]  # [layer] the block of each of resid's and z's rows
    z: np.ndarray  # [layer, head]
    rows: list[int]  # [row] absolute positions of resid's columns
    tokens: list[str]  # [row] their tokens
    z_rows: list[int]  # the rows each head is patched at
    dense_token: str  # dense's first answer token (the metric's +)
    splice_token: str  # the splice's (the metric's -)
    dense_diff: float  # logit(dense_token) - logit(splice_token) over dense
    splice_diff: float  # the same over the splice


def _question(ctx: Context) -> torch.Tensor:
    """Absolute positions of the question's rows. [question]"""
    return torch.arange(ctx.layout.suffix_start, len(ctx.layout.ids))


def _check_patches(ctx: Context, patch_sets: Sequence[Sequence[Patch]]) -> None:
    known, question = set(hook_names(ctx.model.adapter)), set(_question(ctx).tolist())
    for i, patches in enumerate(patch_sets):
        for p in patches:
            if p.name not in known:
                raise WorkbenchError(f"patch set {i}: unknown hook point {p.name!r}")
            if not p.rows or not set(p.rows) <= question:
                raise WorkbenchError(f"patch set {i}: rows of {p.name} must be question positions "
                                     f"[{ctx.layout.suffix_start}, {len(ctx.layout.ids)}), got {list(p.rows)[:8]}")
            if p.head is not None and not 0 <= p.head < ctx.model.adapter.n_heads:
                raise WorkbenchError(f"patch set {i}: head {p.head} out of range [0, {ctx.model.adapter.n_heads})")


def patched_logits(ctx: Context, patch_sets: Sequence[Sequence[Patch]], clean=None,
                   max_bytes: int | None = None) -> torch.Tensor:
    """The question's last-row logits of the spliced pass under each set of patches ([set, vocab];
    an empty set: the splice's own). `clean`: dense's `ActivationCache` of the question (default:
    `ctx.run_with_cache(over="dense")` of the points the patches name)."""
    _check_patches(ctx, patch_sets)
    ad, question = ctx.model.adapter, _question(ctx)
    start, end = ctx.layout.suffix_start, len(ctx.layout.ids)
    if clean is None:
        names = sorted({p.name for s in patch_sets for p in s}) or ["hook_embed"]
        clean = ctx.run_with_cache(over="dense", names_filter=names)[1]
    # the splice extended with its own question rows: the rows a cell does not recompute
    base, _ = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, question)
    firsts = [min((r for p in s for r in p.rows), default=end - 1) for s in patch_sets]
    cells = [Cell(positions=torch.arange(f, end), ids=ctx.layout.ids[f:end]) for f in firsts]
    by_name: dict[str, dict[int, list[Patch]]] = {}  # {hook point: {patch set: its patches there}}
    for i, patches in enumerate(patch_sets):
        for p in patches:
            by_name.setdefault(p.name, {}).setdefault(i, []).append(p)

    def patch(x, hook):  # x: [cell, row, ...]; hook.cells: the caller's index of each cell
        source = clean[hook.name][0]  # [question, ...]
        for j, c in enumerate(hook.cells.tolist()):
            for p in by_name[hook.name].get(c, ()):
                rows = torch.tensor(p.rows)
                at = rows - int(hook.positions[j, 0])  # the cell's row index of each patched position
                value = source[rows - start].to(x.device, x.dtype)
                if p.head is None:
                    x[j, at] = value
                else:
                    x[j, at, p.head] = value[:, p.head]

    hooks = {name: patch for name in by_name}
    kwargs = {} if max_bytes is None else {"max_bytes": max_bytes}
    out = run_cells(ctx.model, base, cells, hooks=hooks, **kwargs)
    with torch.inference_mode():
        return torch.cat([ad.logits(o.hidden[-1:]) for o in out])  # [set, vocab]


def activation_patching(ctx: Context, rows=None, layers=None, z_rows=None) -> Patching:
    """Patch dense into the splice: `hook_resid_post` per layer and question row, and each head's
    `hook_z` per layer (at `z_rows`, default all the question's rows). rows: absolute question
    positions to scan (default all), layers: the layers (default all). Raises when the splice
    gives the same first answer token as dense (nothing to restore)."""
    ad, tok = ctx.model.adapter, ctx.model.tokenizer
    question = _question(ctx).tolist()
    rows = question if rows is None else sorted(int(r) for r in rows)
    z_rows = question if z_rows is None else sorted(int(r) for r in z_rows)
    layers = list(range(ad.n_layers)) if layers is None else sorted(int(l) for l in layers)
    if not set(rows) <= set(question) or not set(z_rows) <= set(question) or not rows or not z_rows:
        raise WorkbenchError(f"rows: question positions [{question[0]}, {question[-1] + 1}) expected")
    if not layers or layers[0] < 0 or layers[-1] >= ad.n_layers:
        raise WorkbenchError(f"layers: in [0, {ad.n_layers}) expected, got {layers[:8]}")
    last = f"blocks.{ad.n_layers - 1}.hook_resid_post"
    names = [f"blocks.{l}.{n}" for l in layers for n in ("hook_resid_post", "attn.hook_z")] + [last]
    _, clean = ctx.run_with_cache(over="dense", names_filter=names)
    splice_logits = ctx.run_with_hooks(over="spliced")  # [1, question, vocab]
    with torch.inference_mode():  # dense's last row through the head alone, as a patched cell's is
        dense = ad.logits(clean[last][0, -1:])[0]  # [vocab]
    plus, minus = int(dense.argmax()), int(splice_logits[0, -1].argmax())
    if plus == minus:
        raise WorkbenchError(f"the splice gives dense's first answer token ({tok.decode([plus])!r}): "
                             "nothing to patch back; choose an example whose splice flips it")
    sets = [[]] + [[Patch(f"blocks.{l}.hook_resid_post", (r,))] for l in layers for r in rows]
    sets += [[Patch(f"blocks.{l}.attn.hook_z", tuple(z_rows), h)] for l in layers for h in range(ad.n_heads)]
    logits = patched_logits(ctx, sets, clean)  # [set, vocab]
    diffs = (logits[:, plus] - logits[:, minus]).double().cpu().numpy()  # [set]
    dense_diff = float(dense[plus] - dense[minus])
    splice_diff = float(diffs[0])
    metric = (diffs[1:] - splice_diff) / (dense_diff - splice_diff)
    n = len(layers) * len(rows)
    return Patching(resid=metric[:n].reshape(len(layers), len(rows)), layers=layers,
                    z=metric[n:].reshape(len(layers), ad.n_heads), rows=rows,
                    tokens=[tok.decode([int(ctx.layout.ids[r])]) for r in rows], z_rows=z_rows,
                    dense_token=tok.decode([plus]), splice_token=tok.decode([minus]),
                    dense_diff=dense_diff, splice_diff=splice_diff)
