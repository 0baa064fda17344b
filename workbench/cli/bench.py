"""`kvwb bench`: benchmarks as ratios measured in one process, printed as markdown."""

from __future__ import annotations

from workbench.cli.common import add_model_options, command_line, floats, ints, load_model, positive_int, printable, say
from workbench.errors import WorkbenchError

NAME = "bench"


def add_arguments(p) -> None:
    p.add_argument("what", choices=["repair", "saliency", "signals", "diagnose", "load", "executors"],
                   help="repair: repair(b) / dense prefill; saliency: CADENCE-Grad scoring / dense prefill; "
                        "signals: draft + question attention + saliency sharing one suffix pass / each on its own; "
                        "diagnose: a whole Diagnosis / (dense prefill + answer); load: the slowdown of a dense "
                        "answer beside a second workbench process, per OpenMP wait policy and thread count; executors: "
                        "examples per hour of the default sweep, local against Ray at each --workers count")
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


def command(args) -> int:
    """Benchmarks printed as ratios measured in one process."""
    from workbench.bench import ratios as bench
    from workbench.diagnosis import check_budgets

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

