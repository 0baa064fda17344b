"""The unit-of-choice error curve (BCR §4.2, Table 8): how much choosing well is worth as the
unit of choice grows.

Paper protocol: one 2048-token reused segment, six prompts; restore a nominal 20% of the
segment's rows, varying only how rows are grouped (unit = 1, 16, 64, 256, 1024 rows) and
chosen: by attention from the consuming context's decode queries (informed) or at random
(several seeds). Error is the relative L2 distance of the attention output from the dense
cache's, pooled over layers and heads.

What this module computes, precisely:

* **Prompt.** Prompt p (p = 0..prompts-1) is `workbench.bench.context_of_length(model, tokens,
  seed + p)`: a synthetic multi-passage example padded with filler to about `tokens` tokens
  *in all* (chat frame + passages + question), whose passages are prefilled in isolation and
  spliced, so the reused span carries real cross-passage error. The reused segment is
  `ctx.reused_positions` (every passage token; its size, `n_segment` in the tables, is
  somewhat below `tokens` and varies a little between prompts). The shared prefix is
  identical in the splice and the dense cache and is never counted. Note that the FIRST
  passage is exact in the splice too (its sender prefilled it after the same prefix at the
  same positions), so about a quarter of those rows carry no error and restoring them is
  wasted; `skip_first_passage=True` (CLI `--skip-first-passage`) takes the segment as the
  passages after the first instead, i.e. only rows the splice actually changed.
* **Restore.** Restoring a set of reused rows copies the dense K and V rows of those
  positions into (a copy of) the splice at every layer. Restoring, not recomputing, isolates
  the value of the choice, as the paper does (a recompute of a few rows would still see the
  other spliced rows).
* **Consuming queries.** Every position of the question suffix (`ctx.suffix_ids`: the
  question, the end of the user turn and the assistant header) run over the DENSE cache:
  per layer, the query rows after RoPE for every query head (recorded with the forward
  pre-hooks of `workbench.signals.attention`). No drafted token is added: the suffix's last
  row is the query that produces the first answer token.
* **Attention output.** Per layer l, O_l = softmax(q K^T * scaling, causal) V with grouped
  K/V heads expanded to query heads, for the same queries against (a) the dense K/V and
  (b) the restored cache's K/V. The suffix's own K/V rows come from the dense run in both,
  so only the handed-off rows differ.
* **Error.** ||O_restored - O_dense|| / ||O_dense||, both norms pooled over all layers
  (layer 0 included: it is exact in the splice), heads, query rows and d_head:
  sqrt(sum_l ||dO_l||^2 / sum_l ||O_l||^2). Unrepaired error = the same with nothing restored.
* **Units.** The n_segment rows (in context order, passage boundaries ignored: the paper's
  segment is one span) are cut into consecutive `unit`-row chunks (the last may be short);
  each chunk scores the mean of its rows; the top max(1, round(budget * n_chunks)) chunks
  are restored whole (Python's round, half to even; ties go to the earlier chunk). Unit 1
  is single rows. This is Table 8's rule, not BCR's Algorithm 1 (which skips when
  n < 2B or the budget is under one chunk): coarse units are therefore NOT budget-matched
  (unit 256 of 2048 rows keeps 2 of 8 chunks = 25%; unit 1024 keeps 1 of 2 = 50%).
  A unit counts as budget-matched when every achieved share (each prompt, method, seed) is within
  MATCH_TOLERANCE (10%, relative) of the nominal budget: 16 (20.3%) and 64 (18.8%) are,
  256 (25%) and 1024 (50%) are not.
* **Informed scores.** BCR's draft attention on the splice (the receiver's view):
  `draft_attention(ctx).scores(ctx.reused_positions)`, one score per reused row.
* **Random scores.** `random_scores(n_segment, s)` for seed index s = 0..seeds-1, with the
  generator seed derived from (seed, prompt, s) by `numpy.random.SeedSequence` (recorded
  in the `seed` column); the same random scores are grouped at every unit.
* **Summary per unit.** informed error (mean over prompts), random error (mean over prompts
  of the mean over seeds), gap = random - informed, gap share = gap / unrepaired error
  (ratio of the means), prompts where informed won (informed < that prompt's random mean),
  paired t over prompts of random vs informed (`workbench.stats.paired_t`; NaN when every
  difference is equal, e.g. a unit that restores everything), the achieved budget share
  (mean, min, max over every prompt, method and seed: informed and random can differ when
  one keeps the short last chunk; `informed_budget_share` and `random_budget_share` give
  the two means) and whether it is budget-matched.

Run folder (`run_curve`, written atomically: a temporary sibling folder, then a rename):
``manifest.json`` (kind "curve"), ``curve.parquet`` (one row per prompt x unit x method x
seed) and ``summary.parquet`` (one row per unit). `load_curve(folder)` reads it back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.experiments.runstore import now, package_versions, write_folder
from workbench.kv import KVCache
from workbench.selectors.layouts import random_scores
from workbench.signals.attention import attention_rows, draft_attention, record_queries
from workbench.stats import paired_t

KIND = "curve"
SCHEMA_VERSION = 1
DEFAULT_UNITS = (1, 16, 64, 256, 1024)
MATCH_TOLERANCE = 0.10  # relative: |share - budget| <= 0.10 * budget counts as budget-matched
METHODS = ("informed", "random")

__all__ = [
    "AttentionProbe", "UnitSelection", "DEFAULT_UNITS", "MATCH_TOLERANCE", "add_curve_arguments",
    "attention_probe", "check_curve_args", "chunks_kept", "curve_main", "curve_rows", "load_curve",
    "random_seed_for",
    "restore_rows", "run_curve", "select_units", "summarize", "summary_markdown", "unit_chunks",
]


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
    if not _is_int(seed) or seed < 0:
        raise WorkbenchError(f"seed must be an integer >= 0, got {seed!r}")
    return int(tokens), int(prompts), tuple(sorted(int(u) for u in units)), budget_f, int(seeds), int(seed)


# ----------------------------------------------------------------------------- units (Table 8)

def unit_chunks(n: int, unit: int) -> list[tuple[int, int]]:
    """Consecutive `unit`-row chunks over rows 0..n-1 as half-open spans; the last may be short."""
    if not _is_int(n) or n < 0:
        raise WorkbenchError(f"n must be an integer >= 0, got {n!r}")
    if not _is_int(unit) or unit < 1:
        raise WorkbenchError(f"unit must be an integer >= 1, got {unit!r}")
    return [(a, min(a + unit, n)) for a in range(0, n, unit)]


def chunks_kept(n_chunks: int, budget: float) -> int:
    """Table 8's budget rule: max(1, round(budget * n_chunks)) chunks (Python's round), capped at n_chunks."""
    if n_chunks <= 0:
        return 0
    return min(n_chunks, max(1, round(budget * n_chunks)))


@dataclass(frozen=True)
class UnitSelection:
    """Rows (indices into the n scored rows, ascending) of the chunks a unit keeps."""

    rows: torch.Tensor  # [k] int64
    unit: int
    n_chunks: int
    n_kept: int
    spans: tuple[tuple[int, int], ...]

    @property
    def n_rows(self) -> int:
        return int(self.rows.numel())


def select_units(scores: torch.Tensor, unit: int, budget: float) -> UnitSelection:
    """Keep the max(1, round(budget * n_chunks)) `unit`-row chunks with the highest mean score.

    scores: [n] finite. Ties between chunk means go to the earlier chunk.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1:
        raise WorkbenchError("scores must be a 1-D tensor with one score per reused row")
    s = scores.detach().to("cpu", torch.float64)
    if not torch.isfinite(s).all():
        raise WorkbenchError("scores must be finite")
    chunks = unit_chunks(s.numel(), unit)
    if not chunks:
        return UnitSelection(torch.zeros(0, dtype=torch.long), unit, 0, 0, ())
    means = torch.stack([s[a:b].mean() for a, b in chunks])
    k = chunks_kept(len(chunks), budget)
    picked = sorted(torch.sort(means, descending=True, stable=True).indices[:k].tolist())
    spans = tuple(chunks[c] for c in picked)
    rows = torch.cat([torch.arange(a, b) for a, b in spans])
    return UnitSelection(rows, unit, len(chunks), k, spans)


