"""The `kvwb` parser and the one place errors become one line on stderr (and SIGTERM an
interruption, as Ctrl-C is)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from contextlib import contextmanager

from workbench.cli import (
    answer, answerability, bench, curve, diagnose, fidelity, pipeline, prepare, report, results, run, summary,
)
from workbench.cli.common import one_line, printable
from workbench.errors import WorkbenchError
from workbench.registry import PLUGINS_ENV, load_plugins

COMMANDS = (prepare, answer, answerability, diagnose, run, summary, curve, fidelity, pipeline, report, results, bench)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (the usage is one `--help` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kvwb", description="KV Repair Workbench: splice isolated KV caches, compare with the "
                    "dense prefill, and repair a budget of rows exactly. Each command's --help explains its options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        doc = module.command.__doc__
        p = sub.add_parser(module.NAME, help=doc, description=doc)
        module.add_arguments(p)
        p.set_defaults(func=module.command)
    return parser


def fail(message: str, code: int = 2) -> int:
    print(f"kvwb: error: {printable(one_line(message), stream=sys.stderr)}", file=sys.stderr)
    return code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command stands: every run then ends as it does on Ctrl-C (its
    manifest `interrupted`, temporaries removed) instead of dying with the manifest `running`."""


def _terminate(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


@contextmanager
def sigterm_interrupts():
    """For the block, SIGTERM raises `Terminated` (a KeyboardInterrupt); the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input and file-system errors end in one line, not a traceback."""
    from workbench import threads

    argv = list(sys.argv[1:] if argv is None else argv)
    problems = load_plugins()  # $KVWB_PLUGINS, as the app loads them (their data sets reach --help)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return fail(f"{problems[0]}{more}; fix it or take it out of ${PLUGINS_ENV}")
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        threads.requested_threads()  # a bad KVWB_THREADS is refused here, as one line
        with sigterm_interrupts():
            return args.func(args)
    except WorkbenchError as err:
        return fail(str(err))
    except BrokenPipeError:  # `kvwb summary RUN | head`: stop quietly
        _silence_stdout()
        return 1
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        return fail(f"{where}{err.strerror or err} (a file-system error; fix it and run the command again)", code=1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        print("kvwb: interrupted; every output appears only when complete, so nothing half-written is left",
              file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
