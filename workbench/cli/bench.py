"""`kvwb bench`: benchmarks as ratios measured in one process, printed as markdown; `kvwb bench gpu
PART`: the parts of the GPU run (`bench/gpu.sh`, `workbench.bench.gpu_run`)."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.common import (
    add_model_options, command_line, floats, ints, load_model, names, number, positive_int, printable, say,
)
from workbench.errors import WorkbenchError

NAME = "bench"


RATIOS = {
    "repair": "repair(b) / dense prefill",
    "saliency": "CADENCE-Grad scoring / dense prefill",
    "signals": "draft + question attention + saliency sharing one suffix pass / each on its own",
    "diagnose": "a whole Diagnosis / (dense prefill + answer)",
    "load": "the slowdown of a dense answer beside a second workbench process, per OpenMP wait policy and "
            "thread count",
    "executors": "examples per hour of the default sweep, local against Ray at each --workers count",
}
GPU_PARTS = {
    "versions": "every version the run uses, against the versions here (--manifest)",
    "exactness": "the exactness checks on one shape in each dtype",
    "timing": "absolute times of the shapes at each length, beside BCR's Table 10",
    "gemma": "a sliding-window shape: the exactness checks, then one timing row",
}
DTYPES = ("bfloat16", "float16", "float32")
GPU_HELP = ("the parts of the GPU run (`bench/gpu.sh`: versions, exactness, timing, gemma, each writing its own "
            "file as it goes) and `make gpu-wheels`'s list and sizes (wheels, sizes)")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="what", required=True, metavar="WHAT",
                           help="; ".join(f"{what}: {text}" for what, text in RATIOS.items()) + f"; gpu: {GPU_HELP}")
    for what, text in RATIOS.items():
        _add_ratio_options(sub.add_parser(what, help=text, description=text))
    _add_gpu_arguments(sub.add_parser("gpu", help=GPU_HELP, description=GPU_HELP))


def _add_ratio_options(p) -> None:
    """The options of the ratio benchmarks."""
    add_model_options(p)
    p.add_argument("--lengths", type=ints, default=None, dest="lengths_given",
                   help="context lengths in tokens (default 512,1024,2048; diagnose and signals: the synthetic "
                        "examples as generated, about 200 tokens)")
    p.add_argument("--budgets", type=floats, default=(0.05, 0.1, 0.2, 0.4, 1.0),
                   help="fractions of reused rows repaired")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed repeats per cell after one warm-up (median; >= 1)")
    p.add_argument("--examples", type=positive_int, default=3,
                   help="diagnose, signals and executors: synthetic examples to time")
    p.add_argument("--workers", type=ints, default=(1, 2), help="executors: Ray worker counts to time")


def _add_gpu_arguments(p) -> None:
    """`kvwb bench gpu PART`: each part's options (the shapes are checked when it runs)."""
    parts = p.add_subparsers(dest="part", required=True, metavar="PART", help=", ".join((*GPU_PARTS, "wheels",
                             "sizes")) + ": see each one's --help")
    for name, text in GPU_PARTS.items():
        q = parts.add_parser(name, help=text, description=text)
        q.add_argument("--out", type=Path, required=True, help="the file this part writes (rewritten as it goes)")
        q.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available, else cpu)")
        q.add_argument("--time-limit", type=number, default=600.0, help="seconds; nothing starts after")
        q.add_argument("--dtype", default="bfloat16", choices=DTYPES,
                       help="the random weights' dtype")
        q.add_argument("--repeats", type=positive_int, default=3, help="timed repeats (median)")
        q.add_argument("--no-diagnosis", action="store_true", help="skip the whole Diagnosis (the longest step)")
    v = parts.choices["versions"]
    v.add_argument("--manifest", type=Path, help="name==version lines of the versions here")
    v.add_argument("--site", default=None, help="where the carried wheels were installed")
    e = parts.choices["exactness"]
    e.add_argument("--shape", default="llama-3.2-1b", help="the shape checked (`bench.gpu.SHAPES`)")
    e.add_argument("--dtypes", type=names, default=("bfloat16", "float32"), help="dtypes checked, in order")
    e.add_argument("--length", type=positive_int, default=2048, help="context length in tokens")
    t = parts.choices["timing"]
    t.add_argument("--shapes", type=names, default=("llama-3.1-8b", "llama-3.2-1b"), help="shapes timed, in order")
    t.add_argument("--lengths", type=ints, default=(4096, 2048, 1024), help="context lengths in tokens, in order")
    g = parts.choices["gemma"]
    g.add_argument("--shape", default="gemma-3-1b", help="a sliding-window shape (`bench.gpu.SHAPES`)")
    g.add_argument("--length", type=positive_int, default=4096, help="context length in tokens")
    w = parts.add_parser("wheels", help="run the bench path on the tiny shapes here, then list what travels",
                         description="run the bench path on the tiny shapes here, then list what travels")
    w.add_argument("--requirements", type=Path, required=True, help="name==version of what travels")
    w.add_argument("--manifest", type=Path, required=True, help="name==version of all the bench path loads")
    z = parts.add_parser("sizes", help="the wheels' sizes, with the working tree a device call carries",
                         description="the wheels' sizes, with the working tree a device call carries")
    z.add_argument("folder", type=Path, help="the wheels' folder")
    z.add_argument("--root", type=Path, default=Path.cwd(), help="the working tree that travels too")


