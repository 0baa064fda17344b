"""`build_context`: one example laid out, spliced and densely prefilled, ready to repair.

    ctx = wb.build_context(model, example)
    ctx.spliced, ctx.dense            # KVCache over the handed-off span [0, suffix_start)
    Context(model, example, layout, spliced=served)   # no dense reference: what needs one refuses
    fixed = ctx.repair(ctx.reused_positions[:40])
    ctx.answer(ctx.dense), ctx.answer(ctx.spliced), ctx.answer(fixed)
    fixed, acts = ctx.run_with_cache(ctx.reused_positions[:10])   # every hook point's activation
    fixed = ctx.repair(rows, hooks={"blocks.3.attn.hook_z": fn})  # fn(tensor, hook), engine.hooks
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench import decode
from workbench.engine.hooks import caching_hooks, hook_names
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, dense_cache, splice
from workbench.layout import Layout, PromptFormat, build_layout
from workbench.models import LoadedModel
from workbench.repair import repair
from workbench.tasks import Example, synthetic_examples


@dataclass
class Context:
    """An example's layout with its spliced and dense caches (both [0, suffix_start)). `dense` is
    None where no dense reference exists (a served cache at serve time): what reads it refuses."""

    model: LoadedModel
    example: Example
    layout: Layout
    spliced: KVCache
    dense: KVCache | None = None
    rerotation: str = "delta"  # how the splice moved its keys ("delta" or "exact", see kv.splice)
    rope_floor: torch.Tensor | None = None  # [layer]: relative key error of delta-RoPE rounding alone

    @property
    def reused_positions(self) -> torch.Tensor:
        """Positions of all passage tokens: what a budget is counted over. [n_reused]"""
        return self.layout.reused_positions

    @property
    def n_reused(self) -> int:
        return int(self.reused_positions.numel())

    @property
    def suffix_ids(self) -> torch.Tensor:
        return self.layout.ids[self.layout.suffix_start:]

    def repair(self, positions, cache: KVCache | None = None, hooks=None) -> KVCache:
        """A new cache with `positions` recomputed exactly over `cache` (default: the splice).
        `hooks`: {hook point name: fn(tensor, hook)} run on the pass (`engine.hooks`)."""
        return repair(self.model, self.spliced if cache is None else cache, self.layout.ids, positions, hooks=hooks)

    def run_with_cache(self, positions, names=None, cache: KVCache | None = None,
                       hooks=None) -> tuple[KVCache, dict[str, torch.Tensor]]:
        """`repair` that also returns the activations of the hook points `names` (default: every
        one), by name, each with the pass's cell axis first (`[1, row, ...]`; see `engine.hooks`).
        `hooks` run too, before the activations are kept."""
        names = hook_names(self.model.adapter.n_layers) if names is None else tuple(names)
        store: dict[str, torch.Tensor] = {}
        kept = caching_hooks(names, store)
        both = {name: [*_listed((hooks or {}).get(name)), *_listed(kept.get(name))] for name in {*kept, *(hooks or {})}}
        return self.repair(positions, cache, both), store

    def answer(self, cache: KVCache, max_new_tokens: int = 24) -> str:
        """The greedy answer (first line) the receiver gives from `cache`."""
        return self.generate(cache, max_new_tokens).text

    def generate(self, cache: KVCache, max_new_tokens: int = 24) -> decode.Answer:
        """The greedy `Answer`, with its token ids."""
        return decode.greedy_answer(self.model, cache, self.suffix_ids, max_new_tokens)

    def teacher_forced(self, cache: KVCache, answer_ids) -> decode.TeacherForced:
        """Log-probability of `answer_ids` under `cache` and whether greedy would reproduce them."""
        return decode.teacher_forced(self.model, cache, self.suffix_ids, answer_ids)

    def reference(self, needed_by: str) -> KVCache:
        """The dense cache, or a one-line error naming `needed_by` when this context has none."""
        if self.dense is None:
            raise WorkbenchError(f"{needed_by} needs a dense reference; this context has none (dense=None)")
        return self.dense

    def layer0_error(self) -> dict[str, float]:
        """Self-check: max |splice - dense| of layer-0 K and V (exact up to float error)."""
        dense = self.reference("layer0_error")
        return {
            "k": float((self.spliced.keys[0] - dense.keys[0]).abs().max()),
            "v": float((self.spliced.values[0] - dense.values[0]).abs().max()),
        }

    def splice_tolerance(self) -> dict[str, float]:
        """The largest layer-0 |splice - dense| that float rounding explains, for K and V (see
        `rounding_tolerance`): from the dtype, the largest position, the rows' magnitude and the
        hidden width their projections sum over."""
        dense = self.reference("splice_tolerance")
        last, width = self.layout.suffix_start - 1, self.model.config.hidden_size
        dtype = dense.keys.dtype
        return {"k": rounding_tolerance(dtype, last, float(dense.keys[0].abs().max()), width),
                "v": rounding_tolerance(dtype, 0, float(dense.values[0].abs().max()), width)}

    def check_splice(self, atol: float | None = None) -> dict[str, float]:
        """Raise if layer 0 of the splice differs from dense by more than rounding explains
        (or than `atol`, when given); else return the errors."""
        self.reference("check_splice")
        err = self.layer0_error()
        limits = {"k": atol, "v": atol} if atol is not None else self.splice_tolerance()
        bad = {kind: (err[kind], limits[kind]) for kind in err if err[kind] > limits[kind]}
        if bad:
            detail = ", ".join(f"max |d{k.upper()}| = {e:.3g} > {t:.3g}" for k, (e, t) in bad.items())
            raise WorkbenchError(f"splice self-check failed at layer 0: {detail} ({self.dense.keys.dtype}, "
                                 f"positions up to {self.layout.suffix_start - 1}); the splice is wrong, "
                                 f"not merely rounded")
        return err


def _listed(fn) -> list:
    return [] if fn is None else [fn] if callable(fn) else list(fn)


def rounding_tolerance(dtype: torch.dtype, max_position: int, max_abs: float, width: int = 0) -> float:
    """An upper bound on what float rounding alone does to a row of magnitude `max_abs`.

    Storage rounding is eps(dtype) per value (twice: splice and dense round independently).
    RoPE angles p * w are computed in fp32, so their error grows with the position:
    about p * eps(fp32) radians for w <= 1, on both sides of the comparison. The projections
    sum over `width` (the hidden size) in fp32 or finer, whatever the dtype, and a matrix
    product of a few rows (the prefix alone) may take another kernel, another order of the sum,
    than one of the whole context: about sqrt(width) * eps(fp32) of the row's magnitude (seen
    at width 2048 in fp32, 4 eps(fp32) of it, on the CPU). The factor 2 on each term leaves
    headroom; a wrong rotation (by even one position) errs by O(max_abs).
    """
    storage = torch.finfo(dtype).eps
    angle = max(0, max_position) * torch.finfo(torch.float32).eps
    accumulation = max(0, width) ** 0.5 * torch.finfo(torch.promote_types(dtype, torch.float32)).eps
    return float(max_abs * 2 * (2 * storage + 2 * angle + 2 * accumulation))


def build_context(model: LoadedModel, example: Example, fmt: PromptFormat = PromptFormat(),
                  rerotation: str = "delta") -> Context:
    """Lay out `example`, splice its isolated passage caches and prefill the dense reference."""
    layout = build_layout(model.tokenizer, example, fmt, max_positions=model.max_positions)
    spliced = splice(model, layout, rerotation)
    return Context(model, example, layout, spliced=spliced.cache, dense=dense_cache(model, layout),
                   rerotation=rerotation, rope_floor=spliced.rope_floor)


def context_of_length(model: LoadedModel, n_tokens: int, seed: int = 0) -> Context:
    """A synthetic example padded with filler to about `n_tokens` tokens (within 3%), built into
    a Context: the fixture of the benchmarks and the unit-of-choice curve."""
    words = max(8, int(n_tokens / 1.5))
    for _ in range(4):
        example = synthetic_examples(1, seed=seed, target_words=words)[0]
        layout_len = build_layout(model.tokenizer, example).n_tokens
        if abs(layout_len - n_tokens) <= 0.03 * n_tokens:
            break
        words = max(8, int(words * n_tokens / layout_len))
    return build_context(model, example)
