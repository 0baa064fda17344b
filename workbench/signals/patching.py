"""Actual patching: how the decision loss changes when one token's dense rows are patched in.

For each token, its dense K and/or V rows at every layer replace the cache's (on a copy), the
answer is teacher-forced and L_patched - L_unpatched is recorded (L = -log p(answer)). This is
the ground truth that the first-order estimate of `saliency` approximates; `attribution_check`
ranks one against the other. Kramár et al. 2024 (AtP*) report that attribution patching
misses effects through keys (attention saturation), so keys and values are checked apart.
The patched passes are the engine's batched cells (a patched row is a cell's known row over the
cache), so hooks reach them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from workbench.engine.cells import Cell, run_cells
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel
from workbench.repair import check_positions
from workbench.signals.saliency import Saliency, check_answer_ids

PATCH_KINDS = ("kv", "k", "v")  # both rows, keys only, values only


def check_reused(ctx, positions) -> torch.Tensor:
    """Validated, sorted positions that must all be reused (passage) tokens of `ctx`. [n]"""
    pos = check_positions(positions, ctx.spliced.n_positions)
    bad = pos[~torch.isin(pos, ctx.reused_positions)]
    if bad.numel():
        raise WorkbenchError(f"positions are not reused passage tokens: {bad[:8].tolist()} "
                             f"(passages span {[(s.start, s.end) for s in ctx.layout.passages]})")
    return pos


def _patch_cell(base: KVCache, dense: KVCache, position: int, kind: str, inputs: torch.Tensor) -> Cell:
    """The engine cell of one job: the suffix and answer rows (`inputs`, [row]) run past the end of
    `base`, with the dense K and/or V rows of `position` known in place of the base's (kind "kv",
    "k" or "v"; kind "": the base's own rows, nothing patched, on the same numeric path)."""
    n = base.n_positions
    tail = torch.arange(n, n + len(inputs))
    at = slice(position, position + 1)
    keys = (dense if "k" in kind else base).keys[:, :, at]  # [layer, kv_head, 1, d_head]
    values = (dense if "v" in kind else base).values[:, :, at]
    return Cell(tail, inputs, torch.tensor([position]), keys, values)


@torch.inference_mode()
def _batch_losses(model: LoadedModel, base: KVCache, dense: KVCache, jobs: list[tuple[int, str]],
                  suffix_ids: torch.Tensor, answer: list[int], hooks: Hooks | None) -> torch.Tensor:
    """-log p(answer) over `base` with each job's (position, kind) dense rows patched in: one engine
    pass of the jobs as cells (`engine.cells.run_cells`), under `hooks`. [job]"""
    inputs = torch.cat([suffix_ids.cpu(), torch.tensor(answer[:-1], dtype=torch.long)])  # [row]
    passes = run_cells(model, base, [_patch_cell(base, dense, p, kind, inputs) for p, kind in jobs], hooks=hooks)
    targets = torch.tensor(answer)[:, None]  # [answer, 1]
    predicting = slice(len(inputs) - len(answer), len(inputs))  # the rows whose logits predict the answer
    losses = []
    for c, done in enumerate(passes):
        rows = Rows.one_cell(done.positions[predicting], torch.tensor([c], device=done.positions.device)) if hooks else None
        logits = final_logits(model.adapter, done.hidden[predicting], rows, hooks)  # [answer, vocab]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        losses.append(-torch.log_softmax(logits, dim=-1).gather(1, targets.to(logits.device)).sum().cpu())
    return torch.stack(losses)


def patch_effects(ctx, positions, answer_ids, kinds=PATCH_KINDS, cache: KVCache | None = None,
                  progress: bool = False, batch_size: int = 8, hooks=None) -> pd.DataFrame:
    """Change in L = -log p(answer_ids) when each token's dense rows are patched into `cache`.

    For every position (a reused token) and kind ("kv", "k", "v"), the dense K and/or V rows
    of that token at every layer replace the cache's (a cell's known rows over it, never a copy).
    `batch_size` patched caches share one batched engine pass (`engine.cells.run_cells`), under
    `hooks` (`engine.hooks`: the batch's cells; the final points on each cell's predicting rows).
    Returns columns position, kind, delta_loss (patched - unpatched).
    """
    dense = ctx.reference("patch_effects")
    hooks = Hooks.of(hooks, ctx.model.adapter)
    cache = ctx.spliced if cache is None else cache
    pos = check_reused(ctx, positions)
    answer = check_answer_ids(answer_ids, ctx.model.config.vocab_size)
    unknown = [k for k in kinds if k not in PATCH_KINDS]
    if unknown or not kinds:
        raise WorkbenchError(f"patch kinds must be some of {PATCH_KINDS}, got {list(kinds)}")
    if batch_size < 1:
        raise WorkbenchError(f"batch_size must be at least 1, got {batch_size}")
    # The unpatched baseline (a token's own rows known in place of themselves) rides in the first
    # batch, so both sides share one numeric path.
    jobs = [(int(pos[0]) if pos.numel() else 0, "")] + [(int(p), kind) for p in pos.tolist() for kind in kinds]
    losses = []
    for start in tqdm(range(0, len(jobs), batch_size), disable=not progress, desc="patching", unit="batch"):
        chunk = jobs[start:start + batch_size]
        losses.append(_batch_losses(ctx.model, cache, dense, chunk, ctx.suffix_ids, answer, hooks))
    losses = torch.cat(losses)  # [job]
    return pd.DataFrame({
        "position": [p for p, _ in jobs[1:]],
        "kind": [k for _, k in jobs[1:]],
        "delta_loss": (losses[1:] - losses[0]).double().numpy(),
    })


