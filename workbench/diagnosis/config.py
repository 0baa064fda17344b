"""`DiagnoseConfig`: everything that decides what a Diagnosis computes, typed and validated once.

    config = DiagnoseConfig(selectors=("cadence-grad", "bcr:grow"), budgets=(0.1, 0.2))
    config = DiagnoseConfig.of(selectors=("bcr:grow",), draft_k=3, tau=0.5)  # flat names, routed
    d = diagnose(model, example, config)

It holds the signals' knobs as `signal_options` (`SignalOptions`) and the units' as
`unit_options` (`UnitOptions`); each class checks its own. `of` / `with_` take the flat names
(`FLAT_KEYS`) and put each where it lives. The same object is recorded in every Diagnosis and,
inside a `SweepConfig`, in every run manifest; `to_dict` / `from_dict` round-trip it through
JSON as one flat dict (the manifests' "diagnose" entry and a resumed run's identity).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from workbench.checks import check_int
from workbench.errors import WorkbenchError
from workbench.layout import POOLS
from workbench.selectors.budget import budget_rows
from workbench.selectors import UnitOptions, default_selectors, parse_selectors
from workbench.signals import SignalOptions
from workbench.splice import REROTATIONS

DEFAULT_BUDGETS = (0.1, 0.2, 0.3, 0.5)
MAX_COIN_DRAWS = 100  # a draw costs a full set of repairs: more only slows a run (see DiagnoseConfig.checked)
SIGNAL_KEYS = tuple(f.name for f in fields(SignalOptions))
UNIT_KEYS = ("chunk_size", "chunk_scope", "tau", "grow_max_span")  # chunk_counting: Algorithm 1 only (see checked)
HELD = {"signal_options": (SignalOptions, SIGNAL_KEYS), "unit_options": (UnitOptions, UNIT_KEYS)}  # held: class, keys
# Every flat setting, in the order `to_dict` writes them (the run manifests' order: keep it).
FLAT_KEYS = ("selectors", "budgets", "seed", "check_layer", "draft_k", "patch_max_tokens", "pool", "coin_draws",
             "chunk_size", "chunk_scope", "tau", "grow_max_span", "max_new_tokens", "attribution", "rerotation",
             "epic_k", "relaxkv_context", "densedev_norm", "stop_at_newline")
# added later: left out of to_dict at their defaults, so every earlier manifest (and a resumed run's
# identity) reads as it was written
OMITTED_AT_DEFAULT = {"densedev_norm": "none", "stop_at_newline": True}


def check_budgets(budgets) -> tuple[float, ...]:
    """Budgets as sorted unique fractions in [0, 1]; a clear error otherwise."""
    if isinstance(budgets, (str, bytes)) or not hasattr(budgets, "__iter__"):
        raise WorkbenchError(f"budgets must be a list of fractions in [0, 1], got {budgets!r}")
    out = []
    for b in budgets:
        budget_rows(b, 1)  # raises a clear error outside [0, 1]
        out.append(float(b))
    if not out:
        raise WorkbenchError("no budgets given")
    return tuple(sorted(set(out)))


def _refuse_unknown(names, known) -> None:
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise WorkbenchError(f"unknown diagnose settings {unknown}; known: {sorted(known)}")


@dataclass(frozen=True)
class DiagnoseConfig:
    """What `diagnose` computes for one example (defaults: every selector, every signal)."""

    selectors: tuple[str, ...] = field(default_factory=lambda: default_selectors(expensive=True))
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    pool: str = "changed"  # the candidate rows a budget is a fraction of: "changed" or "all" (see Layout)
    coin_draws: int = 5  # draws of a seeded control (the coin): BCR's five-seed coin mean
    max_new_tokens: int = 24  # greedy answer limit
    attribution: bool = True  # run the attribution-patching check (3 x signal_options.patch_max_tokens forwards)
    rerotation: str = "delta"  # how the splice moves keys: "delta" (as reuse systems do) or "exact"
    signal_options: SignalOptions = field(default_factory=SignalOptions)  # seed, check layer, draft k, EPIC, RelaxKV
    unit_options: UnitOptions = field(default_factory=UnitOptions)  # chunk size and scope, grow tau and span cap
    stop_at_newline: bool = True  # an answer ends at its first line break, that line scored; False: the whole answer

    @classmethod
    def of(cls, **settings) -> DiagnoseConfig:
        """A config from flat settings, as `to_dict` writes them (`of(budgets=(0.2,), draft_k=3)`)."""
        return cls().with_(**settings)

    def with_(self, **settings) -> DiagnoseConfig:
        """This config with `settings` replaced: a flat name goes into the options that hold it
        (`draft_k` into `signal_options`, `tau` into `unit_options`); `signal_options=` /
        `unit_options=` replace the held options whole, before any flat name. Unknown names are refused."""
        _refuse_unknown(settings, FLAT_KEYS + tuple(HELD))
        out = replace(self, **{k: v for k, v in settings.items() if k not in SIGNAL_KEYS + UNIT_KEYS})
        for name, (_, keys) in HELD.items():
            flat = {k: settings[k] for k in keys if k in settings}
            if flat:
                out = replace(out, **{name: replace(out._held(name), **flat)})
        return out

    def _held(self, name: str):
        """The held option object `name`, refused when it is not of its class."""
        value, cls = getattr(self, name), HELD[name][0]
        if not isinstance(value, cls):
            raise WorkbenchError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
        return value

    def checked(self) -> DiagnoseConfig:
        """A validated, normalized copy (selector specs canonical, budgets sorted, tau a float); raises on bad input."""
        specs = parse_selectors(self.selectors)
        signals = self._held("signal_options").checked()
        units = self._held("unit_options").checked()
        if units.chunk_counting != UnitOptions.chunk_counting:
            raise WorkbenchError(f"unit_options.chunk_counting must be {UnitOptions.chunk_counting!r} in a diagnosis "
                                 f"(its chunks are counted by BCR Algorithm 1), got {units.chunk_counting!r}")
        check_int(self.max_new_tokens, "max_new_tokens")
        if check_int(self.coin_draws, "coin_draws") > MAX_COIN_DRAWS:
            raise WorkbenchError(f"coin_draws must be at most {MAX_COIN_DRAWS}, got {self.coin_draws!r}: each draw "
                                 f"repairs every budget once more, so a run's time grows with it (BCR averages 5)")
        if self.pool not in POOLS:
            raise WorkbenchError(f"pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if self.rerotation not in REROTATIONS:
            raise WorkbenchError(f"rerotation must be one of {', '.join(REROTATIONS)}, got {self.rerotation!r}")
        for name in ("attribution", "stop_at_newline"):
            if not isinstance(getattr(self, name), bool):
                raise WorkbenchError(f"{name} must be True or False, got {getattr(self, name)!r}")
        return replace(self, selectors=tuple(s.label for s in specs), budgets=check_budgets(self.budgets),
                       signal_options=signals, unit_options=units)

    def to_dict(self) -> dict:
        """Flat and JSON-safe (tuples become lists): the held options' knobs beside the config's own, as `FLAT_KEYS`
        (`densedev_norm` and `stop_at_newline` only where they are not at their defaults: `OMITTED_AT_DEFAULT`)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in HELD}
        for name, (_, keys) in HELD.items():
            values.update({k: getattr(getattr(self, name), k) for k in keys})
        return {k: list(values[k]) if isinstance(values[k], tuple) else values[k] for k in FLAT_KEYS
                if k not in OMITTED_AT_DEFAULT or values[k] != OMITTED_AT_DEFAULT[k]}

    @classmethod
    def from_dict(cls, data: dict) -> DiagnoseConfig:
        """From `to_dict` output (unknown keys are refused, missing ones take their defaults)."""
        if not isinstance(data, dict):
            raise WorkbenchError(f"a diagnose config must be a JSON object, got {type(data).__name__}")
        _refuse_unknown(data, FLAT_KEYS)
        return cls.of(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