def random_seed_for(seed: int, prompt: int, draw: int) -> int:
    """The generator seed of random draw `draw` on prompt `prompt` of a run with `seed`."""
    state = np.random.SeedSequence([seed, prompt, draw]).generate_state(1, np.uint64)[0]
    return int(state) >> 1  # 63 bits: a valid torch seed and a parquet int64


# ----------------------------------------------------------------------------- restore + probe

def restore_rows(spliced: KVCache, dense: KVCache, positions) -> KVCache:
    """A copy of `spliced` with the dense K and V rows at `positions` (absolute) at every layer."""
    pos = torch.as_tensor(positions, dtype=torch.long).to(spliced.keys.device)
    keys, values = spliced.keys.clone(), spliced.values.clone()
    keys[:, :, pos] = dense.keys[:, :, pos]
    values[:, :, pos] = dense.values[:, :, pos]
    return KVCache(keys, values)


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
    dense_outputs: list[torch.Tensor]  # per layer [head, row, d_head], fp32
    dense_sq: float  # sum over layers of ||O_dense||^2

    @property
    def n_positions(self) -> int:
        return self.dense.n_positions

    def _output(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Attention output [head, row, d_head] of the layer's queries over keys/values [kv_head, pos, d]."""
        k = torch.cat([keys.float(), self.suffix_keys[layer]], dim=1)
        v = torch.cat([values.float(), self.suffix_values[layer]], dim=1)
        probs = attention_rows(self.queries[layer], k, self.query_positions, self.scaling)  # [head, row, key]
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

    Uses `workbench.signals.attention.record_queries` (k=None: every suffix row, nothing drafted).
    """
    model, ad = ctx.model, ctx.model.adapter
    n = ctx.layout.suffix_start
    hidden, hf_cache, _ = record_queries(model, ctx.dense, ctx.suffix_ids, None)
    query_pos = torch.arange(n, n + hidden[0].shape[0], device=model.device)  # [row]
    queries, s_keys, s_values = [], [], []
    for l in range(ad.n_layers):
        q, _, _ = ad.project_qkv(l, hidden[l])  # [row, head, d_head]
        queries.append(ad.rotate(q, query_pos).float())
        layer = hf_cache.layers[l]
        s_keys.append(layer.keys[0, :, n:].float())
        s_values.append(layer.values[0, :, n:].float())
    probe = AttentionProbe(queries=queries, query_positions=query_pos, suffix_keys=s_keys,
                           suffix_values=s_values, dense=ctx.dense, spliced=ctx.spliced,
                           scaling=ad.scaling, dense_outputs=[], dense_sq=0.0)
    probe.dense_outputs = [probe._output(l, ctx.dense.keys[l], ctx.dense.values[l]) for l in range(ad.n_layers)]
    probe.dense_sq = sum(float(o.pow(2).sum()) for o in probe.dense_outputs)
    return probe


# ----------------------------------------------------------------------------- the run

def _check_out(out, force: bool) -> Path:
    if out is None:
        raise WorkbenchError("out: give the run folder to write")
    out = Path(out)
    if out.exists() and not force:
        raise WorkbenchError(f"{out} exists; pass force=True (or --force) to replace it")
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"{out} exists and is not a folder")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise WorkbenchError(f"cannot write under {parent}")
    return out


def _segment(ctx, skip_first_passage: bool) -> torch.Tensor:
    """Absolute positions of the reused segment: every passage token, or those after the first passage."""
    reused = ctx.reused_positions
    if not skip_first_passage:
        return reused
    passages = ctx.layout.passages
    if len(passages) < 2:
        raise WorkbenchError(f"example {ctx.example.id} has {len(passages)} passage(s): nothing after the first")
    return reused[reused >= passages[1].start]


def curve_rows(model, tokens: int, prompts: int, units, budget: float, seeds: int, seed: int,
               progress: bool = False, skip_first_passage: bool = False) -> tuple[pd.DataFrame, list[dict]]:
    """Measure the curve; return (curve table, per-prompt info). No validation, no writing."""
    from workbench.bench import context_of_length

    rows, info = [], []
    iterator = range(prompts)
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(iterator, desc="prompts")
    for p in iterator:
        started = time.perf_counter()
        ctx = context_of_length(model, tokens, seed + p)
        reused = _segment(ctx, skip_first_passage)
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
                sel = select_units(scores, unit, budget)
                err = probe.error(reused[sel.rows])
                rows.append({**base, "unit": unit, "method": method, "seed_index": seed_index,
                             "seed": rseed, "n_chunks": sel.n_chunks, "n_kept": sel.n_kept,
                             "n_rows_restored": sel.n_rows, "budget_share": sel.n_rows / n,
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


def run_curve(model, out: Path, tokens: int = 2048, prompts: int = 6, units=DEFAULT_UNITS,
              budget: float = 0.2, seeds: int = 5, seed: int = 0, progress: bool = True,
              force: bool = False, skip_first_passage: bool = False) -> Path:
    """Measure the unit-of-choice curve on `model` and write the run folder `out`; return it.

    Arguments are validated and `out` is checked (refused if it exists, unless `force`)
    before any work. The folder appears only when complete.
    """
    tokens, prompts, units, budget, seeds, seed = check_curve_args(tokens, prompts, units, budget, seeds, seed)
    out = _check_out(out, force)
    skip_first_passage = bool(skip_first_passage)
    args = {"tokens": tokens, "prompts": prompts, "units": list(units), "budget": budget,
            "seeds": seeds, "seed": seed, "skip_first_passage": skip_first_passage}
    started_at, t0 = now(), time.perf_counter()
    curve, info = curve_rows(model, tokens, prompts, units, budget, seeds, seed, progress, skip_first_passage)
    summary = summarize(curve, budget)
    manifest = {
        "kind": KIND, "schema_version": SCHEMA_VERSION, "model": model.describe(), "args": args,
        "versions": package_versions(), "started": started_at, "ended": now(),
        "seconds": time.perf_counter() - t0, "status": "complete", "prompts": info,
        "protocol": {
            "reference": "BCR §4.2 / Table 8",
            "prompt": "workbench.bench.context_of_length(model, tokens, seed + p)",
            "segment": ("passage tokens after the first passage" if skip_first_passage
                        else "all passage tokens (ctx.reused_positions)"),
            "restore": "copy dense K/V rows into the splice at every layer",
            "queries": "every question-suffix row over the dense cache, post-RoPE, per query head",
            "error": "||O_restored - O_dense|| / ||O_dense||, pooled over layers, heads, queries",
            "units": "consecutive unit-row chunks over the reused rows; keep max(1, round(budget*n_chunks)) by mean score",
            "informed": "draft_attention(ctx) on the splice, .scores(reused_positions)",
            "random": "random_scores(n_segment, SeedSequence([seed, prompt, draw]))",
            "budget_matched": f"every prompt's share within {MATCH_TOLERANCE:.0%} (relative) of the budget",
        },
    }
    _write(out, force, manifest, {"curve": curve, "summary": summary})
    return out


def _write(out: Path, force: bool, manifest: dict, tables: dict[str, pd.DataFrame]) -> None:
    if out.exists() and not force:
        raise WorkbenchError(f"{out} appeared while the curve ran; pass force=True to replace it")
    write_folder(out, {"manifest.json": manifest}, tables)


def load_curve(folder) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(manifest, curve, summary) of a run folder written by `run_curve`."""
    folder = Path(folder)
    meta = folder / "manifest.json"
    if not meta.is_file():
        hint = " (it holds a saved Diagnosis: use Diagnosis.load)" if (folder / "diagnosis.json").is_file() else ""
        raise WorkbenchError(f"{folder} holds no manifest.json: not a curve run folder{hint} "
                             f"(make one with `kvwb curve --out {folder}`)")
    manifest = json.loads(meta.read_text())
    if manifest.get("kind") != KIND:
        raise WorkbenchError(f"{folder} is a run of kind {manifest.get('kind')!r}, not a {KIND!r} run")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise WorkbenchError(f"{folder}: curve schema version {manifest.get('schema_version')} is not "
                             f"{SCHEMA_VERSION}; re-run the curve with this version")
    missing = [n for n in ("curve", "summary") if not (folder / f"{n}.parquet").is_file()]
    if missing:
        raise WorkbenchError(f"{folder} lacks {', '.join(m + '.parquet' for m in missing)}")
    return manifest, pd.read_parquet(folder / "curve.parquet"), pd.read_parquet(folder / "summary.parquet")


# ----------------------------------------------------------------------------- output

def summary_markdown(summary: pd.DataFrame) -> str:
    """The summary as a markdown table laid out like the paper's Table 8."""
    header = ("| unit | budget | matched | informed | random | gap | gap / no-repair | "
              "prompts won (p) | no-repair |")
    lines = [header, "|" + "---|" * 9]
    for r in summary.itertuples(index=False):
        p = "n/a" if math.isnan(r.p_value) else (f"{r.p_value:.2f}" if r.p_value >= 0.01 else f"{r.p_value:.1e}")
        share = (f"{r.budget_share:.1%}" if r.budget_share_max - r.budget_share_min < 5e-4
                 else f"{r.budget_share:.1%} ({r.budget_share_min:.1%}-{r.budget_share_max:.1%})")
        lines.append(
            f"| {r.unit} | {share} | {'yes' if r.budget_matched else 'no'} | {r.informed_error:.4f} | "
            f"{r.random_error:.4f} | {r.gap:+.4f} | {r.gap_share:+.1%} | {r.prompts_won}/{r.n_prompts} ({p}) | "
            f"{r.unrepaired_error:.4f} |")
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise WorkbenchError(f"expected comma-separated integers, got {text!r}") from None


def add_curve_arguments(parser: argparse.ArgumentParser) -> None:
    """The curve's own options (the shared CLI adds --model, --device and --dtype)."""
    parser.add_argument("--tokens", type=int, default=2048, help="prompt length in tokens (default 2048)")
    parser.add_argument("--prompts", type=int, default=6, help="prompts (synthetic seeds seed..seed+N-1; >= 2)")
    parser.add_argument("--units", default=",".join(map(str, DEFAULT_UNITS)),
                        help="comma-separated units of choice in rows (default 1,16,64,256,1024)")
    parser.add_argument("--budget", type=float, default=0.2, help="nominal fraction of reused rows restored")
    parser.add_argument("--seeds", type=int, default=5, help="random draws per prompt and unit (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="first prompt seed and random-seed base (default 0)")
    parser.add_argument("--skip-first-passage", action="store_true",
                        help="segment = passages after the first (the first is exact in the splice)")
    parser.add_argument("--out", required=True, help="run folder to write (manifest.json + parquet)")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def curve_main(args) -> int:
    """Measure the unit-of-choice curve (BCR Table 8) and write it to --out; print the summary."""
    import workbench as wb

    tokens, prompts, units, budget, seeds, seed = check_curve_args(
        args.tokens, args.prompts, _int_list(args.units), args.budget, args.seeds, args.seed)
    out = _check_out(args.out, args.force)
    model = wb.load_model(args.model, device=getattr(args, "device", None), dtype=getattr(args, "dtype", None))
    t0 = time.perf_counter()
    run_curve(model, out, tokens=tokens, prompts=prompts, units=units, budget=budget, seeds=seeds,
              seed=seed, progress=getattr(args, "progress", True), force=args.force,
              skip_first_passage=getattr(args, "skip_first_passage", False))
    _, curve, summary = load_curve(out)
    segment = "passages after the first" if getattr(args, "skip_first_passage", False) else "all passages"
    print(f"unit-of-choice curve: {prompts} prompts of ~{tokens} tokens, segment {segment} "
          f"(rows {int(curve['n_segment'].min())}-{int(curve['n_segment'].max())}), "
          f"budget {budget:g}, {seeds} random seeds; {time.perf_counter() - t0:.0f} s")
    print(summary_markdown(summary))
    print(f"wrote {out}")
    sys.stdout.flush()
    return 0
