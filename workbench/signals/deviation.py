"""KV deviation: how far a cache's rows are from the dense reference, per layer and token.

Keys are compared after RoPE, as the caches store them (the HF `hook_rot_k` point, not the
pre-rotation `hook_k`). Each token's row is flattened over kv_head x d_head before a metric.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.repair import check_positions

KINDS = ("k", "v")
METRICS = ("l2", "rel_l2", "cosine")
DENSEDEV_NORMS = ("none", "layer")  # DenseDev's per-layer normalisation (`densedev_scores`)


def _rows(cache: KVCache, reference: KVCache, positions) -> tuple[torch.Tensor, dict]:
    """Validated positions (caller's order) and the flattened rows of both caches per kind."""
    if cache.keys.shape != reference.keys.shape:
        raise WorkbenchError(f"cache and reference differ in shape: {tuple(cache.keys.shape)} vs "
                             f"{tuple(reference.keys.shape)}")
    check_positions(positions, cache.n_positions)
    pos = torch.as_tensor(positions).long().cpu()
    pairs = {"k": (cache.keys, reference.keys), "v": (cache.values, reference.values)}
    return pos, {kind: (_flat(a, pos), _flat(b, pos)) for kind, (a, b) in pairs.items()}


def _flat(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """[layer, kv_head, pos, d_head] -> rows at `pos`, [layer, n, kv_head * d_head] float32 cpu."""
    return t[:, :, pos.to(t.device)].float().transpose(1, 2).flatten(2).cpu()


def kv_deviation(cache: KVCache, reference: KVCache, positions) -> dict[tuple[str, str], torch.Tensor]:
    """Per-token deviation of `cache` from `reference` at `positions` ([n], any order).

    Returns {(kind, metric): [layer, n]} for kind in ("k", "v") and metric in
    ("l2", "rel_l2", "cosine"): ||a - b||, ||a - b|| / ||b|| and cos(a, b) of the flattened rows.
    """
    _, rows = _rows(cache, reference, positions)
    out = {}
    for kind, (a, b) in rows.items():  # each [layer, n, kv_head * d_head]
        l2 = (a - b).norm(dim=-1)  # [layer, n]
        out[kind, "l2"] = l2
        out[kind, "rel_l2"] = l2 / b.norm(dim=-1).clamp_min(1e-12)
        out[kind, "cosine"] = torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-12)
    return out


def residual_deviation(cache: KVCache, reference: KVCache, positions) -> dict[str, torch.Tensor]:
    """Relative L2 over all rows at `positions`, per layer: {"k": [layer], "v": [layer]}.

    The deviation a repair leaves per layer: ||A - B||_F / ||B||_F over the given rows.
    """
    _, rows = _rows(cache, reference, positions)
    return {kind: (a - b).flatten(1).norm(dim=1) / b.flatten(1).norm(dim=1).clamp_min(1e-12)
            for kind, (a, b) in rows.items()}


def mean_row_norms(reference: KVCache, positions) -> dict[str, torch.Tensor]:
    """Mean L2 norm of the reference's flattened rows (kv_head x d_head) at `positions`, per layer
    and kind: {"k": [layer], "v": [layer]} (keys after RoPE, as stored)."""
    pos = torch.as_tensor(positions).long().cpu()
    check_positions(pos, reference.n_positions)
    return {"k": _flat(reference.keys, pos).norm(dim=-1).mean(1), "v": _flat(reference.values, pos).norm(dim=-1).mean(1)}


def densedev_scores(dev: dict, norm: str = "none", row_norms: dict | None = None) -> torch.Tensor:
    """DenseDev's score per row ([n]) from a `kv_deviation` record `dev` ({(kind, "l2"): [layer, n]}).

    "none" (CADENCE's DenseDev): sum over layers of ||dK||^2 + ||dV||^2, raw, so the layers and the
    kind with the largest rows weigh most. "layer": each layer's ||dK||^2 divided by the square of
    that layer's mean dense key row norm, ||dV||^2 likewise with the values' (`mean_row_norms` over
    the same rows, given as `row_norms`), then summed: every layer in units of its own row length.
    """
    if norm not in DENSEDEV_NORMS:
        raise WorkbenchError(f"densedev_norm must be one of {', '.join(DENSEDEV_NORMS)}, got {norm!r}")
    if norm == "none":
        return (dev[("k", "l2")].square() + dev[("v", "l2")].square()).sum(0)
    if row_norms is None:
        raise WorkbenchError("densedev_norm 'layer' needs the reference's mean row norms (mean_row_norms)")
    scale = {kind: row_norms[kind].float().clamp_min(1e-12).square()[:, None] for kind in KINDS}  # [layer, 1]
    return (dev[("k", "l2")].square() / scale["k"] + dev[("v", "l2")].square() / scale["v"]).sum(0)


def deviation_frame(ctx, cache: KVCache | None = None, positions=None) -> pd.DataFrame:
    """Tidy frame of `kv_deviation(cache, ctx.dense, positions)` for one Context.

    Columns: example_id, layer, position, segment, token, kind, metric, value; one row per
    (layer, position, kind, metric). Defaults: the splice, over all reused positions.
    """
    cache = ctx.spliced if cache is None else cache
    pos = ctx.reused_positions if positions is None else torch.as_tensor(positions)
    dev = kv_deviation(cache, ctx.reference("deviation_frame"), pos)
    pos_np = pos.long().cpu().numpy()
    n_layers, n = cache.n_layers, len(pos_np)
    names, tokens = np.array(ctx.layout.segment_names(), dtype=object), np.array(ctx.layout.tokens, dtype=object)
    parts = []
    for (kind, metric), values in dev.items():  # values: [layer, n]
        parts.append(pd.DataFrame({
            "layer": np.repeat(np.arange(n_layers), n),
            "position": np.tile(pos_np, n_layers),
            "segment": np.tile(names[pos_np], n_layers),
            "token": np.tile(tokens[pos_np], n_layers),
            "kind": kind,
            "metric": metric,
            "value": values.flatten().numpy(),
        }))
    frame = pd.concat(parts, ignore_index=True)
    frame.insert(0, "example_id", ctx.example.id)
    return frame


class ResidualMeter:
    """`residual_deviation` of many repairs of one cache without materializing them.

    Precomputes each reused row's squared deviation from the reference per layer; a repair
    that rewrote rows R then costs |R| rows: the base's total, minus those rows' old deviation,
    plus their new one. Equal to `residual_deviation` of the repaired cache up to rounding.
    """

    def __init__(self, cache: KVCache, reference: KVCache, positions):
        pos, rows = _rows(cache, reference, positions)
        self.index = {int(p): i for i, p in enumerate(pos.tolist())}
        self.reference = reference
        self.row_sq = {kind: (a - b).square().sum(-1) for kind, (a, b) in rows.items()}  # [layer, n]
        self.ref_sq = {kind: b.square().sum((1, 2)) for kind, (_, b) in rows.items()}  # [layer]

    def of(self, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per layer relative L2 after rewriting `positions` ([r], reused rows) with `keys`/`values`
        ([layer, kv_head, r, d_head]): {"k": [layer], "v": [layer]}."""
        pos = positions.cpu()
        idx = torch.tensor([self.index[int(p)] for p in pos.tolist()], dtype=torch.long)
        out = {}
        for kind, new, ref in (("k", keys, self.reference.keys), ("v", values, self.reference.values)):
            old = self.row_sq[kind][:, idx].sum(1)  # [layer]
            fresh = (new.float().cpu() - ref[:, :, pos.to(ref.device)].float().cpu()).square().sum((1, 2, 3))
            total = (self.row_sq[kind].sum(1) - old + fresh).clamp_min(0)
            out[kind] = total.sqrt() / self.ref_sq[kind].sqrt().clamp_min(1e-12)
        return out
