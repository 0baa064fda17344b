"""`build_context`: one example laid out, spliced and densely prefilled, ready to repair.

    ctx = wb.build_context(model, example)
    ctx.spliced, ctx.dense            # KVCache over the handed-off span [0, suffix_start)
    Context(model, example, layout, spliced=served)   # no dense reference: what needs one refuses
    fixed = ctx.repair(ctx.reused_positions[:40])
    ctx.answer(ctx.dense), ctx.answer(ctx.spliced), ctx.answer(fixed)
    fixed = ctx.repair(rows, hooks={"blocks.3.attn.hook_z": fn})  # fn(tensor, hook=point), engine.hooks
    ctx.answer(ctx.dense, hooks={"blocks.3.attn.hook_z": fn})   # the question and its decode, hooked
    logits, cache = ctx.run_with_cache(rows)     # TransformerLens-shaped: the question over the repair
    logits = ctx.run_with_hooks(rows, over="dense", fwd_hooks=[("blocks.3.attn.hook_z", fn)])
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch
from einops import rearrange

from workbench import decode
from workbench.engine.hooks import FINAL_HOOKS, Hooks, caching_hooks, hook_names, with_reads
from workbench.engine.hooks import names_filter as names_filter_of
from workbench.engine.masks import check_positions
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.layout import Layout, PromptFormat, build_layout
from workbench.models import LoadedModel
from workbench.repair import recompute_rows, repair
from workbench.splice import dense_cache, splice
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
    rerotation: str = "delta"  # how the splice moved its keys ("delta" or "exact", see splice.splice)
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
        `hooks`: {hook point name: fn(tensor, hook=point)} or [(name or filter, fn)], run on the
        pass (`engine.hooks`), checked before it."""
        return repair(self.model, self.spliced if cache is None else cache, self.layout.ids, positions, hooks=hooks)

    def run_with_cache(self, rows=None, *, over="spliced", names_filter=None, fwd_hooks=None):
        """TransformerLens's `run_with_cache` on this example: recompute `rows` (None: none, every
        row reused) over `over` ("spliced", "dense" or a `KVCache` of the handed-off span) and run
        the question (the suffix) in the same engine pass. Returns `(logits, cache)`: logits
        [1, question, vocab] (the question's rows; equal to HF's forward of the suffix over the
        repaired cache up to float rounding) and a TransformerLens `ActivationCache` of the points
        `names_filter` picks (None: every one; a name, a list or `name -> bool`). Every activation
        has a batch axis of 1 and the pass's rows: the sorted `rows`, then the question's
        (`ln_final.hook_normalized` and `hook_unembed` too); `hook_pattern` / `hook_attn_scores`
        key on absolute positions [0, suffix end). `cache.positions` ([row]) holds the rows'
        absolute positions. `fwd_hooks` ([(name or filter, fn)] or {name: fn}) run first.

        The cache's model reads as an unprocessed `TransformerBridge` of the same weights does
        (`_CacheModel`: the config, each block's `W_O`, `W_U`, views of the model's own weights), so
        `accumulated_resid`, `decompose_resid` (`apply_ln=True` from the cached `hook_scale`),
        `stack_activation`, `stack_head_results` and `logit_attrs` work and equal the bridge's on the
        same rows; the final norm's weight is not folded into `W_U`, as in the bridge."""
        known = hook_names(self.model.adapter)
        kept = names_filter_of(names_filter, known)  # checked with the hooks, before any model work
        hooks = Hooks.of(fwd_hooks, self.model.adapter)
        store: dict[str, torch.Tensor] = {}
        logits, positions = self._question_pass(rows, over, with_reads(hooks, caching_hooks(kept, store)))
        cache = activation_cache({name: store[name] for name in known if name in store}, self.model)
        cache.positions = positions
        return logits, cache

    def run_with_hooks(self, rows=None, *, over="spliced", fwd_hooks=None) -> torch.Tensor:
        """TransformerLens's `run_with_hooks`: the question's logits ([1, question, vocab]) after
        recomputing `rows` over `over`, with `fwd_hooks` ([(name or filter, fn)] or {name: fn})
        on the one pass that does both (see `run_with_cache`)."""
        return self._question_pass(rows, over, Hooks.of(fwd_hooks, self.model.adapter))[0]

    def _question_pass(self, rows, over, hooks) -> tuple[torch.Tensor, torch.Tensor]:
        """Recompute `rows` over `over` and run the question in one engine pass under `hooks`
        (checked); returns (logits [1, question, vocab], the pass's positions [row])."""
        ad = self.model.adapter
        hooks = Hooks.of(hooks, ad)
        base = self._cache_named(over, "run_with_cache")
        n, end = base.n_positions, len(self.layout.ids)
        if n != self.layout.suffix_start:
            raise WorkbenchError(f"over: a cache of the handed-off span ({self.layout.suffix_start} positions) "
                                 f"is needed, got {n}")
        pos = check_positions(torch.zeros(0, dtype=torch.long) if rows is None else rows, n, "rows")
        positions = torch.cat([pos, torch.arange(n, end)])  # [row]: the repair's, then the question's
        _, h = recompute_rows(self.model, base, self.layout.ids, positions, hooks=hooks)  # [row, hidden]
        with torch.inference_mode():
            if hooks and any(name in hooks for name in FINAL_HOOKS):  # every row, so each point has the pass's rows
                logits = decode.question_logits(self.model, h, positions, hooks)[len(pos):]
            else:
                logits = ad.logits(h[len(pos):])
        return logits[None], positions

    def _cache_named(self, over, needed_by: str) -> KVCache:
        if isinstance(over, KVCache):
            return over
        if over == "spliced":
            return self.spliced
        if over == "dense":
            return self.reference(f"{needed_by}(over='dense')")
        raise WorkbenchError(f"over: expected 'spliced', 'dense' or a KVCache, got {over!r}")

    def answer(self, cache: KVCache, max_new_tokens: int = 24, hooks=None) -> str:
        """The greedy answer (first line) the receiver gives from `cache`."""
        return self.generate(cache, max_new_tokens, hooks).text

    def generate(self, cache: KVCache, max_new_tokens: int = 24, hooks=None,
                 stop_at_newline: bool = True) -> decode.Answer:
        """The greedy `Answer`, with its token ids: the question through the engine, then its
        decode (ended at its first line break, or, `stop_at_newline=False`, decoded on and kept whole).
        `hooks` ({name: fn} or [(name or filter, fn)], `engine.hooks`) run on the question's rows (the
        final points on its last row) and on every decode step."""
        return decode.greedy_answer(self.model, cache, self.suffix_ids, max_new_tokens, stop_at_newline, hooks=hooks)

    def teacher_forced(self, cache: KVCache, answer_ids, hooks=None) -> decode.TeacherForced:
        """Log-probability of `answer_ids` under `cache` and whether greedy would reproduce them: one
        engine pass of the question and the answer, under `hooks` when given."""
        return decode.teacher_forced(self.model, cache, self.suffix_ids, answer_ids, hooks)

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


