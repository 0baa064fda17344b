"""Selectors: score every reused token, then spend a budget of rows in a layout.

    from workbench.selectors import parse_selector, select_rows
    spec = parse_selector("bcr:grow")
"""

from workbench.selectors import builtin  # noqa: F401  (registers the built-in selectors)
from workbench.selectors.layouts import LAYOUTS, Selection, random_scores, select_rows
from workbench.selectors.registry import (
    SelectorInfo, SelectorSpec, get_selector, parse_selector, parse_selectors, register_selector,
    selector_names,
)

__all__ = [
    "LAYOUTS", "Selection", "SelectorInfo", "SelectorSpec", "get_selector", "parse_selector",
    "parse_selectors", "random_scores", "register_selector", "select_rows", "selector_names",
]
