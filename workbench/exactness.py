"""Exactness self-checks on any device and dtype (issue 30): what the unit tests check on tiny
models, as one call a device run makes on a real shape before it times anything.

    report = check_exactness(ctx)          # {"ok": bool, "dtype": ..., "checks": {name: {...}}}

    splice_layer0  layer 0 of the splice equals dense within the dtype-aware tolerance
                   (`Context.check_splice`)
    full_repair    repairing every reused row gives dense: K/V relative errors within
                   `KV_TOLERANCE[dtype]` and the same greedy answer (a divergence where dense's
                   top two logits are closer than that tolerance is a near tie, not a failure)
    batched_cells  a mixed batch of row sets in one pass (`run_cells`) equals the serial repair
                   of each, within the same tolerance
    host_syncs     neither the batched repair nor the batched decode reads a value back to the
                   host inside the layer loop (`host_syncs`; on CUDA torch's sync debug mode too)
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from workbench.context import Context
from workbench.engine.answers import answer_cells
from workbench.engine.cells import Cell, materialize, run_cells
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.repair import recompute_rows

# Largest relative (Frobenius) K/V error of a recomputation against its reference, per dtype.
KV_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 0.05, torch.float16: 0.01}

# What forces a GPU to hand its results to the host: reading values (item, tolist, bool, int,
# float, numpy), data-dependent shapes (nonzero, masked_select, unique) and copies to the CPU.
SYNCING = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu", "nonzero", "argwhere",
           "masked_select", "unique", "unique_consecutive"}

# The warning torch's CUDA sync debug mode gives at each synchronising call (c10's
# warn_or_error_on_sync). Only this counts: the mode's own once-per-process notice ("Synchronization
# debug mode is a prototype feature and does not yet detect all synchronizing operations") is not a
# sync, and matching "synchroniz" took it for one on the first GPU run.
SYNC_WARNING = "called a synchronizing CUDA operation"


def sync_sites(caught: list[warnings.WarningMessage]) -> list[str]:
    """The file:line of each synchronising call among `caught` warnings, sorted, each once."""
    return sorted({f"{Path(w.filename).name}:{w.lineno}" for w in caught if SYNC_WARNING in str(w.message)})


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| over the whole tensor (Frobenius norms, fp32)."""
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


class HostSyncs(torch.overrides.TorchFunctionMode):
    """Records every host-syncing call (bool-mask indexing included) made while `inside` is set."""

    def __init__(self):
        super().__init__()
        self.inside, self.calls = False, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if self.inside:
            bool_index = name in ("__getitem__", "__setitem__") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in (args[1] if isinstance(args[1], tuple) else (args[1],)))
            if name in SYNCING or bool_index or (name == "to" and "cpu" in map(str, (*args[1:], *(kwargs or {}).values()))):
                self.calls.append(name)
        return func(*args, **(kwargs or {}))


@contextmanager
def _layer_loop_watched(model, log: HostSyncs, cuda: bool):
    """Set `log.inside` (and, on CUDA, torch's sync debug mode) from the first layer's projections
    to the last layer's output. The adapter is frozen: its class is patched, and restored."""
    adapter, last = type(model.adapter), len(model.adapter.layers) - 1
    project, finish = adapter.project_qkv, adapter.finish_layer

    def entering(self, l, *args, **kwargs):
        log.inside = True
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        return project(self, l, *args, **kwargs)

    def leaving(self, l, *args, **kwargs):
        out = finish(self, l, *args, **kwargs)
        log.inside = l != last
        if cuda and not log.inside:
            torch.cuda.set_sync_debug_mode("default")
        return out

    adapter.project_qkv, adapter.finish_layer = entering, leaving
    try:
        yield
    finally:
        adapter.project_qkv, adapter.finish_layer = project, finish
        if cuda:
            torch.cuda.set_sync_debug_mode("default")


def check_row_sets(ctx: Context) -> list[torch.Tensor]:
    """The reused rows the batched checks repair: empty, scattered, a span, every row, ... [n_i] each."""
    r = ctx.reused_positions
    return [r[:0], r[::3], r[5:40], r, r[::7], r[-1:]]


def answer_every_cell_leaves(model, dense_ids) -> list[int]:
    """An answer differing from `dense_ids` at every token, so each cell's decode leaves it at once."""
    return [(t + 1) % model.hf.config.vocab_size for t in dense_ids] or [1]


