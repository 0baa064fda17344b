"""Hook points on every pass of the engine, named as TransformerLens names them.

    hook_embed                          [cell, row, hidden]     the embedded rows
    blocks.{l}.hook_resid_pre           [cell, row, hidden]     layer l's input
    blocks.{l}.attn.hook_q / hook_k     [cell, row, head | kv_head, d_head]  before RoPE (q/k norms applied)
    blocks.{l}.attn.hook_v              [cell, row, kv_head, d_head]
    blocks.{l}.attn.hook_rot_q / _rot_k [cell, row, head | kv_head, d_head]  after RoPE (what the cache stores)
    blocks.{l}.attn.hook_pattern        [cell, head, row, key]  softmax over the keys each row sees
    blocks.{l}.attn.hook_z              [cell, row, head, d_head]  attention output before o_proj
    blocks.{l}.hook_attn_out            [cell, row, hidden]     what attention adds to the residual stream
    blocks.{l}.hook_mlp_out             [cell, row, hidden]     what the MLP adds
    blocks.{l}.hook_resid_post          [cell, row, hidden]     layer l's output

A hook is `fn(tensor, hook) -> tensor | None`, as in TransformerLens: it may edit the tensor in
place, return a replacement of the same shape, or return None to keep it. `hook` is a
`HookPoint`: its name, layer, and the absolute positions of the rows (`positions`, [cell, row],
-1 on padding) and, for `hook_pattern`, of the keys (`key_positions`, [cell, key]). The cell axis
is the pass's: one cell for a serial repair, every cell of a group in a batched pass, the cells
still decoding in a decode step; `cells` ([cell]) says which of the caller's cells each one is
(its index in the list given to `run_cells` / `answer_cells`; 0 in a serial repair). A padded row's values are zeros and whatever a hook writes there
is dropped. Without hooks a pass makes no copy and no call: each point is one `if`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch

from workbench.errors import WorkbenchError

LAYER_HOOKS = ("hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q",
               "attn.hook_rot_k", "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_mlp_out",
               "hook_resid_post")


def hook_names(n_layers: int) -> tuple[str, ...]:
    """Every hook point of a model of `n_layers` layers, in the order a pass reaches them."""
    return ("hook_embed",) + tuple(f"blocks.{l}.{name}" for l in range(n_layers) for name in LAYER_HOOKS)


@dataclass(frozen=True)
class HookPoint:
    """Where a hooked tensor comes from: its name, its layer (None for hook_embed) and positions."""

    name: str
    layer: int | None
    positions: torch.Tensor  # [cell, row] absolute positions of the rows; -1 on padding
    key_positions: torch.Tensor | None = None  # [cell, key] for hook_pattern; -1 on padding
    cells: torch.Tensor | None = None  # [cell] each cell's index among the caller's cells


HookFn = Callable[[torch.Tensor, HookPoint], "torch.Tensor | None"]


class Rows:
    """Where the rows of a pass, laid end to end ([token, ...]), sit among its cells ([cell, row, ...])."""

    def __init__(self, positions: torch.Tensor, cell_of: torch.Tensor, row_of: torch.Tensor,
                 cells: torch.Tensor | None = None):
        self.positions = positions  # [cell, row], -1 on padding
        self.cell_of, self.row_of = cell_of, row_of  # [token]
        # [cell]: which of the caller's cells each is (default: 0, 1, ...)
        self.cells = cells if cells is not None else torch.arange(len(positions), device=positions.device)

    @classmethod
    def one_cell(cls, positions: torch.Tensor) -> Rows:
        """Rows of a single cell. positions: [row]."""
        n = positions.numel()
        return cls(positions[None], positions.new_zeros(n), torch.arange(n, device=positions.device))

    @classmethod
    def one_row_each(cls, positions: torch.Tensor, cells: torch.Tensor | None = None) -> Rows:
        """One row per cell (a decode step). positions: [cell]; cells: [cell] their indices."""
        n = positions.numel()
        return cls(positions[:, None], torch.arange(n, device=positions.device), positions.new_zeros(n), cells)

    def point(self, name: str, layer: int | None, key_positions: torch.Tensor | None = None) -> HookPoint:
        """The HookPoint of `name` on these rows."""
        return HookPoint(name, layer, self.positions, key_positions, self.cells)

    def to_cells(self, x: torch.Tensor) -> torch.Tensor:
        """[token, ...] -> [cell, row, ...], zeros on padding."""
        out = x.new_zeros(*self.positions.shape, *x.shape[1:])
        out[self.cell_of, self.row_of] = x
        return out

    def from_cells(self, x: torch.Tensor) -> torch.Tensor:
        """[cell, row, ...] -> [token, ...]."""
        return x[self.cell_of, self.row_of]


class Hooks:
    """The hooks of a pass, checked once against the model's hook points."""

    def __init__(self, hooks: Mapping[str, HookFn | Iterable[HookFn]], n_layers: int):
        known = set(hook_names(n_layers))
        unknown = sorted(set(hooks) - known)
        if unknown:
            raise WorkbenchError(f"unknown hook points {unknown[:4]}: this model has hook_embed and "
                                 f"blocks.0..{n_layers - 1}.{{{', '.join(LAYER_HOOKS)}}}")
        self.fns = {name: [fn] if callable(fn) else list(fn) for name, fn in hooks.items()}

    @classmethod
    def of(cls, hooks, n_layers: int) -> Hooks | None:
        """None when no hook is registered (the pass then takes no hook branch at all)."""
        if hooks is None or isinstance(hooks, Hooks):
            return hooks or None
        return cls(hooks, n_layers) if hooks else None

    def __bool__(self) -> bool:
        return bool(self.fns)

    def __contains__(self, name: str) -> bool:
        return name in self.fns

    def call(self, name: str, x: torch.Tensor, point: HookPoint) -> torch.Tensor:
        """Run the hooks of `name` on `x` (already [cell, ...]); returns what they leave."""
        for fn in self.fns.get(name, ()):
            out = fn(x, point)
            if out is not None:
                if out.shape != x.shape:
                    raise WorkbenchError(f"hook on {name} returned shape {tuple(out.shape)}, expected {tuple(x.shape)}")
                x = out
        return x

    def rows(self, name: str, layer: int | None, x: torch.Tensor, rows: Rows) -> torch.Tensor:
        """Run the hooks of `name` on rows laid end to end (x: [token, ...]); a no-op without one."""
        if name not in self.fns:
            return x
        return rows.from_cells(self.call(name, rows.to_cells(x), rows.point(name, layer))).to(x.dtype)


def compose(*maps) -> dict[str, list[HookFn]]:
    """Several hook maps ({name: fn or [fn]}, a `Hooks`, or None) as one: on a shared point the
    earlier map's hooks run first, and each hook sees the tensor as the ones before it left it."""
    out: dict[str, list[HookFn]] = {}
    for hooks in maps:
        for name, fns in (hooks.fns if isinstance(hooks, Hooks) else hooks or {}).items():
            out.setdefault(name, []).extend([fns] if callable(fns) else fns)
    return out


def caching_hooks(names: Iterable[str], store: dict[str, torch.Tensor]) -> dict[str, HookFn]:
    """Hooks that keep each named activation in `store` (the last pass's, when several run)."""
    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        store[hook.name] = x.detach()

    return {name: keep for name in names}
