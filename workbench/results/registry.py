"""The registry of RESULTS' regenerated tables and figures: NAME -> a function of the records.

A table function takes a `Records` (the committed records, each restored once) and returns a
DataFrame of formatted cells (`cells.fmt` keeps each number at full precision for the check); a
figure function returns a plotly figure built by `workbench.plots`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from workbench.registry import Registry


@dataclass(frozen=True)
class Entry:
    """A registered table or figure: its function and what it shows (one line)."""

    name: str
    build: Callable
    description: str


TABLES: Registry = Registry("results table")
FIGURES: Registry = Registry("results figure")


def register_table(name: str, description: str):
    """Register `fn(records) -> DataFrame` as the table NAME."""
    def wrap(fn):
        TABLES.add(name, Entry(name, fn, description))
        return fn
    return wrap


def register_figure(name: str, description: str):
    """Register `fn(records) -> figure` as the figure NAME (written as NAME.html)."""
    def wrap(fn):
        FIGURES.add(name, Entry(name, fn, description))
        return fn
    return wrap


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows of formatted cells as a table that keeps each `Cell` as it is (object columns: pandas'
    string columns would drop the numbers a cell carries)."""
    return pd.DataFrame(rows, dtype=object)
