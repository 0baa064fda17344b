"""The unit-of-choice error curve (BCR §4.2, Table 8): how much choosing well is worth as the
unit of choice grows. The protocol, column by column, is in docs/PROTOCOLS.md.

    run_curve(model, Path("runs/curve"), tokens=2048, prompts=6)   # -> manifest.json, curve/summary.parquet

For each prompt (`context_of_length(model, tokens, seed + p)`), restore a nominal budget of the
splice's reused rows to their dense values, grouped into `unit`-row chunks (BCR Table 8's
count: `select_rows(..., chunk_counting="table8")`) and chosen by BCR's draft attention
(informed) or a seeded coin (random); the error is the pooled relative L2 distance of the
question suffix's attention output from the dense one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from workbench.context import context_of_length
from workbench.engine.hooks import caching_hooks
from workbench.errors import WorkbenchError
from workbench.seeds import check_seed, derive_seed
from workbench.layout import POOLS
from workbench.kv import KVCache
from workbench.models import LoadedModel, model_identity
from workbench.repair import recompute_rows
from workbench.runstore import check_out, finished, new_manifest, write_run
from workbench.selectors import random_scores, select_rows
from workbench.signals.attention import attention_rows, draft_attention
from workbench.stats import paired_t

DEFAULT_UNITS = (1, 16, 64, 256, 1024)
MATCH_TOLERANCE = 0.10  # relative: |share - budget| <= 0.10 * budget counts as budget-matched
METHODS = ("informed", "random")
PROTOCOL = {
    "reference": "BCR §4.2 / Table 8",
    "prompt": "workbench.context.context_of_length(model, tokens, seed + p)",
    "restore": "copy dense K/V rows into the splice at every layer (KVCache.with_rows)",
    "queries": "every question-suffix row over the dense cache, post-RoPE, per query head",
    "error": "||O_restored - O_dense|| / ||O_dense||, pooled over layers, heads, queries",
    "units": "consecutive unit-row chunks over the reused rows; keep max(1, round(budget*n_chunks)) by mean score",
    "informed": "draft_attention(ctx) on the splice, .scores(reused_positions)",
    "random": "random_scores(n_segment, derive_seed(seed, 'curve', prompt, draw))",
    "budget_matched": f"every prompt's share within {MATCH_TOLERANCE:.0%} (relative) of the budget",
}


# ----------------------------------------------------------------------------- validation

def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_curve_args(tokens, prompts, units, budget, seeds, seed) -> tuple[int, int, tuple[int, ...], float, int, int]:
    """Validate the run's arguments (before any work); return them normalized."""
    if not _is_int(tokens) or tokens < 32:
        raise WorkbenchError(f"tokens must be an integer >= 32, got {tokens!r}")
    if not _is_int(prompts) or prompts < 2:
        raise WorkbenchError(f"prompts must be an integer >= 2 (a paired t needs two prompts), got {prompts!r}")
    if isinstance(units, (str, bytes)) or not hasattr(units, "__iter__"):
        raise WorkbenchError(f"units must be a sequence of integers >= 1, got {units!r}")
    units = tuple(units)
    if not units:
        raise WorkbenchError("units must name at least one unit of choice (rows per chunk), e.g. 1,16,64")
    bad = [u for u in units if not _is_int(u) or u < 1]
    if bad:
        raise WorkbenchError(f"every unit must be an integer >= 1 (rows per chunk); bad: {bad}")
    if len(set(units)) != len(units):
        raise WorkbenchError(f"units must not repeat, got {list(units)}")
    try:
        budget_f = float(budget)
    except (TypeError, ValueError):
        raise WorkbenchError(f"budget must be a number in (0, 1], got {budget!r}") from None
    if isinstance(budget, bool) or not (math.isfinite(budget_f) and 0.0 < budget_f <= 1.0):
        raise WorkbenchError(f"budget must be a fraction in (0, 1] of the reused rows, got {budget!r}")
    if not _is_int(seeds) or seeds < 1:
        raise WorkbenchError(f"seeds (random draws per prompt and unit) must be an integer >= 1, got {seeds!r}")
    check_seed(seed)
    return int(tokens), int(prompts), tuple(sorted(int(u) for u in units)), budget_f, int(seeds), int(seed)


