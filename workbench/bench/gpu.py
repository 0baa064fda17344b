"""Absolute times on real model shapes (issues 16 and 30, next to BCR's Table 10): models of the
Llama-3.2-1B, Llama-3.1-8B and Gemma-3-1B shapes with random weights, built from configs on the
device, timed at several context lengths. Weights need not be real to time; the answers are
meaningless and not reported. A random model never ends its answer, so every greedy decode runs
its 24 tokens: the times that decode (CADENCE's ŷ, the Diagnosis) are upper bounds for a real
model's short answers. `bench/gpu.sh` runs it, through `workbench.bench.gpu_run`.

Every time but one is the library's own path: the engine (`workbench.engine`), as `ctx.answer`
runs it. The exception is labelled: `hf_sdpa_dense_ttft`, HF's SDPA forward of the same tokens, a
reference to compare the engine's dense prefill against (BCR's Table 10 times a serving stack's).
Until this was changed (issue 44), `dense_ttft` and the two TTFTs' suffix and first token ran
through HF's forward: the tables recorded before it (docs/BENCHMARKS.md) time that.

Per (shape, length), milliseconds, medians of `repeats` after a warm-up:

    dense_ttft      one engine prefill of context + question suffix and the first token (the
                    question pass over no cache): what reuse saves
    hf_sdpa_dense_ttft  reference, not the library's path: HF's SDPA forward of the same tokens
                    and the first token
    assembly        the receiver's splice: the senders' caches moved (delta RoPE) and concatenated
    cadence_grad    CADENCE-Grad scoring: greedy ŷ over the splice, a forward and a backward
    draft           BCR's draft scoring (k = 2)
    repair_ρ        recomputing ρ of the reused rows exactly (ρ in RHOS)
    cadence_ttft    assembly + CADENCE-Grad scoring + repair at ρ = 0.2 + suffix and first token
                    (`decode.question_pass` + `question_logits`, the engine's answering pass)
    bcr_ttft        assembly + draft scoring + repair at ρ = 0.2 + suffix and first token (the same)
    diagnosis_s     a whole Diagnosis (default selectors at 0.1, 0.2, 0.3, 0.5; no attribution
                    check), seconds, timed once
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import torch

from workbench.bench.ratios import _time
from workbench.byte_tokenizer import byte_tokenizer
from workbench.context import Context, context_of_length
from workbench.decode import last_logits
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, assemble
from workbench.models import LoadedModel, wrap_model
from workbench.selectors import choose, default_selectors, parse_selectors
from workbench.signals.attention import draft_attention
from workbench.signals.saliency import decision_saliency
from workbench.splice import empty_cache, prefill, sender_cache

RHOS = (0.05, 0.1, 0.2, 0.4, 1.0)
TTFT_RHO = 0.2
CADENCE_GRAD, BCR = parse_selectors("cadence-grad:single,bcr:single")  # each TTFT's rows: the top-scoring ones
# BCR's Table 10 (A100, Llama-3.1-8B, 4096 symbols), ms, and the column of ours beside each.
TABLE10 = (("dense prefill (ours: the engine)", 542.7, "dense_ttft_ms"),
           ("dense prefill (ours: HF SDPA forward, reference)", 542.7, "hf_sdpa_dense_ttft_ms"),
           ("KVComm assembly", 72.9, "assembly_ms"), ("BCR at ρ = 0.2", 190.1, "bcr_ttft_ms"))

_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
_GEMMA3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}
SHAPES = {  # the published configs' shapes; weights random
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         tie_word_embeddings=True, max_position_embeddings=131072,
                         rope_parameters={**_LLAMA3_ROPE, "factor": 32.0}),
    "llama-3.1-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                         tie_word_embeddings=False, max_position_embeddings=131072,
                         rope_parameters={**_LLAMA3_ROPE, "factor": 8.0}),
    # Gemma 3: five sliding-window layers (512 tokens) to one global layer, one KV head.
    "gemma-3-1b": dict(model_type="gemma3_text", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                       tie_word_embeddings=True, max_position_embeddings=32768, query_pre_attn_scalar=256,
                       sliding_window=512, rope_parameters=_GEMMA3_ROPE),
    "tiny": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=3,  # the tests'
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=260, tie_word_embeddings=False,
                 max_position_embeddings=16384, rope_parameters={**_LLAMA3_ROPE, "factor": 8.0}),
    "tiny-gemma3": dict(model_type="gemma3_text", hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=260,
                        tie_word_embeddings=False, max_position_embeddings=16384, query_pre_attn_scalar=24,
                        sliding_window=64, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                        rope_parameters=_GEMMA3_ROPE),
}


def shape_config(shape: str):
    """The transformers config of `shape` (random weights come from its initialiser)."""
    from transformers import AutoConfig

    if shape not in SHAPES:
        raise WorkbenchError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}")
    kwargs = dict(SHAPES[shape])
    eps = 1e-6 if kwargs["model_type"] == "gemma3_text" else 1e-5
    return AutoConfig.for_model(kwargs.pop("model_type"), rms_norm_eps=eps, **kwargs)


def random_model(shape: str, device: str, dtype: torch.dtype, seed: int = 0) -> LoadedModel:
    """A model of `shape` with random weights, initialised on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM

    config = shape_config(shape)
    torch.manual_seed(seed)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return wrap_model(hf, byte_tokenizer(), name=f"random-{shape}")


