"""The selector registry: name -> a function that scores every reused token.

A selector is a plain function of a `SignalSet` returning one score per reused row
(`[n_reused]`, higher = recompute first). It declares which signals it reads, so its cost
record is the sum of theirs, and a default layout; any score can be spent in any layout
(`workbench.selectors.layouts`). Register your own with the decorator:

    @register_selector("my-score", uses=("deviation",), default_layout="single")
    def my_score(signals):
        return signals.deviation[("v", "l2")][1:].sum(0)   # [n_reused]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.errors import WorkbenchError
from workbench.selectors.layouts import LAYOUTS
from workbench.signals.bundle import Cost, SignalSet

SIGNAL_NAMES = ("deviation", "saliency", "draft", "question", "check_layer", "patch")


@dataclass(frozen=True)
class SelectorInfo:
    """A registered selector."""

    name: str
    score: Callable[[SignalSet], torch.Tensor]
    uses: tuple[str, ...]  # signals read (their costs add up to the selector's)
    default_layout: str
    layouts: tuple[str, ...]
    fixed: str | None  # "none" / "all": ignores scores and budget
    description: str
    source: str  # where the definition comes from
    needs_dense: bool = False  # reads the dense reference (a full prefill a real receiver skips)
    expensive: bool = False  # an upper-bound reference, not a practical method

    def cost(self, signals: SignalSet) -> Cost:
        """The summed cost of the signals this selector read (computed once, shared)."""
        total = Cost()
        for name in self.uses:
            total = total + signals.costs.get(name, Cost())
        return Cost(**{**total.__dict__, "needs_dense": self.needs_dense})


_REGISTRY: dict[str, SelectorInfo] = {}


def register_selector(name: str, *, uses: tuple[str, ...] = (), default_layout: str = "single",
                      layouts: tuple[str, ...] = LAYOUTS, fixed: str | None = None, description: str = "",
                      source: str = "", needs_dense: bool = False, expensive: bool = False):
    """Decorator: register `fn(signals) -> scores [n_reused]` under `name`."""
    if ":" in name or not name:
        raise WorkbenchError(f"selector names must be non-empty and contain no ':', got {name!r}")
    unknown = [u for u in uses if u not in SIGNAL_NAMES]
    if unknown:
        raise WorkbenchError(f"selector {name!r} uses unknown signals {unknown}; known: {SIGNAL_NAMES}")
    if default_layout not in layouts or not set(layouts) <= set(LAYOUTS):
        raise WorkbenchError(f"selector {name!r}: layouts must be among {LAYOUTS} and include the default")

    def decorate(fn):
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        _REGISTRY[name] = SelectorInfo(name, fn, tuple(uses), default_layout, tuple(layouts), fixed, doc,
                                       source, needs_dense, expensive)
        return fn
    return decorate


def selector_names() -> list[str]:
    return list(_REGISTRY)


def get_selector(name: str) -> SelectorInfo:
    if name not in _REGISTRY:
        raise WorkbenchError(f"unknown selector {name!r}; valid: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


@dataclass(frozen=True)
class SelectorSpec:
    """A selector with the layout to spend its scores in, written `name` or `name:layout`."""

    info: SelectorInfo
    layout: str

    @property
    def label(self) -> str:
        return self.info.name if self.layout == self.info.default_layout else f"{self.info.name}:{self.layout}"

    def __str__(self) -> str:
        return f"{self.info.name}:{self.layout}"


def parse_selector(spec: str) -> SelectorSpec:
    """`bcr`, `bcr:grow`, `random:chunk` -> SelectorSpec; clear errors for unknown names/layouts."""
    name, _, layout = spec.strip().partition(":")
    info = get_selector(name)
    layout = layout or info.default_layout
    if layout not in info.layouts:
        raise WorkbenchError(f"selector {name!r} cannot use layout {layout!r}; it can use {', '.join(info.layouts)}")
    return SelectorSpec(info, layout)


def parse_selectors(specs) -> list[SelectorSpec]:
    """A comma-separated string or a list of specs; duplicates removed, order kept."""
    items = specs.split(",") if isinstance(specs, str) else list(specs)
    parsed = [parse_selector(s) for s in items if str(s).strip()]
    if not parsed:
        raise WorkbenchError("no selectors given")
    unique = {str(p): p for p in parsed}
    return list(unique.values())
