"""Absolute times on real model shapes (issue 16, next to BCR's Table 10): Llama models of the
Llama-3.2-1B and Llama-3.1-8B shapes with random weights, built from configs on the device, timed
at several context lengths. Weights need not be real to time; the answers are meaningless and not
reported. A random model never ends its answer, so every greedy decode runs its 24 tokens: the
times that decode (CADENCE's ŷ, the Diagnosis) are upper bounds for a real model's short answers.

    bash bench/gpu.sh                                     # on the GPU machine: $OUT/gpu.md
    python -m workbench.bench_gpu --shapes tiny --device cpu --lengths 300 --repeats 1   # a smoke run

Per (shape, length), milliseconds, medians of `repeats` after a warm-up:

    dense_ttft      one prefill of context + question suffix and the first token: what reuse saves
    assembly        the receiver's splice: the senders' caches moved (delta RoPE) and concatenated
    cadence_grad    CADENCE-Grad scoring: greedy ŷ over the splice, a forward and a backward
    draft           BCR's draft scoring (k = 2)
    repair_ρ        recomputing ρ of the reused rows exactly (ρ in RHOS)
    cadence_ttft    assembly + CADENCE-Grad scoring + repair at ρ = 0.2 + suffix and first token
    bcr_ttft        assembly + draft scoring + repair at ρ = 0.2 + suffix and first token
    diagnosis_s     a whole Diagnosis (default selectors at 0.1, 0.2, 0.3, 0.5; no attribution
                    check), seconds, timed once
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.bench import _time, machine
from workbench.byte_tokenizer import byte_tokenizer
from workbench.context import Context, context_of_length
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, prefill, sender_cache
from workbench.models import LoadedModel, wrap_model
from workbench.repair import budget_rows
from workbench.report import markdown_table
from workbench.selectors import default_selectors
from workbench.signals.attention import draft_attention
from workbench.signals.saliency import decision_saliency

RHOS = (0.05, 0.1, 0.2, 0.4, 1.0)
TTFT_RHO = 0.2

_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
SHAPES = {  # the published configs' shapes; weights random
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072, rope_parameters={**_LLAMA3_ROPE, "factor": 32.0}),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                         max_position_embeddings=131072, rope_parameters={**_LLAMA3_ROPE, "factor": 8.0}),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,  # the tests'
                 num_key_value_heads=2, head_dim=16, vocab_size=260, tie_word_embeddings=False,
                 max_position_embeddings=8192, rope_parameters={**_LLAMA3_ROPE, "factor": 8.0}),
}


def random_model(shape: str, device: str, dtype: torch.dtype, seed: int = 0) -> LoadedModel:
    """A Llama model of `shape` with random weights, initialised on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    if shape not in SHAPES:
        raise WorkbenchError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}")
    torch.manual_seed(seed)
    config = LlamaConfig(**SHAPES[shape], rms_norm_eps=1e-5)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return wrap_model(hf, byte_tokenizer(), name=f"random-{shape}")


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    return 1000 * statistics.median(_time(fn) for _ in range(repeats))


@torch.inference_mode()
def _first_token(model: LoadedModel, cache: KVCache, suffix: torch.Tensor) -> int:
    out = model.hf(input_ids=suffix.to(model.device)[None], cache=cache.to_hf(), use_cache=True, logits_to_keep=1)
    return int(out.logits[0, -1].argmax())


def time_context(model: LoadedModel, ctx: Context, repeats: int = 3, diagnosis: bool = True) -> dict:
    """One row of the table (see the module docstring) for one context."""
    layout, ad, ids = ctx.layout, model.adapter, ctx.layout.ids
    prefix_len = layout.prefix.end
    prefix = prefill(model, ids[:prefix_len])
    sent = [sender_cache(model, prefix, ids[seg.start:seg.end]) for seg in layout.passages]  # the senders' work

    def assembly() -> KVCache:
        moved = [KVCache(ad.rerotate(s.keys, seg.start - prefix_len), s.values) for s, seg in zip(sent, layout.passages)]
        return KVCache.cat([prefix] + moved)

    def dense_ttft() -> int:
        with torch.inference_mode():
            return int(model.hf(input_ids=ids.to(model.device)[None], logits_to_keep=1).logits[0, -1].argmax())

    pos = ctx.reused_positions  # [n_reused]
    ranked = pos[torch.argsort(decision_saliency(ctx).cadence_grad, descending=True)]
    chosen = {rho: ranked[: budget_rows(rho, len(pos))] for rho in RHOS}

    def cadence_ttft() -> int:
        spliced = assembly()
        scores = decision_saliency(ctx, spliced).cadence_grad  # [n_reused]
        rows = pos[torch.argsort(scores, descending=True)[: budget_rows(TTFT_RHO, len(pos))]]
        return _first_token(model, ctx.repair(rows, spliced), ctx.suffix_ids)

    def bcr_ttft() -> int:
        spliced = assembly()
        scores = draft_attention(ctx, spliced).scores(pos)  # [n_reused]
        rows = pos[torch.argsort(scores, descending=True)[: budget_rows(TTFT_RHO, len(pos))]]
        return _first_token(model, ctx.repair(rows, spliced), ctx.suffix_ids)

    row = {"n_tokens": layout.n_tokens, "n_reused": len(pos),
           "dense_ttft_ms": _median_ms(dense_ttft, repeats), "assembly_ms": _median_ms(assembly, repeats),
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


def gpu_table(shapes, lengths, device: str, dtype: torch.dtype, repeats: int = 3, diagnosis: bool = True,
              progress: bool = True) -> pd.DataFrame:
    """The table for every shape and length, each model built once and freed before the next."""
    rows = []
    for shape in shapes:
        model = random_model(shape, device, dtype)
        for n in tqdm(lengths, desc=shape, disable=not progress):
            ctx = context_of_length(model, n)
            rows.append({"shape": shape, **time_context(model, ctx, repeats, diagnosis)})
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.bench_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="llama-3.2-1b,llama-3.1-8b", help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--lengths", default="1024,2048,4096", help="context lengths in tokens")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-diagnosis", action="store_true", help="skip the whole Diagnosis (the longest step)")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = p.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or args.repeats < 1:
        p.error(f"unknown shapes {unknown}; use {', '.join(SHAPES)}" if unknown else "--repeats must be >= 1")
    lengths = [int(n) for n in args.lengths.split(",") if n]
    table = gpu_table(shapes, lengths, args.device, getattr(torch, args.dtype), args.repeats, not args.no_diagnosis)
    text = (f"`python -m workbench.bench_gpu {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
            f"random-weight Llama shapes ({args.dtype}, {args.device}); machine: {machine()}\n\n"
            f"{markdown_table(table)}\n")
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
