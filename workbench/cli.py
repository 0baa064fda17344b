"""`kvwb`: the workbench's command line. Each subcommand's --help explains every option."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time

from workbench.errors import WorkbenchError

MODEL_HELP = "model: 'smollm2-135m' (embedded, default), a local HF folder, or hub:ORG/NAME"


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help=MODEL_HELP)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA)")


def cmd_prepare(args) -> int:
    """Convert the embedded model's GGUF to safetensors once (later loads take seconds)."""
    from workbench.models import prepare_embedded_model

    print(prepare_embedded_model(args.model))
    return 0


def cmd_answer(args) -> int:
    """Dense, spliced and fully repaired answers of one example, with timings."""
    import workbench as wb

    example = wb.load_example(args.example)
    model = wb.load_model(args.model, device=args.device, dtype=args.dtype)
    t0 = time.perf_counter()
    ctx = wb.build_context(model, example)
    t_build = time.perf_counter() - t0
    err = ctx.check_splice()
    t0 = time.perf_counter()
    fixed = ctx.repair(ctx.reused_positions)
    t_repair = time.perf_counter() - t0

    print(f"example {example.id}  ({ctx.layout.n_tokens} tokens, {len(example.passages)} passages, "
          f"{ctx.n_reused} reused rows)")
    for i, passage in enumerate(example.passages, 1):
        print(textwrap.fill(passage, 100, initial_indent=f"  [{i}] ", subsequent_indent="      "))
    print(f"  Q: {example.question}")
    print(f"  gold: {' | '.join(example.gold) or '(none)'}")
    print(f"layer-0 splice vs dense: max |dK| = {err['k']:.1e}, max |dV| = {err['v']:.1e}")
    rows = [("dense", ctx.dense), ("spliced", ctx.spliced), ("repaired (all reused rows)", fixed)]
    for name, cache in rows:
        t0 = time.perf_counter()
        answer = ctx.answer(cache, max_new_tokens=args.max_new_tokens)
        print(f"  {name:<28} {answer!r:<40} ({time.perf_counter() - t0:.2f} s to answer)")
    print(f"timings: build context (splice + dense) {t_build:.2f} s, repair of all reused rows {t_repair:.2f} s")
    return 0


def cmd_bench(args) -> int:
    """Benchmarks printed as ratios measured in one process."""
    import workbench as wb
    from workbench import bench

    model = wb.load_model(args.model, device=args.device, dtype=args.dtype)
    if args.what == "repair":
        table = bench.repair_ratios(model, lengths=_ints(args.lengths), budgets=_floats(args.budgets),
                                    repeats=args.repeats)
        print(bench.to_markdown(table, model, command=" ".join(["kvwb", *sys.argv[1:]])))
    return 0


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise WorkbenchError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise WorkbenchError(f"expected comma-separated integers, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvwb", description="KV Repair Workbench: splice isolated KV caches, compare with the "
        "dense prefill, and repair a budget of rows exactly.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help=cmd_prepare.__doc__, description=cmd_prepare.__doc__)
    p.add_argument("--model", default="smollm2-135m", help="embedded model name (default smollm2-135m)")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("answer", help=cmd_answer.__doc__, description=cmd_answer.__doc__)
    _add_model_args(p)
    p.add_argument("--example", default="synthetic#0",
                   help="DATASET#ID: synthetic[:SEED]#ID, hotpotqa:PATH#ID, 2wiki:PATH#ID or jsonl:PATH#ID")
    p.add_argument("--max-new-tokens", type=int, default=24, help="greedy decoding limit (default 24)")
    p.set_defaults(func=cmd_answer)

    p = sub.add_parser("bench", help=cmd_bench.__doc__, description=cmd_bench.__doc__)
    p.add_argument("what", choices=["repair"], help="repair: wall time of repair(b) / dense prefill")
    _add_model_args(p)
    p.add_argument("--lengths", default="512,1024,2048", help="context lengths in tokens")
    p.add_argument("--budgets", default="0.05,0.1,0.2,0.4,1.0", help="fractions of reused rows repaired")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per cell after one warm-up (median)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkbenchError as err:
        print(f"kvwb: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