def host_syncs(ctx: Context, row_sets: list[torch.Tensor], reference: list[int], max_new_tokens: int = 8) -> dict:
    """Run the batched repair of `row_sets` and the batched answers of the first three with a
    `reference` every cell leaves at once (so the decode loop runs), recording host syncs inside
    the layer loop: {"calls": torch calls that sync, "cuda_syncs": the file:line of each sync
    torch's sync debug mode saw (CUDA only), "decode_steps": decode steps run}."""
    model, log = ctx.model, HostSyncs()
    cuda = model.device.type == "cuda"
    with warnings.catch_warnings(record=True) as caught, _layer_loop_watched(model, log, cuda), log:
        warnings.simplefilter("always")
        run_cells(model, ctx.spliced, [Cell(s, ctx.layout.ids[s]) for s in row_sets])
        got = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets[:3], ctx.suffix_ids, reference,
                           max_new_tokens)
    return {"calls": sorted(set(log.calls)), "cuda_syncs": sync_sites(caught),
            "decode_steps": sum(cell.decode_steps for cell in got)}


def _kv_errors(got: KVCache, want: KVCache) -> dict[str, float]:
    return {"k": rel(got.keys, want.keys), "v": rel(got.values, want.values)}


def _answers(ctx: Context, cache: KVCache, dense_ids: tuple[int, ...], tol: float, max_new_tokens: int) -> dict:
    """Whether `cache`'s greedy answer equals dense's; at a divergence, dense's top-two logit gap
    there and whether it is a near tie (gap <= tol * max |logit|)."""
    ids = ctx.generate(cache, max_new_tokens).token_ids
    if ids == dense_ids:
        return {"equal": True, "tokens": len(ids)}
    step = next((i for i, (a, b) in enumerate(zip(ids, dense_ids)) if a != b), min(len(ids), len(dense_ids)))
    logits = dense_next_logits(ctx, torch.tensor(dense_ids[:step], dtype=torch.long))
    top = logits.topk(2).values
    gap, scale = float(top[0] - top[1]), float(logits.abs().max())
    return {"equal": False, "tokens": len(ids), "divergence_step": step, "dense_gap": gap,
            "near_tie": gap <= tol * scale}


def dense_next_logits(ctx: Context, answer_ids: torch.Tensor) -> torch.Tensor:
    """The next token's logits ([vocab], fp32) after the question and `answer_ids` ([step]) over
    dense, through the engine's forward entry (`repair.recompute_rows`, rows past dense's end)."""
    n = ctx.dense.n_positions
    ids = torch.cat([ctx.layout.ids[:n].cpu(), ctx.suffix_ids.cpu(), answer_ids.cpu()])  # [pos]
    _, h = recompute_rows(ctx.model, ctx.dense, ids, torch.arange(n, len(ids)))  # [row, hidden]
    with torch.inference_mode():
        return ctx.model.adapter.logits(h[-1:])[0].float()


def check_exactness(ctx: Context, max_new_tokens: int = 8) -> dict:
    """Every check of the module docstring on one context; never raises on a failed check."""
    model, dtype = ctx.model, ctx.reference("check_exactness").keys.dtype
    if dtype not in KV_TOLERANCE:
        raise WorkbenchError(f"no exactness tolerance for {dtype}; use one of {list(KV_TOLERANCE)}")
    tol, checks = KV_TOLERANCE[dtype], {}
    limits = ctx.splice_tolerance()
    err = ctx.layer0_error()
    checks["splice_layer0"] = {"ok": all(err[k] <= limits[k] for k in err), "error": err, "tolerance": limits}

    dense = ctx.generate(ctx.dense, max_new_tokens)
    full = ctx.repair(ctx.reused_positions)
    kv = _kv_errors(full, ctx.dense)
    answers = _answers(ctx, full, dense.token_ids, tol, max_new_tokens)
    checks["full_repair"] = {"ok": max(kv.values()) <= tol and (answers["equal"] or answers["near_tie"]),
                             "kv_rel": kv, "tolerance": tol, "answers": answers}

    row_sets = check_row_sets(ctx)
    cells = run_cells(model, ctx.spliced, [Cell(s, ctx.layout.ids[s]) for s in row_sets])
    worst = [max(_kv_errors(materialize(ctx.spliced, cell), ctx.repair(s)).values()) for s, cell in zip(row_sets, cells)]
    checks["batched_cells"] = {"ok": max(worst) <= tol, "kv_rel_per_cell": worst, "tolerance": tol}

    syncs = host_syncs(ctx, row_sets, answer_every_cell_leaves(model, dense.token_ids), max_new_tokens)
    checks["host_syncs"] = {"ok": not syncs["calls"] and not syncs["cuda_syncs"] and syncs["decode_steps"] > 0,
                            **syncs}
    return {"ok": all(c["ok"] for c in checks.values()), "dtype": str(dtype).removeprefix("torch."),
            "device": str(model.device), "n_tokens": ctx.layout.n_tokens, "n_reused": ctx.n_reused,
            "checks": checks}
