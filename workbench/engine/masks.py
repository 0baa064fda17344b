"""Which rows a pass recomputes and which keys they see: row positions, context masks.

A *context mask* (bool [n_context]) narrows what a recomputed row attends to (RelaxKV's
restricted recompute): a row at a position inside the mask's span sees only keys whose position
the mask holds, and its own key; rows past its end (the receiver's own text) see every key.
The causal mask and each layer's window (`family.visible_keys`) apply on top.
"""

from __future__ import annotations

import torch

from workbench.errors import WorkbenchError


def check_positions(positions, n_positions: int, what: str = "positions") -> torch.Tensor:
    """Validate row positions: integers in [0, n_positions), no duplicates. Returns sorted [row]."""
    pos = torch.as_tensor(positions)
    if pos.dim() != 1:
        raise WorkbenchError(f"{what} must be a 1-D list of token positions, got shape {tuple(pos.shape)}")
    if pos.numel() and (pos.dtype.is_floating_point or pos.dtype == torch.bool):
        raise WorkbenchError(f"{what} must be integers, got {pos.dtype}")
    pos = pos.long().cpu()
    if pos.numel() == 0:
        return pos
    bad = pos[(pos < 0) | (pos >= n_positions)]
    if bad.numel():
        raise WorkbenchError(f"{what} out of range [0, {n_positions}): {bad[:8].tolist()}")
    ordered = torch.sort(pos).values
    dupes = ordered[1:][ordered[1:] == ordered[:-1]]
    if dupes.numel():
        raise WorkbenchError(f"{what} contain duplicates: {torch.unique(dupes)[:8].tolist()}")
    return ordered


def check_context(context, what: str = "context") -> torch.Tensor:
    """Validate a context mask: a non-empty 1-D bool tensor over key positions. Returns it on cpu."""
    if not isinstance(context, torch.Tensor) or context.dim() != 1 or context.dtype != torch.bool \
            or not context.numel():
        raise WorkbenchError(f"{what} must be a non-empty 1-D bool tensor over key positions (True: a repaired "
                             f"row may attend to it), got {getattr(context, 'dtype', type(context).__name__)}")
    return context.cpu()


def context_allows(context: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
    """Which keys a context mask leaves to each query (see the module docstring): bool [..., q, k].

    context: bool [n_context]; query_pos: [..., q]; key_pos: [..., k] (absolute; keys past the
    mask's end, and padding at -1, count as inside it: causality and padding masks rule them)."""
    n = context.numel()
    inside = torch.cat([context.to(key_pos.device), context.new_ones(1, device=key_pos.device)])
    keys = inside[key_pos.clamp(0, n)]  # [..., k]
    own = key_pos[..., None, :] == query_pos[..., :, None]  # [..., q, k]
    restricted = (query_pos < n)[..., :, None]  # [..., q, 1]
    return ~restricted | keys[..., None, :] | own
