"""Many row sets over one shared cache in one layer-serial pass (batched recompute).

A *cell* overlays rows on a shared base cache (the splice): rows it recomputes (`positions`,
with their token ids) and, optionally, rows whose K/V it already knows (`known`). Everything
else it reads from the base. Per layer, all cells' rows go through the projections, RoPE at
their true positions and the MLP together; their queries attend over

    base rows not overlaid by the cell  +  the cell's known rows  +  its recomputed rows

under a causal mask built from absolute positions (key position <= query position, and
inside the layer's sliding window where it has one), with one softmax over the three groups. The base is never copied: its scores are one matrix product
shared by every cell. This is exactly `repair.recompute_rows` on each cell's own copy of the
cache, up to float rounding, at a fraction of the time: the linear layers run on all cells'
rows at once.

    cells = [Cell(positions=rows, ids=layout.ids[rows]) for rows in row_sets]
    out = run_cells(model, spliced, cells)        # per cell: K/V of its rows per layer, hidden
    out = run_cells(model, spliced, cells, hooks={"blocks.3.attn.hook_z": fn})   # hooked (engine.hooks)

A cell may carry a context mask (`context`, bool [n_context]): its rows inside the mask's span
attend only to the keys it holds, and their own (RelaxKV's restricted recompute; the rule of
`engine.masks.context_allows`); its rows past the span (the suffix, the answer) see every key.

Cells are grouped under a memory budget (`max_bytes`), smallest first, so a long context with
many cells never holds more than that at once. Attention is torch's fused kernel over each
cell's keys laid end to end (base, known, new), with the mask above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from einops import rearrange

from workbench.engine.attention import attend
from workbench.batching import DEFAULT_MAX_BYTES, pack_sizes
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import run_layers
from workbench.engine.masks import check_context, context_allows
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel



@dataclass(frozen=True)
class Cell:
    """Rows one cell recomputes over the base, and rows whose K/V it already holds."""

    positions: torch.Tensor  # [row] absolute positions to recompute, ascending
    ids: torch.Tensor  # [row] their token ids
    known_positions: torch.Tensor | None = None  # [known] ascending, disjoint from positions
    known_keys: torch.Tensor | None = None  # [layer, kv_head, known, d_head], post-RoPE
    known_values: torch.Tensor | None = None
    context: torch.Tensor | None = None  # [n_context] bool: the keys rows inside it may attend to (None: all)


@dataclass(frozen=True)
class CellRows:
    """What one cell computed: its rows' K/V at every layer and their last hidden states."""

    positions: torch.Tensor  # [row]
    keys: torch.Tensor  # [layer, kv_head, row, d_head], post-RoPE
    values: torch.Tensor  # [layer, kv_head, row, d_head]
    hidden: torch.Tensor  # [row, hidden] after the last layer (before the final norm)


def check_cell(cell: Cell, base: KVCache, what: str = "cell") -> None:
    """Raise a clear error for a malformed cell, before any work."""
    pos = cell.positions
    if pos.dim() != 1 or cell.ids.shape != pos.shape:
        raise WorkbenchError(f"{what}: positions and ids must be 1-D of the same length")
    if pos.numel() and (pos.dtype.is_floating_point or int(pos.min()) < 0):
        raise WorkbenchError(f"{what}: positions must be non-negative integers")
    if pos.numel() > 1 and not bool((pos[1:] > pos[:-1]).all()):
        raise WorkbenchError(f"{what}: positions must be strictly ascending (no duplicates)")
    if cell.context is not None:
        check_context(cell.context, f"{what}: context")
    known = cell.known_positions if cell.known_positions is not None else pos.new_zeros(0)
    taken = torch.cat([pos, known])
    if torch.unique(taken).numel() != taken.numel():
        raise WorkbenchError(f"{what}: a position is both recomputed and known")
    beyond = taken[taken >= base.n_positions]
    span = torch.arange(base.n_positions, int(taken.max()) + 1) if beyond.numel() else beyond
    if beyond.numel() != span.numel():
        raise WorkbenchError(f"{what}: rows past the base cache ({base.n_positions} positions) must be "
                             f"contiguous from its end; missing {sorted(set(span.tolist()) - set(beyond.tolist()))[:8]}")