# ----------------------------------------------------------------------------- seeds


def random_seed_for(seed: int, prompt: int, draw: int) -> int:
    """The generator seed of random draw `draw` on prompt `prompt` of a run with `seed`."""
    return derive_seed(seed, "curve", prompt, draw)


# ----------------------------------------------------------------------------- restore + probe

@dataclass
class AttentionProbe:
    """The consuming queries of one context and the dense attention output they produce.

    `error(positions)` is the pooled relative L2 error of the attention output when the
    splice has the dense rows at `positions` restored (no cache is copied: each layer's K/V
    is mixed on the fly); `cache_error(cache)` is the same for any cache of the span.
    """

    queries: list[torch.Tensor]  # per layer [row, head, d_head], fp32, post-RoPE
    query_positions: torch.Tensor  # [row]
    suffix_keys: list[torch.Tensor]  # per layer [kv_head, row, d_head] (dense run), fp32
    suffix_values: list[torch.Tensor]  # per layer [kv_head, row, d_head], fp32
    dense: KVCache
    spliced: KVCache
    scaling: float
    windows: tuple[int | None, ...]  # [layer] sliding window (None: full attention)
    dense_outputs: list[torch.Tensor]  # per layer [head, row, d_head], fp32
    dense_sq: float  # sum over layers of ||O_dense||^2

    @property
    def n_positions(self) -> int:
        return self.dense.n_positions

    def _output(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Attention output [head, row, d_head] of the layer's queries over keys/values [kv_head, pos, d]."""
        k = torch.cat([keys.float(), self.suffix_keys[layer]], dim=1)
        v = torch.cat([values.float(), self.suffix_values[layer]], dim=1)
        probs = attention_rows(self.queries[layer], k, self.query_positions, self.scaling,
                               self.windows[layer])  # [head, row, key]
        group = probs.shape[0] // v.shape[0]
        return torch.einsum("hrk,hkd->hrd", probs, v.repeat_interleave(group, dim=0))

    def _pooled(self, outputs) -> float:
        diff_sq = sum(float((o - d).pow(2).sum()) for o, d in zip(outputs, self.dense_outputs))
        return math.sqrt(diff_sq / self.dense_sq) if self.dense_sq > 0 else 0.0

    @torch.inference_mode()
    def cache_error(self, cache: KVCache) -> float:
        """Pooled relative L2 error of the attention output over `cache` against the dense one."""
        if cache.n_positions != self.n_positions or cache.n_layers != self.dense.n_layers:
            raise WorkbenchError(f"the cache must cover {self.n_positions} positions and "
                                 f"{self.dense.n_layers} layers like the dense cache")
        return self._pooled(self._output(l, cache.keys[l], cache.values[l]) for l in range(cache.n_layers))

    @torch.inference_mode()
    def error(self, positions) -> float:
        """Pooled relative L2 error with the dense rows at absolute `positions` restored in the splice."""
        mask = torch.zeros(self.n_positions, dtype=torch.bool, device=self.dense.keys.device)
        pos = torch.as_tensor(positions, dtype=torch.long)
        if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= self.n_positions):
            raise WorkbenchError(f"positions must lie in [0, {self.n_positions})")
        mask[pos.to(mask.device)] = True
        m = mask[None, :, None]

        def outputs():
            for l in range(self.dense.n_layers):
                keys = torch.where(m, self.dense.keys[l], self.spliced.keys[l])
                values = torch.where(m, self.dense.values[l], self.spliced.values[l])
                yield self._output(l, keys, values)
        return self._pooled(outputs())


