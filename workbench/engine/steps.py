"""Cells that grow by one row per step over a shared base (greedy decoding of many cells).

Each cell's known rows (its repair, the suffix, the answer so far) sit in preallocated buffers
`[layer, cell, kv_head, capacity, d_head]`; a step runs one new row per cell through the layer
step (`engine.layers`) and writes its K/V in place, so a step costs one row per cell, never a
copy of every known row.
"""

from __future__ import annotations

import torch

from workbench.engine.attention import attend
from workbench.engine.cells import Cell
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits, run_layers
from workbench.kv import KVCache
from workbench.models import LoadedModel


class Decoder:
    """Cells that grow by one row per step over a shared base (see the module docstring)."""

    def __init__(self, model: LoadedModel, base: KVCache, cells: list[Cell], steps: int, hooks=None,
                 index: list[int] | None = None):
        """index: the cells' indices among the caller's (`HookPoint.cells`; default 0, 1, ...)."""
        ad, device = model.adapter, model.device
        self.model, self.base, self.hooks = model, base, Hooks.of(hooks, ad)
        self.rows = None  # the last step's rows, for its hooked logits
        index = list(index) if index is not None else list(range(len(cells)))
        self.index = torch.tensor(index, dtype=torch.long, device=device)  # [cell]
        known = [int(c.known_positions.numel()) for c in cells]
        capacity = max(known) + steps
        shape = (base.n_layers, len(cells), ad.n_kv_heads, capacity, ad.head_dim)
        self.keys, self.values = base.keys.new_zeros(shape), base.values.new_zeros(shape)
        self.kpos = torch.full((len(cells), capacity), -1, dtype=torch.long, device=device)  # -1: empty slot
        self.length = torch.tensor(known, device=device)  # [cell]
        self.hidden_base = torch.zeros(len(cells), base.n_positions, dtype=torch.bool, device=device)  # overlaid
        for c, (cell, n) in enumerate(zip(cells, known)):
            pos = cell.known_positions.long().to(device)
            self.keys[:, c, :, :n] = cell.known_keys.to(device, base.keys.dtype)
            self.values[:, c, :, :n] = cell.known_values.to(device, base.values.dtype)
            self.kpos[c, :n] = pos
            self.hidden_base[c, pos[pos < base.n_positions]] = True

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits of the last step's rows ([cell, hidden] -> [cell, vocab]), through
        `ln_final.hook_normalized` and `hook_unembed` when hooked."""
        return final_logits(self.model.adapter, hidden, self.rows, self.hooks)

    def keep(self, cells: list[int]) -> None:
        """Drop every cell but `cells` (indices into the current ones)."""
        index = torch.tensor(cells, device=self.kpos.device)
        self.keys, self.values = self.keys.index_select(1, index), self.values.index_select(1, index)
        self.kpos, self.length, self.index = self.kpos[index], self.length[index], self.index[index]
        self.hidden_base = self.hidden_base[index]

    @torch.inference_mode()
    def step(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """One new row per cell at `positions` ([cell]) with token `ids` ([cell]); returns their
        hidden states after the last layer ([cell, hidden])."""
        ad, base = self.model.adapter, self.base
        device = self.kpos.device
        pos, n_cells = positions.to(device).long(), positions.numel()
        see_base = (torch.arange(base.n_positions, device=device)[None] <= pos[:, None]) & ~self.hidden_base
        see_known = (self.kpos >= 0) & (self.kpos <= pos[:, None])
        mask = torch.cat([see_base, see_known, torch.ones(n_cells, 1, dtype=torch.bool, device=device)], dim=1)
        key_pos = torch.cat([torch.arange(base.n_positions, device=device).expand(n_cells, -1), self.kpos,
                             pos[:, None]], dim=1)  # [cell, key]
        masks = ad.layer_masks(mask[:, None], pos[:, None], key_pos)  # [layer] of [cell, 1, key]
        new_k, new_v = [], []

        def attend_step(l: int, q, k, v, explicit) -> torch.Tensor:  # q: [cell, head, d_head]
            new_k.append(k)
            new_v.append(v)
            return attend(ad, q[:, :, None], base.keys[l], base.values[l], k[:, :, None], v[:, :, None],
                          self.keys[l], self.values[l], masks[l], key_pos, explicit)[:, 0]  # [cell, head * d_head]

        rows = self.rows = Rows.one_row_each(pos, self.index) if self.hooks else None
        h = run_layers(ad, ids.to(device).long(), pos, rows, attend_step, self.hooks)  # [cell, hidden]
        slot = self.length  # [cell]: where each cell's new row goes (read before it grows in place below)
        cells = torch.arange(n_cells, device=device)
        # Two index tensors apart put their dimension first: the values go in as [cell, layer, kv_head, d_head].
        self.keys[:, cells, :, slot] = torch.stack(new_k, dim=1).to(self.keys.dtype)
        self.values[:, cells, :, slot] = torch.stack(new_v, dim=1).to(self.values.dtype)
        self.kpos[cells, slot] = pos
        self.length += 1  # in place: a captured step (`engine.graphs`) replays this too
        return h