def _groups(sizes: list[tuple[int, int]], n_base: int, kv_width: int, max_bytes: int,
            spread: float = 1.5) -> list[list[int]]:
    """Cell indices grouped by size (rows, known): each group's attention inputs (its boolean
    mask and its keys and values laid end to end, fp32) fit in `max_bytes`, and its largest
    cell has at most `spread` times the rows of its smallest (+16), so padding wastes little.
    kv_width: kv_head * d_head."""
    def fits(members: list[int]) -> bool:
        rows = max(sizes[j][0] for j in members)
        keys = n_base + max(sizes[j][1] for j in members) + rows
        return (len(members) * keys * (max(rows, 1) + 8 * kv_width) <= max_bytes
                and rows <= spread * sizes[members[0]][0] + 16)
    return pack_sizes(sizes, fits)


def run_cells(model: LoadedModel, base: KVCache, cells: list[Cell], max_bytes: int = DEFAULT_MAX_BYTES,
              progress: Callable[[int, int], None] | None = None, hooks=None) -> list[CellRows]:
    """Recompute every cell's rows over `base` (see the module docstring); one result per cell.
    `progress(done, total)` is called after each group of cells. `hooks` ({name: fn}, see
    `engine.hooks`) run on every group's pass, their cell axis the group's cells."""
    hooks = Hooks.of(hooks, model.adapter)
    for i, cell in enumerate(cells):
        check_cell(cell, base, f"cell {i}")
    out: list[CellRows | None] = [None] * len(cells)
    sizes = [(int(c.positions.numel()), 0 if c.known_positions is None else int(c.known_positions.numel()))
             for c in cells]
    ad = model.adapter
    for group in _groups(sizes, base.n_positions, ad.n_kv_heads * ad.head_dim, max_bytes):
        for i, rows in zip(group, _run_group(model, base, [cells[i] for i in group], hooks, group)):
            out[i] = rows
        if progress:
            progress(sum(r is not None for r in out), len(cells))
    return out


def _pad(rows: list[torch.Tensor], width: int, fill=0) -> torch.Tensor:
    """Stack 1-D tensors, right-padded with `fill` to `width`. [cell, width]"""
    out = rows[0].new_full((len(rows), width), fill)
    for c, r in enumerate(rows):
        out[c, : r.numel()] = r
    return out