@torch.inference_mode()
def attention_probe(ctx) -> AttentionProbe:
    """Record the question suffix's queries over the dense cache and the dense attention outputs.

    The suffix runs through the engine over the dense cache (`repair.recompute_rows`); its queries
    are read at `hook_rot_q`, its keys and values from the cache the pass grows.
    """
    model, ad, dense = ctx.model, ctx.model.adapter, ctx.reference("attention_probe")
    n = ctx.layout.suffix_start
    query_pos = torch.arange(n, ctx.layout.n_tokens, device=model.device)  # [row]
    acts: dict[str, torch.Tensor] = {}
    names = [f"blocks.{l}.attn.hook_rot_q" for l in range(ad.n_layers)]
    grown, _ = recompute_rows(model, dense, ctx.layout.ids, query_pos, hooks=caching_hooks(names, acts))
    queries = [acts[name][0].float() for name in names]  # per layer [row, head, d_head]
    s_keys = [k[:, n:].float() for k in grown.keys]  # per layer [kv_head, row, d_head]
    s_values = [v[:, n:].float() for v in grown.values]
    probe = AttentionProbe(queries=queries, query_positions=query_pos, suffix_keys=s_keys,
                           suffix_values=s_values, dense=dense, spliced=ctx.spliced,
                           scaling=ad.scaling, windows=ad.windows, dense_outputs=[], dense_sq=0.0)
    probe.dense_outputs = [probe._output(l, dense.keys[l], dense.values[l]) for l in range(ad.n_layers)]
    probe.dense_sq = sum(float(o.pow(2).sum()) for o in probe.dense_outputs)
    return probe


# ----------------------------------------------------------------------------- the run

def _segment(ctx, pool: str) -> torch.Tensor:
    """Absolute positions of the segment: the candidate pool (`Layout.pool_positions`): by default
    the rows computed under a changed prefix, the paper's setting. [n_segment]"""
    segment = ctx.layout.pool_positions(pool)
    if segment.numel() == 0:
        raise WorkbenchError(f"example {ctx.example.id} has {len(ctx.layout.passages)} passage(s): no rows "
                             f"under a changed prefix (use pool='all')")
    return segment


def curve_rows(model, tokens: int, prompts: int, units, budget: float, seeds: int, seed: int,
               progress: bool = False, pool: str = "changed") -> tuple[pd.DataFrame, list[dict]]:
    """Measure the curve; return (curve table, per-prompt info). No validation, no writing."""
    rows, info = [], []
    iterator = range(prompts)
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(iterator, desc="prompts")
    for p in iterator:
        started = time.perf_counter()
        ctx = context_of_length(model, tokens, seed + p)
        reused = _segment(ctx, pool)
        n = int(reused.numel())
        if n == 0:
            raise WorkbenchError(f"prompt {p} has no reused rows")
        probe = attention_probe(ctx)
        unrepaired = probe.error(reused[:0])
        full = probe.error(reused)
        informed = draft_attention(ctx).scores(reused)  # [n]: the draft over the whole splice, read at the segment
        rseeds = [random_seed_for(seed, p, s) for s in range(seeds)]
        coins = [random_scores(n, rs) for rs in rseeds]
        base = {"prompt": p, "prompt_seed": seed + p, "n_tokens": ctx.layout.n_tokens, "n_segment": n,
                "unrepaired_error": unrepaired, "full_restore_error": full}
        for unit in units:
            draws = [("informed", pd.NA, pd.NA, informed)] + [
                ("random", s, rs, c) for s, (rs, c) in enumerate(zip(rseeds, coins))]
            for method, seed_index, rseed, scores in draws:
                sel = select_rows(scores, math.ceil(budget * n), "chunk", chunk_size=unit,
                                  chunk_counting="table8", share=budget)
                err = probe.error(reused[sel.rows])
                rows.append({**base, "unit": unit, "method": method, "seed_index": seed_index,
                             "seed": rseed, "n_chunks": math.ceil(n / unit), "n_kept": sel.n_units,
                             "n_rows_restored": sel.n_spent, "budget_share": sel.n_spent / n,
                             "error": err})
        info.append({"prompt": p, "prompt_seed": seed + p, "example_id": ctx.example.id,
                     "n_tokens": ctx.layout.n_tokens, "n_segment": n, "n_queries": len(probe.query_positions),
                     "unrepaired_error": unrepaired, "full_restore_error": full,
                     "seconds": time.perf_counter() - started})
    curve = pd.DataFrame(rows)
    for col in ("seed_index", "seed"):
        curve[col] = curve[col].astype("Int64")
    return curve, info


