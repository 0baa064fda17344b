"""Selectors: score every reused token, then spend a budget of rows in a unit of choice.

    from workbench.selectors import choose, parse_selector
    spec = parse_selector("bcr:grow")
    rows, meta = choose(spec, scores, 0.2, pool)   # scores [n_pool] -> rows into the pool
"""

from workbench.selectors import builtin  # noqa: F401  (registers the built-in selectors)
from workbench.selectors.registry import (
    SelectorInfo, SelectorSpec, comparison_reference, default_selectors, get_selector, parse_selector,
    parse_selectors, reference_selectors, register_selector, selector_code, selector_names,
    signal_code,
)
from workbench.selectors.budget import attention_pairs, budget_rows
from workbench.selectors.choose import choose
from workbench.selectors.units import UNITS, UnitChoice, UnitOptions, random_scores, select_rows

__all__ = [
    "UNITS", "SelectorInfo", "SelectorSpec", "UnitChoice", "UnitOptions", "attention_pairs", "budget_rows", "choose",
    "comparison_reference", "default_selectors", "get_selector", "parse_selector", "parse_selectors", "random_scores",
    "reference_selectors", "register_selector", "select_rows", "selector_code", "selector_names",
    "signal_code",
]
