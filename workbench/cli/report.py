"""`kvwb report`: standalone per-example reports (HTML or JSON) from a run folder."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.common import printable, warnings_as_lines
from workbench.errors import WorkbenchError

NAME = "report"
SUFFIXES = (".html", ".json")


def add_arguments(p) -> None:
    p.add_argument("run", help="a run folder written by `kvwb run --out RUN` "
                               "(or one folder written by `kvwb diagnose --out`)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--example", default=None, metavar="ID", help="the example to report")
    which.add_argument("--all", action="store_true", help="one report per example plus index.html into --out DIR")
    p.add_argument("--out", required=True,
                   help="FILE.html (standalone, opens offline) or FILE.json; a folder with --all")
    p.add_argument("--force", action="store_true", help="replace --out if it exists (a folder only if the "
                                                        "workbench wrote it)")


def command(args) -> int:
    """Write a per-example report (HTML or JSON) or, with --all, one per example and an index."""
    from workbench.runstore import check_out

    run = Path(args.run)
    if not run.is_dir():
        raise WorkbenchError(f"{run} is not a folder; give a run folder written by `kvwb run ... --out RUN`")
    if not args.all and args.example is None and not (run / "diagnosis.json").is_file():
        raise WorkbenchError(f"give --example ID (one example of {run}) or --all (every example)")
    if args.all:
        check_out(args.out, force=args.force)
    else:
        check_out(args.out, force=args.force, file_suffixes=SUFFIXES)
    from workbench.report import report_run

    with warnings_as_lines():  # a skipped corrupt example: one warning line each
        out = report_run(run, example_id=args.example, all=args.all, out=args.out, force=args.force)
    print(f"wrote {printable(Path(out) / 'index.html' if args.all else out)}")
    return 0