def sample_positions(ctx, max_tokens: int = 64, seed: int = 0) -> torch.Tensor:
    """All reused positions if there are at most `max_tokens`; else a seeded stratified sample.

    Each passage gets an equal share (a short passage's unused share goes to the others),
    drawn at random within the passage. Sorted. [n]
    """
    if max_tokens < 1:
        raise WorkbenchError(f"max_tokens must be at least 1, got {max_tokens}")
    if ctx.n_reused <= max_tokens:
        return ctx.reused_positions.clone()
    passages = ctx.layout.passages
    shares, left = [0] * len(passages), max_tokens
    while left:
        open_ = [i for i, s in enumerate(passages) if shares[i] < len(s)]
        each = max(left // len(open_), 1)
        for i in open_:
            take = min(each, len(passages[i]) - shares[i], left)
            shares[i] += take
            left -= take
    gen = torch.Generator().manual_seed(seed)
    picks = [s.start + torch.randperm(len(s), generator=gen)[:k] for s, k in zip(passages, shares)]
    return torch.sort(torch.cat(picks)).values


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman rank correlation of the first-order estimate with the actual patch effect."""

    rho: float
    p_value: float
    n: int


@dataclass(frozen=True)
class AttributionCheck:
    """First-order (attribution-patching) estimates against actual patch effects, per token."""

    frame: pd.DataFrame  # position, segment, kind, estimate, actual
    correlations: dict[str, RankCorrelation]  # by kind: "kv", "k", "v"

    def summary(self) -> str:
        """One line: the rank correlations and whether keys track worse than values."""
        c = self.correlations
        parts = ", ".join(f"{k.upper()} {c[k].rho:.2f} (p={c[k].p_value:.2g})" for k in PATCH_KINDS)
        rho_k, rho_v = c["k"].rho, c["v"].rho
        if math.isnan(rho_k) or math.isnan(rho_v):
            verdict = "keys and values cannot be compared (an undefined correlation)"
        elif rho_k < rho_v:
            verdict = "the estimate tracks the actual effect worse through keys than through values"
        else:
            verdict = "the estimate tracks the actual effect no worse through keys than through values"
        return f"Spearman rho(first-order, actual dL) over {c['kv'].n} tokens: {parts}; {verdict}"


def attribution_check(ctx, saliency: Saliency, max_tokens: int = 64, seed: int = 0,
                      cache: KVCache | None = None, batch_size: int = 8, hooks=None) -> AttributionCheck:
    """Patch the tokens of `sample_positions` one at a time and rank-correlate the actual change
    in the decision loss with `saliency`'s first-order estimate, for K+V, K only and V only.

    `cache` (default: the splice) must be the cache `saliency` was computed on, and `hooks` the
    hooks it ran under (`patch_effects`).
    """
    pos = sample_positions(ctx, max_tokens, seed)
    index = {int(p): i for i, p in enumerate(saliency.positions.tolist())}
    missing = [int(p) for p in pos if int(p) not in index]
    if missing:
        raise WorkbenchError(f"the saliency does not cover positions {missing[:8]}: compute it on this context")
    effects = patch_effects(ctx, pos, saliency.answer_ids, cache=cache, batch_size=batch_size, hooks=hooks)
    estimates = {"kv": saliency.first_order, "k": saliency.first_order_k, "v": saliency.first_order_v}
    names = ctx.layout.segment_names()
    frame = pd.DataFrame({
        "position": effects["position"],
        "segment": [names[p] for p in effects["position"]],
        "kind": effects["kind"],
        "estimate": [float(estimates[k][index[p]]) for p, k in zip(effects["position"], effects["kind"])],
        "actual": effects["delta_loss"],
    })
    correlations = {}
    for kind in PATCH_KINDS:
        rows = frame[frame["kind"] == kind]
        result = spearmanr(rows["estimate"], rows["actual"])
        correlations[kind] = RankCorrelation(float(result.statistic), float(result.pvalue), len(rows))
    return AttributionCheck(frame, correlations)
