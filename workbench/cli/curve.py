"""`kvwb curve`: the unit-of-choice error curve (BCR Table 8) into a run folder."""

from __future__ import annotations

import time

from workbench.cli.common import add_model_options, count, ints, load_model, number, printable, say, show
from workbench.experiments.unit_curve import DEFAULT_UNITS

NAME = "curve"


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument("--tokens", type=count, default=2048, help="prompt length in tokens (default 2048)")
    p.add_argument("--prompts", type=count, default=6, help="prompts (synthetic seeds seed..seed+N-1; >= 2)")
    p.add_argument("--units", type=ints, default=DEFAULT_UNITS,
                   help=f"comma-separated units of choice in rows (default {show(DEFAULT_UNITS)})")
    p.add_argument("--budget", type=number, default=0.2, help="nominal fraction of the segment (--pool) restored (default 0.2)")
    p.add_argument("--seeds", type=count, default=5, help="random draws per prompt and unit (default 5)")
    p.add_argument("--seed", type=int, default=0, help="first prompt seed and random-seed base (default 0)")
    p.add_argument("--pool", choices=["changed", "all"], default="changed",
                   help="the segment: rows computed under a changed prefix (passages after the first, the "
                        "paper's setting; default) or all passage rows")
    p.add_argument("--out", required=True, help="run folder to write (manifest.json + parquet)")
    p.add_argument("--force", action="store_true", help="replace --out if the workbench wrote it")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def command(args) -> int:
    """Measure the unit-of-choice curve (BCR Table 8) and write it to --out; print the summary."""
    from workbench.experiments.unit_curve import check_curve_args, run_curve
    from workbench.runstore import check_out, load_curve

    tokens, prompts, units, budget, seeds, seed = check_curve_args(
        args.tokens, args.prompts, args.units, args.budget, args.seeds, args.seed)
    out = check_out(args.out, kind="curve", force=args.force)
    model = load_model(args)
    t0 = time.perf_counter()
    run_curve(model, out, tokens=tokens, prompts=prompts, units=units, budget=budget, seeds=seeds, seed=seed,
              progress=args.progress, force=args.force, pool=args.pool)
    from workbench.report import curve_summary_markdown

    run = load_curve(out)
    segment = "passages after the first" if args.pool == "changed" else "all passages"
    print(f"unit-of-choice curve: {prompts} prompts of ~{tokens} tokens, segment {segment} "
          f"(rows {int(run.curve['n_segment'].min())}-{int(run.curve['n_segment'].max())}), "
          f"budget {budget:g}, {seeds} random seeds; {time.perf_counter() - t0:.0f} s")
    say(curve_summary_markdown(run.summary))
    print(f"wrote {printable(out)}")
    return 0