def _median_ms(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    return 1000 * statistics.median(_time(fn) for _ in range(repeats))


@torch.inference_mode()
def first_token(model: LoadedModel, cache: KVCache, suffix: torch.Tensor) -> int:
    """The first answer token after `suffix` ([pos]) over `cache`, as the library answers: the
    engine's question pass and its last row's logits (`decode.last_logits`, as `ctx.answer` starts)."""
    return int(last_logits(model, cache, suffix, None)[1].argmax())


@torch.inference_mode()
def hf_sdpa_first_token(model: LoadedModel, ids: torch.Tensor) -> int:
    """Reference only, not the library's path: the first token of HF's SDPA forward of `ids` ([pos])
    with no cache, to compare the engine's dense prefill (`first_token` over no cache) against."""
    return int(model.hf(input_ids=ids.to(model.device)[None], logits_to_keep=1).logits[0, -1].argmax())


def time_context(model: LoadedModel, ctx: Context, repeats: int = 3, diagnosis: bool = True) -> dict:
    """One row of the table (see the module docstring) for one context."""
    layout, ad, ids = ctx.layout, model.adapter, ctx.layout.ids
    prefix_len = layout.prefix.end
    prefix = prefill(model, ids[:prefix_len])
    sent = [sender_cache(model, prefix, ids[seg.start:seg.end]) for seg in layout.passages]  # the senders' work

    def assembly() -> KVCache:
        return assemble(ad, [(prefix, 0)] + [(s, seg.start - prefix_len) for s, seg in zip(sent, layout.passages)])

    def dense_ttft() -> int:
        return first_token(model, empty_cache(model), ids)

    pos = ctx.reused_positions  # [n_reused]
    scores = decision_saliency(ctx).cadence_grad  # [n_reused]
    chosen = {rho: pos[choose(CADENCE_GRAD, scores, rho, pos)[0]] for rho in RHOS}

    def cadence_ttft() -> int:
        spliced = assembly()
        scores = decision_saliency(ctx, spliced).cadence_grad  # [n_reused]
        rows = pos[choose(CADENCE_GRAD, scores, TTFT_RHO, pos)[0]]
        return first_token(model, ctx.repair(rows, spliced), ctx.suffix_ids)

    def bcr_ttft() -> int:
        spliced = assembly()
        scores = draft_attention(ctx, spliced).scores(pos)  # [n_reused]
        rows = pos[choose(BCR, scores, TTFT_RHO, pos)[0]]
        return first_token(model, ctx.repair(rows, spliced), ctx.suffix_ids)

    row = {"n_tokens": layout.n_tokens, "n_reused": len(pos),
           "dense_ttft_ms": _median_ms(dense_ttft, repeats),
           "hf_sdpa_dense_ttft_ms": _median_ms(lambda: hf_sdpa_first_token(model, ids), repeats),  # reference
           "assembly_ms": _median_ms(assembly, repeats),
           "cadence_grad_ms": _median_ms(lambda: decision_saliency(ctx), repeats),
           "draft_ms": _median_ms(lambda: draft_attention(ctx), repeats)}
    for rho in RHOS:
        row[f"repair_{rho:g}_ms"] = _median_ms(lambda: ctx.repair(chosen[rho]), repeats)
    row["cadence_ttft_ms"] = _median_ms(cadence_ttft, repeats)
    row["cadence_ttft_vs_dense"] = row["cadence_ttft_ms"] / row["dense_ttft_ms"]
    row["bcr_ttft_ms"] = _median_ms(bcr_ttft, repeats)
    row["bcr_ttft_vs_dense"] = row["bcr_ttft_ms"] / row["dense_ttft_ms"]
    if diagnosis:
        config = DiagnoseConfig(selectors=default_selectors(), budgets=(0.1, 0.2, 0.3, 0.5), attribution=False)
        row["diagnosis_s"] = _time(lambda: diagnose(model, ctx.example, config, progress=False))
    return row


def timing_rows(shapes, lengths, device: str, dtype: torch.dtype, repeats: int = 3, diagnosis: bool = True,
                deadline: float | None = None, log: Callable[[str], None] = print) -> Iterator[dict]:
    """One row per (length, shape), the longest length first and each shape in turn at it, so the
    rows that matter most (4096 tokens) come first. Each model is built once and kept. A row is
    not started after `deadline` (time.monotonic()) or when the same shape's last row, scaled to
    this length, would not end before it; such a row is yielded as {"shape", "n_asked",
    "skipped": reason}."""
    models, last = {}, {}  # shape -> model; shape -> (seconds, tokens) of its last row
    for n in sorted(lengths, reverse=True):
        for shape in shapes:
            if deadline is not None:
                left = deadline - time.monotonic()
                seconds, tokens = last.get(shape, (0.0, n))
                if left <= 0 or seconds * n / tokens > left:
                    yield {"shape": shape, "n_asked": n, "skipped": f"time: {left:.0f} s left"}
                    continue
            start = time.monotonic()
            if shape not in models:
                models[shape] = random_model(shape, device, dtype)
            ctx = context_of_length(models[shape], n)
            row = {"shape": shape, "n_asked": n, **time_context(models[shape], ctx, repeats, diagnosis)}
            last[shape] = (time.monotonic() - start, n)
            log(f"{shape} at {n} tokens: {last[shape][0]:.1f} s")
            yield row