def summarize(curve: pd.DataFrame, budget: float) -> pd.DataFrame:
    """One row per unit from a curve table (see the module docstring for each column)."""
    out = []
    for unit, g in curve.groupby("unit", sort=True):
        inf = g[g["method"] == "informed"].set_index("prompt")["error"].sort_index()
        rnd = g[g["method"] == "random"].groupby("prompt")["error"].mean().reindex(inf.index)
        unrep = g.groupby("prompt")["unrepaired_error"].first().reindex(inf.index)
        share = g["budget_share"]
        kept = g[g["method"] == "informed"]["n_kept"]
        chunks = g[g["method"] == "informed"]["n_chunks"]
        test = paired_t(rnd.to_numpy(), inf.to_numpy())
        gap = float(rnd.mean() - inf.mean())
        matched = bool(((share - budget).abs() <= MATCH_TOLERANCE * budget + 1e-12).all())
        out.append({
            "unit": int(unit), "n_chunks": float(chunks.mean()), "n_kept": float(kept.mean()),
            "budget_share": float(share.mean()), "budget_share_min": float(share.min()),
            "budget_share_max": float(share.max()), "budget_matched": matched,
            "informed_budget_share": float(g.loc[g["method"] == "informed", "budget_share"].mean()),
            "random_budget_share": float(g.loc[g["method"] == "random", "budget_share"].mean()),
            "informed_error": float(inf.mean()), "random_error": float(rnd.mean()),
            "random_seed_sd": float(g[g["method"] == "random"].groupby("prompt")["error"].std(ddof=0).mean()),
            "gap": gap, "unrepaired_error": float(unrep.mean()),
            "gap_share": gap / float(unrep.mean()) if float(unrep.mean()) > 0 else math.nan,
            "prompts_won": int((inf < rnd).sum()), "n_prompts": int(len(inf)),
            "t": test.t, "p_value": test.p_value,
        })
    return pd.DataFrame(out)


def run_curve(model: LoadedModel, out: Path, tokens: int = 2048, prompts: int = 6, units=DEFAULT_UNITS,
              budget: float = 0.2, seeds: int = 5, seed: int = 0, progress: bool = True,
              force: bool = False, pool: str = "changed") -> Path:
    """Measure the unit-of-choice curve on `model` and write the run folder `out`; return it.

    Arguments are validated and `out` is checked (refused if it exists, unless `force`)
    before any work. The folder appears only when complete.
    """
    tokens, prompts, units, budget, seeds, seed = check_curve_args(tokens, prompts, units, budget, seeds, seed)
    out = check_out(out, kind="curve", force=force)
    if pool not in POOLS:
        raise WorkbenchError(f"pool must be one of {', '.join(POOLS)}, got {pool!r}")
    args = {"tokens": tokens, "prompts": prompts, "units": list(units), "budget": budget,
            "seeds": seeds, "seed": seed, "pool": pool}
    manifest = new_manifest("curve", model_identity(model), args)
    t0 = time.perf_counter()
    curve, info = curve_rows(model, tokens, prompts, units, budget, seeds, seed, progress, pool)
    segment = "rows under a changed prefix (passages after the first)" if pool == "changed" else "all passage rows"
    manifest = finished(manifest, seconds=time.perf_counter() - t0, prompts=info,
                        protocol={**PROTOCOL, "segment": segment})
    check_out(out, kind="curve", force=force)  # it may have appeared while the curve ran
    return write_run(out, manifest, {"curve": curve, "summary": summarize(curve, budget)})
