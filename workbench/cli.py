"""`kvwb`: the workbench's command line. Each subcommand's --help explains every option."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

from workbench.diagnose import DEFAULT_BUDGETS, DEFAULT_SELECTORS
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SWEEP_SELECTORS

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

    lengths, budgets = _ints(args.lengths), _floats(args.budgets)
    model = wb.load_model(args.model, device=args.device, dtype=args.dtype)
    command = " ".join(["kvwb", *sys.argv[1:]])
    if args.what == "repair":
        table = bench.repair_ratios(model, lengths=lengths, budgets=budgets, repeats=args.repeats)
        print(bench.to_markdown(table, model, command))
    elif args.what == "saliency":
        print(bench.table_markdown(bench.saliency_ratios(model, lengths, args.repeats), model, command))
    else:
        print(bench.table_markdown(bench.diagnosis_ratio(model, args.examples), model, command))
    return 0


def cmd_diagnose(args) -> int:
    """Diagnose one example: signals, every selector at every budget, outcomes; write it to --out."""
    import workbench as wb
    from workbench.diagnose import check_budgets, diagnose, parse_selectors

    specs, budgets = parse_selectors(args.selectors), check_budgets(_floats(args.budgets))
    out = _check_out(args.out, args.force)
    example = wb.load_example(args.example)
    model = wb.load_model(args.model, device=args.device, dtype=args.dtype)
    diagnosis = diagnose(model, example, [str(s) for s in specs], budgets, seed=args.seed)
    if out is not None:
        diagnosis.save(out, overwrite=args.force)
    answers = diagnosis.info["answers"]
    print(f"example {example.id}: gold {' | '.join(example.gold) or '(none)'}; "
          f"dense {answers['dense']['text']!r}; spliced {answers['spliced']['text']!r}")
    print(diagnosis.summary().to_string(index=False))
    print(diagnosis.info["attribution_summary"])
    if out is not None:
        print(f"wrote {out}")
    return 0


def cmd_run(args) -> int:
    """Diagnose every example of a data set into a run folder (resumable; see docs/ARCHITECTURE.md)."""
    import workbench as wb
    from workbench.experiments.summary import load_run, summarize, summary_markdown, tokens_to_target
    from workbench.experiments.sweep import SweepConfig, run_sweep
    from workbench.selectors import parse_selector

    config = SweepConfig(dataset=args.dataset, n=args.n, selectors=tuple(args.selectors.split(",")),
                         budgets=tuple(_floats(args.budgets)), seed=args.seed, target_words=args.target_words,
                         attribution=args.attribution).checked()
    labels = [parse_selector(s).label for s in config.selectors]
    if args.reference not in labels:
        raise WorkbenchError(f"--reference {args.reference!r} is not among the selectors ({', '.join(labels)})")
    model = wb.load_model(args.model, device=args.device, dtype=args.dtype)
    out = run_sweep(model, config, args.out)
    run = load_run(out)
    table = summarize(run, reference=args.reference)
    print(summary_markdown(run, table, tokens_to_target(table, run.examples)))
    return 0


def cmd_summary(args) -> int:
    """Summarize a run: accuracy, flips, gap recovered and McNemar per selector and budget."""
    from pathlib import Path

    from workbench.experiments.summary import load_run, summarize, summary_markdown, tokens_to_target

    run = load_run(args.run)
    table = summarize(run, reference=args.reference)
    targets = tokens_to_target(table, run.examples, args.target_share, args.max_flip_rate)
    if args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        print(summary_markdown(run, table, targets))
    if args.html:
        from workbench import plots

        folder = Path(args.html)
        folder.mkdir(parents=True, exist_ok=True)
        figures = {"accuracy": plots.budget_curve(table, "em", "Exact match against budget"),
                   "flips": plots.budget_curve(table, "flip_rate", "Flip rate against dense"),
                   "rows": plots.rows_vs_accuracy(table, "Rows recomputed against exact match")}
        for name, fig in figures.items():
            fig.write_html(folder / f"{name}.html", include_plotlyjs=True)
        print(f"wrote {', '.join(f'{n}.html' for n in figures)} to {folder}")
    return 0


def _check_out(path: str | None, force: bool):
    """An output path that may be written: refuse an existing one unless --force."""
    from pathlib import Path

    if path is None:
        return None
    out = Path(path)
    if out.exists() and not force:
        raise WorkbenchError(f"{out} exists; pass --force to replace it")
    if not os.access(out.parent if out.parent.exists() else Path.cwd(), os.W_OK):
        raise WorkbenchError(f"cannot write to {out.parent}")
    return out


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

    p = sub.add_parser("diagnose", help=cmd_diagnose.__doc__, description=cmd_diagnose.__doc__)
    _add_model_args(p)
    p.add_argument("--example", default="synthetic#0", help="DATASET#ID, e.g. synthetic#3 or jsonl:data.jsonl#q7")
    p.add_argument("--selectors", default=",".join(DEFAULT_SELECTORS),
                   help="comma-separated selector specs NAME[:LAYOUT] (layouts: single, chunk, grow)")
    p.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)),
                   help="comma-separated fractions of the reused rows to recompute")
    p.add_argument("--seed", type=int, default=0, help="seed of the random selector and the patching sample")
    p.add_argument("--out", default=None, help="folder to write the Diagnosis to (parquet + JSON)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("run", help=cmd_run.__doc__, description=cmd_run.__doc__)
    _add_model_args(p)
    p.add_argument("--dataset", default="synthetic", help="data set spec: synthetic[:SEED], hotpotqa:PATH, "
                   "2wiki:PATH or jsonl:PATH")
    p.add_argument("--n", type=int, default=40, help="examples to diagnose (default 40)")
    p.add_argument("--selectors", default=",".join(SWEEP_SELECTORS),
                   help="comma-separated selector specs NAME[:LAYOUT] (oracle-patch is left out by default: "
                        "it patches every reused token)")
    p.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)), help="fractions of reused rows")
    p.add_argument("--seed", type=int, default=0, help="seed of the random selector")
    p.add_argument("--target-words", type=int, default=None,
                   help="synthetic only: pad passages with filler to about this many words in all")
    p.add_argument("--attribution", action="store_true",
                   help="also run the attribution-patching check (first-order vs actual) per example")
    p.add_argument("--reference", default="cacheblend", help="selector the summary tests against")
    p.add_argument("--out", required=True, help="run folder; an existing run with the same arguments resumes")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("summary", help=cmd_summary.__doc__, description=cmd_summary.__doc__)
    p.add_argument("run", help="a folder written by kvwb run")
    p.add_argument("--reference", default="cacheblend", help="selector to test every other against")
    p.add_argument("--format", choices=["markdown", "csv"], default="markdown", help="output format")
    p.add_argument("--target-share", type=float, default=0.9,
                   help="tokens-to-target: share of dense EM to reach (default 0.9)")
    p.add_argument("--max-flip-rate", type=float, default=0.2,
                   help="tokens-to-target: flip rate to get under (default 0.2)")
    p.add_argument("--html", default=None, help="also write the curves as standalone HTML into this folder")
    p.set_defaults(func=cmd_summary)

    from workbench.experiments.fidelity import add_fidelity_arguments, fidelity_main
    from workbench.experiments.unit_curve import add_curve_arguments, curve_main
    from workbench.report import add_report_arguments, report_main

    p = sub.add_parser("curve", help=curve_main.__doc__, description=curve_main.__doc__)
    _add_model_args(p)
    add_curve_arguments(p)
    p.set_defaults(func=curve_main)

    p = sub.add_parser("fidelity", help=fidelity_main.__doc__, description=fidelity_main.__doc__)
    _add_model_args(p)
    add_fidelity_arguments(p)
    p.set_defaults(func=fidelity_main)

    p = sub.add_parser("report", help=report_main.__doc__, description=report_main.__doc__)
    add_report_arguments(p)
    p.set_defaults(func=report_main)

    p = sub.add_parser("bench", help=cmd_bench.__doc__, description=cmd_bench.__doc__)
    p.add_argument("what", choices=["repair", "saliency", "diagnose"],
                   help="repair: repair(b) / dense prefill; saliency: CADENCE-Grad scoring / dense prefill; "
                        "diagnose: a whole Diagnosis / (dense prefill + answer)")
    _add_model_args(p)
    p.add_argument("--lengths", default="512,1024,2048", help="context lengths in tokens")
    p.add_argument("--budgets", default="0.05,0.1,0.2,0.4,1.0", help="fractions of reused rows repaired")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per cell after one warm-up (median)")
    p.add_argument("--examples", type=int, default=3, help="diagnose: synthetic examples to time")
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
