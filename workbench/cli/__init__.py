"""`kvwb`: the workbench's command line, one small module per command (`kvwb COMMAND --help`)."""

from workbench.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