@torch.inference_mode()
def _run_group(model: LoadedModel, base: KVCache, cells: list[Cell], hooks: Hooks | None = None,
               index: list[int] | None = None) -> list[CellRows]:
    """One layer-serial pass for a group of cells. The linear layers run on the cells' rows laid
    end to end ([token, hidden], no padding); attention runs padded per cell ([cell, row, ...]).
    index: the cells' indices among the caller's (`HookPoint.cells`; default 0, 1, ...)."""
    ad, device = model.adapter, model.device
    n_cells, n_base = len(cells), base.n_positions
    n_rows = [int(c.positions.numel()) for c in cells]
    n_known = [0 if c.known_positions is None else int(c.known_positions.numel()) for c in cells]
    width, kwidth = max(max(n_rows), 1), max(n_known)
    pos = _pad([c.positions.long().cpu() for c in cells], width).to(device)  # [cell, row]
    valid = torch.arange(width, device=device)[None] < torch.tensor(n_rows, device=device)[:, None]  # [cell, row]
    cell_of, row_of = valid.nonzero(as_tuple=True)  # [token]: where each real row sits in the padding
    flat_pos = pos[cell_of, row_of]  # [token]
    flat_ids = torch.cat([c.ids.long().cpu() for c in cells]).to(device)  # [token], cells in order
    kpos = _pad([c.known_positions.long().cpu() if n else torch.zeros(0, dtype=torch.long)
                 for c, n in zip(cells, n_known)], kwidth, -1).to(device) if kwidth else None  # [cell, known]
    key_pos = torch.cat([torch.arange(n_base, device=device).expand(n_cells, -1)]
                        + ([kpos] if kpos is not None else []) + [pos], dim=1)  # [cell, key]
    mask = _masks(pos, valid, kpos, n_base)  # [cell, row, key]
    for c, cell in enumerate(cells):
        if cell.context is not None:  # a restricted recompute: its rows see only their context
            mask[c] &= context_allows(cell.context, pos[c], key_pos[c])
    masks = ad.layer_masks(mask, pos, key_pos)  # [layer] of [cell, row, key]

    known_k = known_v = None
    if kpos is not None:  # [layer, cell, kv_head, known, d_head]
        shape = (base.n_layers, n_cells, ad.n_kv_heads, kwidth, ad.head_dim)
        known_k, known_v = base.keys.new_zeros(shape), base.values.new_zeros(shape)
        for c, (cell, n) in enumerate(zip(cells, n_known)):
            if n:
                known_k[:, c, :, :n] = cell.known_keys.to(device, base.keys.dtype)
                known_v[:, c, :, :n] = cell.known_values.to(device, base.values.dtype)

    rows = hook_pos = None
    if hooks:  # the hooks see padding at position -1
        rows = Rows(torch.where(valid, pos, -1), cell_of, row_of,
                    None if index is None else torch.tensor(index, device=device))
        hook_pos = torch.cat([key_pos[:, :key_pos.shape[1] - width], rows.positions], dim=1)  # [cell, key]
    new_keys, new_values = [], []

    def attend_cells(l: int, q, k, v, explicit) -> torch.Tensor:
        qp = q.new_zeros(n_cells, width, ad.n_heads, ad.head_dim)
        kp = k.new_zeros(n_cells, width, ad.n_kv_heads, ad.head_dim)
        vp = torch.zeros_like(kp)
        qp[cell_of, row_of], kp[cell_of, row_of], vp[cell_of, row_of] = q, k, v
        kp, vp = (rearrange(x, "c r k d -> c k r d") for x in (kp, vp))
        new_keys.append(kp)
        new_values.append(vp)
        out = attend(ad, rearrange(qp, "c r h d -> c h r d"), base.keys[l], base.values[l], kp, vp,
                     None if known_k is None else known_k[l], None if known_v is None else known_v[l], masks[l],
                     hook_pos, explicit)  # [cell, row, head * d_head]
        return out[cell_of, row_of]

    h = run_layers(ad, flat_ids, flat_pos, rows, attend_cells, hooks)  # [token, hidden]
    keys, values = torch.stack(new_keys), torch.stack(new_values)  # [layer, cell, kv_head, row, d_head]
    starts = [sum(n_rows[:c]) for c in range(n_cells)]
    return [CellRows(cells[c].positions.to(device), keys[:, c, :, : n_rows[c]], values[:, c, :, : n_rows[c]],
                     h[starts[c]: starts[c] + n_rows[c]]) for c in range(n_cells)]


def _masks(pos: torch.Tensor, valid: torch.Tensor, kpos: torch.Tensor | None, n_base: int) -> torch.Tensor:
    """Which keys each (cell, row) query sees, by absolute position: [cell, row, base + known + row].

    Base keys a cell overlays are hidden from it; a padded query row sees only itself (its
    output is discarded), so no softmax row is empty."""
    n_cells, width = pos.shape
    device = pos.device
    overlaid = torch.zeros(n_cells, n_base + 1, dtype=torch.bool, device=device)  # last column: a sink
    overlaid.scatter_(1, torch.where(valid, pos, n_base).clamp(max=n_base), True)
    if kpos is not None:
        overlaid.scatter_(1, torch.where(kpos >= 0, kpos, n_base).clamp(max=n_base), True)
    base_pos = torch.arange(n_base, device=device)
    see_base = (base_pos[None, None] <= pos[:, :, None]) & ~overlaid[:, None, :n_base] & valid[:, :, None]
    see_new = (pos[:, None, :] <= pos[:, :, None]) & valid[:, None, :] & valid[:, :, None]  # [cell, row, row]
    see_new |= torch.eye(width, dtype=torch.bool, device=device)[None] & ~valid[:, :, None]
    if kpos is None:
        return torch.cat([see_base, see_new], dim=-1)
    see_known = (kpos[:, None, :] <= pos[:, :, None]) & (kpos >= 0)[:, None, :] & valid[:, :, None]
    return torch.cat([see_base, see_known, see_new], dim=-1)


def materialize(base: KVCache, rows: CellRows) -> KVCache:
    """The cell's full cache: the base with its recomputed rows written in (grown if they pass its end)."""
    return base.place(rows.positions, rows.keys, rows.values)