def _gpu(args) -> int:
    """`kvwb bench gpu PART`: one part of the GPU run (`workbench.bench.gpu_run`); 1 when it failed."""
    from workbench.bench import gpu_run
    from workbench.bench.gpu import SHAPES

    shapes = [*getattr(args, "shapes", ()), *([args.shape] if hasattr(args, "shape") else [])]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise WorkbenchError(f"unknown shapes {', '.join(unknown)}; use {', '.join(SHAPES)}")
    bad = [d for d in getattr(args, "dtypes", ()) if d not in DTYPES]
    if bad:
        raise WorkbenchError(f"--dtypes: unknown {', '.join(bad)}; use {', '.join(DTYPES)}")
    if hasattr(args, "device") and args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.command_text = printable(command_line(args))
    result = getattr(gpu_run, args.part)(args)
    return 0 if result is not False and (not isinstance(result, dict) or result.get("ok", True)) else 1


def command(args) -> int:
    """Benchmarks: ratios measured in one process, printed as markdown; `gpu`: the GPU run's parts."""
    from workbench.bench import ratios as bench
    from workbench.diagnosis import check_budgets

    if args.what == "gpu":
        return _gpu(args)

    budgets = check_budgets(args.budgets)
    args.lengths = args.lengths_given or (512, 1024, 2048)
    bad = [n for n in args.lengths if n < 32]
    if bad:
        raise WorkbenchError(f"--lengths must be context lengths of at least 32 tokens, got {bad}")
    if args.what == "load":
        return _load(args)
    if args.what == "executors":
        return _executors(args)
    model = load_model(args)
    if args.what == "repair":
        table = bench.repair_wide(bench.repair_ratios(model, lengths=args.lengths, budgets=budgets,
                                                      repeats=args.repeats))
    elif args.what == "saliency":
        table = bench.saliency_ratios(model, args.lengths, args.repeats)
    elif args.what == "signals":
        lengths = (None,) if args.lengths_given is None else args.lengths
        table = bench.signal_sharing(model, lengths, args.examples, args.repeats)
    else:
        lengths = (None,) if args.lengths_given is None else args.lengths
        table = bench.diagnosis_ratio(model, args.examples, lengths=lengths)
    from workbench.report import markdown_table

    info = model.describe()
    print(f"`{printable(command_line(args))}`")
    print()
    print(f"model {printable(info['name'])} ({info['dtype']}, {info['device']}); machine: {bench.machine()}")
    print()
    say(markdown_table(table))
    return 0


def _load(args) -> int:
    """`kvwb bench load`: fresh processes per setting (the wait policy is read when torch loads)."""
    from workbench.bench import load as bench_load, ratios as bench
    from workbench.report import markdown_table

    table = bench_load.load_slowdown(args.model, repeats=args.repeats)
    print(f"`{printable(command_line(args))}`")
    print()
    print(f"model {printable(args.model)}; machine: {bench.machine()}")
    print()
    say(markdown_table(table))
    return 0


def _executors(args) -> int:
    """`kvwb bench executors`: each executor loads the model itself (a Ray worker in its process)."""
    from workbench.bench import ratios as bench
    from workbench.bench.executors import executor_throughput
    from workbench.report import markdown_table

    table = executor_throughput(args.model, n=args.examples, workers=args.workers)
    print(f"`{printable(command_line(args))}`")
    print()
    print(f"model {printable(args.model)}; machine: {bench.machine()}")
    print()
    say(markdown_table(table))
    return 0

