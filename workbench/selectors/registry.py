"""The selector registry: name -> a function that scores every reused token.

A selector is a plain function of a `SignalSet` returning one score per reused row
(`[n_reused]`, higher = recompute first). It declares the records it reads (`uses`), so its
cost record is the sum of theirs, and a default unit of choice; any score can be spent in
any unit (`workbench.selectors.units`). Register your own with the decorator:

    @register_selector("my-score", uses=("deviation",), default_unit="single")
    def my_score(signals):
        return signals["deviation"][("v", "l2")][1:].sum(0)   # [n_reused]

Two optional hooks change what a budget buys. `spend(signals, pool, n_rows) -> int` is the rows
a selector spends when it does not spend the budget's (EPIC with a fixed k per passage);
`restrict(signals, positions, ranking, budget) -> bool [suffix_start]` is the context its
repaired rows may attend to (RelaxKV's restricted recompute; None: every key).

The registry also answers which selectors are the reference bounds (`none`: reuse all,
`full`: recompute all) and which specs run by default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.errors import WorkbenchError
from workbench.registry import Registry, qualified_name
from workbench.selectors.units import UNITS
from workbench.signals.registry import Cost, get_signal, record_names
from workbench.signals.signal_set import SignalSet

# The comparison every summary runs by default, when the run has it: the practical baseline
# the source texts measure against (CacheBlend), else the coin.
COMPARISON_PREFERENCE = ("cacheblend", "random")


@dataclass(frozen=True)
class SelectorInfo:
    """A registered selector."""

    name: str
    score: Callable[[SignalSet], torch.Tensor]
    uses: tuple[str, ...]  # records read (their costs add up to the selector's)
    default_unit: str
    units: tuple[str, ...]
    fixed: str | None  # "none" / "all": a reference bound that ignores scores and budget
    description: str
    source: str  # where the definition comes from
    needs_dense: bool = False  # reads the dense reference (a full prefill a real receiver skips)
    expensive: bool = False  # an upper-bound reference, not a practical method: not run by default
    default_units: tuple[str, ...] = ()  # units run by default (the default unit when empty)
    drawn: bool = False  # a seeded control: scored once per draw, `score(signals, draw)`
    matched: bool = False  # a control matched to another selector (`coin:A`): its rows come from A's
    spend: Callable | None = None  # (signals, pool [n_pool], n_rows) -> rows it spends (None: n_rows)
    restrict: Callable | None = None  # (signals, positions, ranking [n_reused], budget) -> context bool [suffix_start]
    code: str = ""  # the code that defined it: its function's module and qualified name (a run records it)

    @property
    def builtin(self) -> bool:
        """Defined by the workbench itself (a plugin may not take its name)."""
        return self.code.startswith("workbench.")

    @property
    def is_reference(self) -> bool:
        return self.fixed is not None

    def cost(self, signals: SignalSet) -> Cost:
        """The summed cost of the records this selector read, and of those they read (each computed
        once, shared)."""
        total = signals.cost_of(self.uses)
        return Cost(**{**total.to_dict(), "needs_dense": self.needs_dense})


_REGISTRY: Registry[SelectorInfo] = Registry("selector")


def register_selector(name: str, *, uses: tuple[str, ...] = (), default_unit: str = "single",
                      units: tuple[str, ...] = UNITS, fixed: str | None = None, description: str = "",
                      source: str = "", needs_dense: bool = False, expensive: bool = False,
                      default_units: tuple[str, ...] = (), drawn: bool = False, matched: bool = False,
                      spend: Callable | None = None, restrict: Callable | None = None):
    """Decorator: register `fn(signals) -> scores [n_reused]` under `name` (a `drawn` control:
    `fn(signals, draw)`, scored once per draw with a seed of its own); `spend` and `restrict` as in
    the module docstring."""
    if ":" in name or not name:
        raise WorkbenchError(f"selector names must be non-empty and contain no ':', got {name!r}")
    unknown = [u for u in uses if u not in record_names()]
    if unknown:
        raise WorkbenchError(f"selector {name!r} uses unknown records {unknown}; known: {record_names()}")
    if default_unit not in units or not set(units) <= set(UNITS) or not set(default_units) <= set(units):
        raise WorkbenchError(f"selector {name!r}: units must be among {UNITS} and include the default ones")
    if fixed not in (None, "none", "all"):
        raise WorkbenchError(f"selector {name!r}: fixed must be None, 'none' or 'all', got {fixed!r}")

    def decorate(fn):
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        code = qualified_name(fn)
        held = _REGISTRY.get(name)
        module = getattr(fn, "__module__", None)
        if held is not None and held.builtin and module != getattr(held.score, "__module__", None):
            raise WorkbenchError(f"plugin module {module!r} may not register the selector {name!r}: it is built in "
                                 f"({held.code}); register it under a name of its own")
        _REGISTRY.add(name, SelectorInfo(name, fn, tuple(uses), default_unit, tuple(units), fixed, doc,
                                       source, needs_dense, expensive, tuple(default_units) or (default_unit,),
                                       drawn, matched, spend, restrict, code))
        return fn
    return decorate


def selector_code(specs) -> dict[str, str]:
    """{selector name: the code that defines it} for every selector `specs` run (a matched coin's and
    the selector it copies): what a run records, and a resume must find unchanged."""
    out = {}
    for spec in parse_selectors(specs):
        for info in (spec.info, spec.informed):
            out[info.name] = info.code
    return out


def signal_code(specs) -> dict[str, str]:
    """{record name: the code that computes it} for every record the selectors `specs` run read
    (`uses`): recorded beside `selector_code`, so a resume finds the signals unchanged too."""
    out = {}
    for spec in parse_selectors(specs):
        for info in (spec.info, spec.informed):
            for name in info.uses:
                out[name] = get_signal(name, "record").code
    return dict(sorted(out.items()))


def selector_names() -> list[str]:
    return list(_REGISTRY.names())


def get_selector(name: str) -> SelectorInfo:
    return _REGISTRY.get_or_raise(name)


def reference_selectors() -> tuple[str, ...]:
    """The reference bounds: reuse every row (`none`) and recompute every row (`full`)."""
    return tuple(name for name, info in _REGISTRY.items() if info.is_reference)


# The specs a run uses when none are given, written out: registering a selector never changes what
# an existing default run holds (its identity), so a resume of an older default run stays valid.
DEFAULT_SPECS = ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad", "bcr",
                 "bcr:grow", "bcr:single", "qattn")
EXPENSIVE_SPECS = ("oracle-patch",)  # upper-bound references, run when asked (`expensive=True`)


def default_selectors(expensive: bool = False) -> tuple[str, ...]:
    """The default specs (`DEFAULT_SPECS`); `expensive` adds the upper-bound references."""
    return DEFAULT_SPECS + (EXPENSIVE_SPECS if expensive else ())


def registered_specs() -> tuple[str, ...]:
    """Every registered selector in each of its default units, in registration order: the app's
    choices and the fixed colours (a matched control, `coin:A`, names its selector and is left out)."""
    specs = []
    for info in _REGISTRY.values():
        if not info.matched:
            specs += [info.name if unit == info.default_unit else f"{info.name}:{unit}" for unit in info.default_units]
    return tuple(specs)


def comparison_reference(labels) -> str | None:
    """The selector a summary compares against by default: the first of COMPARISON_PREFERENCE
    present in `labels`, else None (the comparison is then left out)."""
    present = set(labels)
    return next((name for name in COMPARISON_PREFERENCE if name in present), None)


@dataclass(frozen=True)
class SelectorSpec:
    """A selector with the unit to spend its scores in, written `name` or `name:unit`."""

    info: SelectorInfo
    unit: str
    matches: SelectorSpec | None = None  # for a matched control (`coin:A`): the selector A it copies

    @property
    def informed(self) -> SelectorInfo:
        """The selector whose scores and hooks this spec spends: A for `coin:A`, else its own."""
        return self.matches.info if self.matches is not None else self.info

    @property
    def label(self) -> str:
        if self.matches is not None:
            return f"{self.info.name}:{self.matches.label}"
        return self.info.name if self.unit == self.info.default_unit else f"{self.info.name}:{self.unit}"

    def __str__(self) -> str:
        if self.matches is not None:
            return f"{self.info.name}:{self.matches}"
        return f"{self.info.name}:{self.unit}"


def parse_selector(spec: str) -> SelectorSpec:
    """`bcr`, `bcr:grow`, `random:chunk`, `coin:bcr` -> SelectorSpec; clear errors for unknown
    names/units. A matched control is written `NAME:SELECTOR`: `coin:bcr:grow` is the coin matched
    to `bcr:grow` (its unit, its units' sizes)."""
    name, _, unit = str(spec).strip().partition(":")
    info = get_selector(name)
    if info.matched:
        if not unit:
            raise WorkbenchError(f"{name!r} is matched to a selector: write {name}:SELECTOR, e.g. {name}:bcr")
        matches = parse_selector(unit)
        if matches.info.is_reference or matches.info.drawn or matches.info.matched:
            raise WorkbenchError(f"{name!r} matches an informed selector, not {matches.label!r} (a reference "
                                 "bound or another control)")
        return SelectorSpec(info, matches.unit, matches)
    unit = unit or info.default_unit
    if unit not in info.units:
        raise WorkbenchError(f"selector {name!r} cannot use unit {unit!r}; it can use {', '.join(info.units)}")
    return SelectorSpec(info, unit)


def parse_selectors(specs) -> list[SelectorSpec]:
    """A comma-separated string or a list of specs; duplicates removed, order kept."""
    items = specs.split(",") if isinstance(specs, str) else list(specs)
    parsed = [parse_selector(s) for s in items if str(s).strip()]
    if not parsed:
        raise WorkbenchError("no selectors given")
    unique = {str(p): p for p in parsed}
    return list(unique.values())
