"""Hand the workbench's caches to nnsight and TransformerLens.

nnsight: trace the receiver's question suffix over any cache and read or patch any module::

    from workbench import interop
    with interop.trace_suffix(diagnosis, "spliced") as lm:
        h = lm.model.layers[10].output.save()   # [1, suffix, hidden]: a decoder layer returns a tensor
        lm.model.layers[3].mlp.output[:] = 0    # an intervention, applied in place during the forward
        logits = lm.lm_head.output.save()       # [1, suffix, vocab]

`lm` is the nnsight model over `model.hf` (see `nnsight_model`); inside the block use nnsight's
own API (`.output`, `.input`, `.save()`, `lm.output` for the whole `CausalLMOutputWithPast`).
The block runs with autograd on, so nnsight's gradient idiom works too: read a module's
`.output` first, then `with loss.backward(): g = nnsight.save(x.grad)`.

TransformerLens: `transformer_lens_names(cache)` names our K/V as a `TransformerBridge`
(TransformerLens 4.x) `run_with_cache` does: `blocks.{l}.attn.hook_rot_k` (keys after RoPE)
and `blocks.{l}.attn.hook_v`, each `[batch=1, pos, kv_head, d_head]`. The bridge's hooks keep
grouped-query K/V at the model's kv heads (SmolLM2-135M: 3, not its 9 query heads); its
`hook_pattern` is `[batch, head, query, key]` over query heads, which `attention_pattern`
reproduces from the engine's dense prefill (`hook_rot_q`, `hook_rot_k`).

The workbench's own passes (the repair, the batched cells, their decode steps) carry hook
points of the same names (`engine.hooks`): `ctx.repair(rows, hooks=...)`,
`ctx.run_with_cache(rows)`, `diagnose(..., hooks=...)`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from nnsight.intervention.tracer import InterleavingTracer
from nnsight.tracing.tracer import skip_context, skippable

from workbench.context import Context
from workbench.diagnosis import Diagnosis
from workbench.engine.hooks import caching_hooks
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel
from workbench.repair import recompute_rows
from workbench.signals.attention import attention_rows

CACHE_NAMES = ("dense", "spliced")


class SuffixTracer(InterleavingTracer):
    """An nnsight trace whose `with ... as lm` binds the nnsight model rather than the tracer."""

    def __enter__(self):
        # Mirrors Tracer.__enter__ directly (as nnsight's own EditingTracer does): capture and
        # skip_context read the user's frame at a fixed depth, so no extra call may sit between.
        self.capture()
        if skippable(self.node):
            skip_context(self)
        return self.envoy


def nnsight_model(model: LoadedModel):
    """The nnsight `TransformersModel` (text-generation) over `model.hf`, built once per model.

    `TransformersModel` is nnsight 0.8's name for what `LanguageModel` was (that name still
    works but warns). No hub access: it wraps the loaded module. nnsight installs its
    controller as each module's `forward`, inert outside a trace. It gets a copy of the
    tokenizer, since it sets a pad token and left padding on the one it is given.
    """
    from nnsight import TransformersModel

    held = model.__dict__.get("_nnsight")
    if held is None or held[0] is not model.hf:
        lm = TransformersModel(model.hf, tokenizer=copy.deepcopy(model.tokenizer), task="text-generation")
        held = model.__dict__["_nnsight"] = (model.hf, lm)
    return held[1]


def context_of(source: Context | Diagnosis) -> Context:
    """The `Context` behind a Context or an in-memory Diagnosis."""
    if isinstance(source, Context):
        return source
    if isinstance(source, Diagnosis):
        if source.ctx is None:
            raise WorkbenchError(
                f"diagnosis of example {source.example_id!r} holds no caches (a Diagnosis loaded from "
                f"disk keeps only its tables): re-run workbench.diagnosis.diagnose(model, example, ...) "
                f"in this process")
        return source.ctx
    raise WorkbenchError(f"expected a Context or a Diagnosis, got {type(source).__name__}")


def suffix_cache(source: Context | Diagnosis, cache="spliced") -> KVCache:
    """Resolve a cache spec over the handed-off span [0, suffix_start).

    `cache`: "dense", "spliced", a `KVCache`, or ("repair", selector_label, budget) for the
    rows that selector recomputed at that budget in a Diagnosis (repaired afresh here).
    """
    ctx = context_of(source)
    if isinstance(cache, KVCache):
        kv = cache
    elif isinstance(cache, str):
        if cache not in CACHE_NAMES:
            raise WorkbenchError(f"unknown cache {cache!r}; use one of {CACHE_NAMES}, a KVCache "
                                 f"or ('repair', selector_label, budget)")
        kv = ctx.reference('the "dense" cache') if cache == "dense" else ctx.spliced
    elif isinstance(cache, tuple) and len(cache) == 3 and cache[0] == "repair":
        if not isinstance(source, Diagnosis):
            raise WorkbenchError("('repair', selector_label, budget) reads a Diagnosis's selections; "
                                 "with a Context pass ctx.repair(positions) as the cache")
        _, label, budget = cache
        kv = ctx.repair(torch.tensor(source.picks(label, budget), dtype=torch.long))
    else:
        raise WorkbenchError(f"cache must be one of {CACHE_NAMES}, a KVCache or "
                             f"('repair', selector_label, budget); got {cache!r}")
    if kv.n_positions != ctx.layout.suffix_start:
        raise WorkbenchError(f"the cache covers {kv.n_positions} positions but the question suffix starts "
                             f"at {ctx.layout.suffix_start}; pass a cache of the handed-off span")
    return kv


def trace_suffix(source: Context | Diagnosis, cache="spliced") -> SuffixTracer:
    """An nnsight trace of the question suffix run over `cache` (see `suffix_cache`).

    Use it as `with trace_suffix(diagnosis, "spliced") as lm:` (module docstring). The model
    gets a fresh HF cache over a copy of the K/V, so nothing done in the block reaches `cache`.
    """
    ctx = context_of(source)
    kv = suffix_cache(source, cache)
    model = ctx.model
    lm = nnsight_model(model)
    ids = ctx.suffix_ids.to(model.device)[None]  # [1, suffix]
    # nnsight adds a mask of the suffix's width unless given one, which hides the cached rows
    # from the model (it only omits it for `past_key_values=`, deprecated in transformers 5).
    mask = torch.ones(1, kv.n_positions + ids.shape[1], dtype=torch.long, device=model.device)  # [1, past + suffix]
    return lm.trace(ids, attention_mask=mask, cache=kv.clone().to_hf(), use_cache=True,
                    tracer_cls=SuffixTracer)


def transformer_lens_names(cache: KVCache) -> dict[str, torch.Tensor]:
    """Our K/V under a TransformerBridge's hook names, shaped as its hooks give them.

    `blocks.{l}.attn.hook_rot_k` (post-RoPE keys) and `blocks.{l}.attn.hook_v`, each
    [1, pos, kv_head, d_head]: grouped-query heads are not expanded, as in the bridge.
    """
    names = {}
    for l in range(cache.n_layers):
        names[f"blocks.{l}.attn.hook_rot_k"] = cache.keys[l].transpose(0, 1)[None]  # [1, pos, kv_head, d_head]
        names[f"blocks.{l}.attn.hook_v"] = cache.values[l].transpose(0, 1)[None]
    return names


def save_transformer_lens_names(cache: KVCache, path: str | Path) -> Path:
    """Write `transformer_lens_names(cache)` to a safetensors file (no pickle); return its path."""
    from safetensors.torch import save_file

    path = Path(path)
    if not path.parent.is_dir():
        raise WorkbenchError(f"cannot write {path}: folder {path.parent} does not exist")
    tensors = {name: t.detach().contiguous().cpu() for name, t in transformer_lens_names(cache).items()}
    save_file(tensors, str(path), metadata={"shape": "[batch, pos, kv_head, d_head]", "keys": "post-RoPE"})
    return path


@torch.inference_mode()
def attention_pattern(model: LoadedModel, ids: torch.Tensor, layers=None) -> dict[str, torch.Tensor]:
    """Attention of a dense prefill of `ids` ([pos]) as TransformerLens names it, fp32.

    `blocks.{l}.attn.hook_pattern`: [1, head, query, key], computed by the workbench's own
    `attention_rows` from each layer's post-RoPE queries and keys, read at the engine's
    `hook_rot_q` / `hook_rot_k` of the prefill (a `hook_pattern` would swap the fused kernel for
    the written-out softmax and round later layers differently). `layers`: default all.
    """
    ad = model.adapter
    layers = range(ad.n_layers) if layers is None else list(layers)
    bad = [l for l in layers if not 0 <= l < ad.n_layers]
    if bad:
        raise WorkbenchError(f"layers {bad} out of range [0, {ad.n_layers})")
    if not layers:
        return {}
    shape = (ad.n_layers, ad.n_kv_heads, 0, ad.head_dim)
    empty = KVCache(*(torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in "kv"))
    positions = torch.arange(ids.shape[0], device=model.device)  # [pos]
    acts: dict[str, torch.Tensor] = {}
    names = [f"blocks.{l}.attn.hook_rot_{x}" for l in layers for x in "qk"]
    recompute_rows(model, empty, ids, positions, n_layers=max(layers) + 1, hooks=caching_hooks(names, acts),
                   stop_after_qkv=True)  # the last layer asked for: its q and k only
    patterns = {}
    for l in layers:
        q = acts[f"blocks.{l}.attn.hook_rot_q"][0]  # [pos, head, d_head]
        keys = acts[f"blocks.{l}.attn.hook_rot_k"][0].transpose(0, 1)  # [kv_head, pos, d_head]
        patterns[f"blocks.{l}.attn.hook_pattern"] = attention_rows(q, keys, positions, ad.scaling, ad.windows[l])[None]
    return patterns