class _CacheModel:
    """What TransformerLens's `ActivationCache` reads of its model, as an unprocessed
    `TransformerBridge` of the same weights gives it: the config (`cfg`), each block's
    `attn.W_O` ([head, d_head, d_model], a view of o_proj's weight) for `stack_head_results`,
    `W_U` ([d_model, vocab], a view of the LM head's weight), `tokens_to_residual_directions` and
    `to_single_token` for `logit_attrs`. As the bridge's (TransformerLens's warning), the final
    norm's weight is not folded into `W_U`, so `logit_attrs` sums to the logit only where that
    weight is 1, and on Gemma 3 a head's result is z·W_O before the block's `ln1_post`. No
    `ln_final` module (`apply_ln` reads the cached `hook_scale`), no `accumulated_bias` and no MLP
    weights (`stack_neuron_results`, `get_full_resid_decomposition`): asking for one says so."""

    def __init__(self, model: LoadedModel):
        ad, config = model.adapter, model.config
        self.cfg = SimpleNamespace(n_layers=ad.n_layers, n_heads=ad.n_heads, n_key_value_heads=ad.n_kv_heads,
                                   d_model=config.hidden_size, d_head=ad.head_dim, d_mlp=config.intermediate_size,
                                   d_vocab=config.vocab_size, attn_only=False, normalization_type="RMS",
                                   model_name=model.name)
        self._model = model
        self.W_U = ad.lm_head.weight.detach().T  # [d_model, vocab], a view
        self.blocks = [_Block(rearrange(layer.self_attn.o_proj.weight.detach().T, "(h d) m -> h d m", h=ad.n_heads))
                       for layer in ad.layers]  # W_O [head, d_head, d_model], a view of o_proj's weight

    def to_single_token(self, string: str) -> int:
        ids = self._model.tokenizer(string, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise WorkbenchError(f"{string!r} is {len(ids)} tokens of {self._model.name}, not a single token")
        return int(ids[0])

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """Each token's column of W_U: [d_model] for one token (str, int or a one-element tensor),
        else the tokens' shape then d_model (TransformerBridge's convention)."""
        if isinstance(tokens, torch.Tensor) and tokens.numel() == 0:
            raise WorkbenchError("tokens: an empty tensor; give one token id or more")
        if isinstance(tokens, torch.Tensor) and tokens.numel() > 1:
            return rearrange(self.W_U[:, tokens], "d ... -> ... d")
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        elif isinstance(tokens, torch.Tensor):
            tokens = int(tokens.item())
        elif not isinstance(tokens, int):
            raise WorkbenchError(f"tokens: a string, an int or a tensor of ids, got {type(tokens).__name__}")
        return self.W_U[:, tokens]


class _Block:
    """One block as the cache's model has it: `attn.W_O` only; anything else is refused by name
    (an AttributeError, so TransformerLens's own `hasattr` checks still read it as absent)."""

    def __init__(self, w_o: torch.Tensor):
        self.attn = SimpleNamespace(W_O=w_o)

    def __getattr__(self, name: str):
        raise AttributeError(f"the workbench's ActivationCache model has no blocks[l].{name} (only attn.W_O and "
                             f"W_U); for what needs it, run the same pass through a TransformerBridge")


def activation_cache(store: dict[str, torch.Tensor], model: LoadedModel):
    """`store` ({name: [1, row, ...]}) as TransformerLens's `ActivationCache` over `model`'s config and weights."""
    from transformer_lens.ActivationCache import ActivationCache

    return ActivationCache(store, _CacheModel(model))


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
