"""CacheBlend's check-layer signal with and without `stop_after_qkv` (its last layer's attention and MLP).

Times `check_layer_signals` on SmolLM2-135M, alternating in one process after a warm-up: "full"
runs layer c whole (what the signal did before `stop_after_qkv`), "qkv" stops layer c after its
q, k, v hook points (today's); "hidden" is the signal before it read hook points (layers 0..c-1,
then c's q, k, v projected from the hidden rows). All give bit-identical signals ("full" and "qkv"
checked here; "hidden" in tests/unit/test_signals_check_layer.py).

    KVWB_THREADS=1 PYTHONPATH=. .venv/bin/python bench/check_layer.py --repeats 5
    KVWB_THREADS=1 PYTHONPATH=. .venv/bin/python bench/check_layer.py --example ruler:niah_single#0 --target-tokens 2048
"""

import argparse
import time
from unittest import mock

import torch

import workbench as wb
from workbench.engine.layers import rotated_qkv
from workbench.repair import recompute_rows
from workbench.signals import check_layer
from workbench.signals.attention import attention_rows


def full_layer(*args, stop_after_qkv=False, **kwargs):
    """`recompute_rows` with layer c run whole: the signal's former pass."""
    return recompute_rows(*args, **kwargs)


def hidden(ctx, layer: int) -> float:
    """Seconds of the signal as it was before the hook points: layers 0..c-1 recomputed, then layer
    c's q, k, v projected from the hidden rows by the adapter (the unit test's reference)."""
    started = time.perf_counter()
    ad, rows = ctx.model.adapter, torch.arange(ctx.layout.suffix_start)
    _, h = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=layer)
    with torch.inference_mode():
        q, k, v = rotated_qkv(ad, layer, ad.layers[layer].input_layernorm(h), rows)
        probs = attention_rows(q, k.transpose(0, 1), rows, ad.scaling, ad.windows[layer])
        influence = probs.mean(0).tril(-1).sum(0)  # [key]
        dev = (v.float() - ctx.spliced.values[layer].transpose(0, 1).float()).square().sum((1, 2))  # [pos]
    influence[ctx.reused_positions].float(), dev[ctx.reused_positions]
    return time.perf_counter() - started


def run(ctx, mode: str, layer: int) -> check_layer.CheckLayerSignals:
    if mode == "qkv":
        return check_layer.check_layer_signals(ctx, layer)
    with mock.patch.object(check_layer, "recompute_rows", full_layer):
        return check_layer.check_layer_signals(ctx, layer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layer", type=int, default=1)  # CacheBlend's shipped check layer
    parser.add_argument("--example", default="synthetic#5")  # the Live page's first example
    parser.add_argument("--target-tokens", type=int, help="for a ruler: example, its context in tokens")
    args = parser.parse_args()
    model = wb.load_model("smollm2-135m", device="cpu")
    options = {} if args.target_tokens is None else {"target_tokens": args.target_tokens}
    ctx = wb.build_context(model, wb.load_example(args.example, tokenizer=model.tokenizer, **options))
    first = {m: run(ctx, m, args.layer) for m in ("full", "qkv")}  # warm-up
    assert torch.equal(first["full"].value_deviation, first["qkv"].value_deviation)
    assert torch.equal(first["full"].influence, first["qkv"].influence)
    hidden(ctx, args.layer)
    times = {m: [] for m in (*first, "hidden")}
    for _ in range(args.repeats):
        for m in times:
            times[m].append(hidden(ctx, args.layer) if m == "hidden" else run(ctx, m, args.layer).seconds)
    print(f"{ctx.layout.suffix_start} handed-off rows, check layer {args.layer}")
    for m, ts in times.items():
        print(f"{m}: " + ", ".join(f"{t:.3f}" for t in ts) + f" s (min {min(ts):.3f}, median {sorted(ts)[len(ts) // 2]:.3f})")
    print(f"qkv / full: min {min(times['qkv']) / min(times['full']):.3f}, "
          f"median {sorted(times['qkv'])[args.repeats // 2] / sorted(times['full'])[args.repeats // 2]:.3f}")


if __name__ == "__main__":
    main()
