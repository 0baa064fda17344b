"""`kvwb results`: RESULTS' tables and figures regenerated from the committed records, and checked."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from workbench.cli.common import printable, say, warnings_as_lines
from workbench.errors import WorkbenchError

NAME = "results"


def add_arguments(p) -> None:
    p.add_argument("--check", action="store_true",
                   help="compare every table marked `<!-- kvwb-results: NAME -->` in --results with the one the "
                        "records give, cell by cell at the precision printed; exit 1 naming each difference")
    p.add_argument("--results", action="append", default=None, metavar="FILE",
                   help="the markdown file(s) --check reads (default docs/RESULTS.md; repeat for several, e.g. "
                        "docs/records/README.md's provenance table)")
    p.add_argument("--records", default="docs/records", help="the committed records (default docs/records)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write each table as DIR/NAME.md and DIR/NAME.csv and each figure as DIR/NAME.html")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    p.add_argument("--table", action="append", default=[], metavar="NAME",
                   help="print this table as markdown (repeat for several; with --out: write only these)")
    p.add_argument("--list", action="store_true", help="list the registered tables and figures")


def command(args) -> int:
    """Regenerate RESULTS' tables and figures from the committed records (--out DIR, --table NAME),
    or check that every marked table of RESULTS says what the records hold (--check)."""
    from workbench.results import FIGURES, TABLES, Records, check_document, write_all
    from workbench.results.markdown import to_markdown

    if args.list and (args.check or args.out or args.table):
        given = "--check" if args.check else "--out" if args.out else "--table"
        raise WorkbenchError(f"--list only lists the tables and figures: give it without {given}")
    if args.list:
        for kind, registry in (("table", TABLES), ("figure", FIGURES)):
            for name, entry in registry.items():
                say(f"{kind} {name}: {entry.description}")
        return 0
    if not (args.check or args.out or args.table):
        raise WorkbenchError("say what to do: --check, --out DIR, --table NAME or --list")
    for name in args.table:
        TABLES.get_or_raise(name)  # an unknown name fails before any record is restored
    documents = [Path(p) for p in (args.results or ["docs/RESULTS.md"])]
    if args.check:
        missing = [str(p) for p in documents if not p.is_file()]
        if missing:
            raise WorkbenchError(f"no such file: {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="kvwb-results-") as scratch:
        records = Records(args.records, scratch)
        if args.out:
            with warnings_as_lines():  # a table the records refuse (a study short of its n): one line
                written = write_all(Path(args.out), records, force=args.force, names=args.table or None)
            say(f"wrote {len(written)} files to {printable(args.out)}")
        elif args.table:
            for name in args.table:
                say(f"<!-- kvwb-results: {name} -->\n{to_markdown(TABLES[name].build(records))}")
        if not args.check:
            return 0
        failed = False
        for document in documents:
            report = check_document(document, records, progress=sys.stderr.isatty())
            for line in report.differences:
                say(line)
            say(f"{printable(str(document))}: {report.summary()}")
            failed |= not report.ok
    return 1 if failed else 0
