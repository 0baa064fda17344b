"""`DiagnoseConfig`: everything that decides what a Diagnosis computes, typed and validated once.

    config = DiagnoseConfig(selectors=("cadence-grad", "bcr:grow"), budgets=(0.1, 0.2))
    d = diagnose(model, example, config)

The same object is recorded in every Diagnosis and, inside a `SweepConfig`, in every run
manifest; `to_dict` / `from_dict` round-trip it through JSON.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from workbench.errors import WorkbenchError
from workbench.seeds import check_seed
from workbench.kv import REROTATIONS
from workbench.layout import POOLS
from workbench.repair import budget_rows
from workbench.selectors import UnitOptions, default_selectors, parse_selectors
from workbench.selectors.units import CHUNK_SCOPES
from workbench.signals import SignalOptions

DEFAULT_BUDGETS = (0.1, 0.2, 0.3, 0.5)
_SIGNALS, _UNITS = SignalOptions(), UnitOptions()  # the defaults live there, once
MAX_COIN_DRAWS = 100  # a draw costs a full set of repairs: more only slows a run (see DiagnoseConfig.checked)


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


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkbenchError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class DiagnoseConfig:
    """What `diagnose` computes for one example (defaults: every selector, every signal)."""

    selectors: tuple[str, ...] = field(default_factory=lambda: default_selectors(expensive=True))
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    seed: int = 0  # the coin and the attribution sample
    check_layer: int = _SIGNALS.check_layer  # CacheBlend's check layer
    draft_k: int = _SIGNALS.draft_k  # BCR's draft length
    patch_max_tokens: int = _SIGNALS.patch_max_tokens  # tokens the attribution check patches
    pool: str = "changed"  # the candidate rows a budget is a fraction of: "changed" or "all" (see Layout)
    coin_draws: int = 5  # draws of a seeded control (the coin): BCR's five-seed coin mean
    chunk_size: int = _UNITS.chunk_size  # B of the chunk unit
    chunk_scope: str = _UNITS.chunk_scope  # chunks over the whole candidate span (BCR) or "passage" (within each)
    tau: float = _UNITS.tau  # threshold of the grow unit
    grow_max_span: int | None = _UNITS.grow_max_span  # BCR Table 12: a grown region holds at most 64 rows (None: no cap)
    max_new_tokens: int = 24  # greedy answer limit
    attribution: bool = True  # run the attribution-patching check (3 x patch_max_tokens forwards)
    rerotation: str = "delta"  # how the splice moves keys: "delta" (as reuse systems do) or "exact"
    epic_k: int | None = None  # EPIC: the first k rows of every passage (None: the budget spread over passages)
    relaxkv_context: float | None = None  # RelaxKV: share of passage rows in its context (None: the budget's)

    def checked(self) -> DiagnoseConfig:
        """A validated, normalized copy (selector specs canonical, budgets sorted); raises on bad input."""
        specs = parse_selectors(self.selectors)
        check_seed(self.seed)
        _positive_int(self.check_layer, "check_layer", 0)
        _positive_int(self.draft_k, "draft_k")
        _positive_int(self.patch_max_tokens, "patch_max_tokens")
        _positive_int(self.chunk_size, "chunk_size")
        _positive_int(self.max_new_tokens, "max_new_tokens")
        if _positive_int(self.coin_draws, "coin_draws") > MAX_COIN_DRAWS:
            raise WorkbenchError(f"coin_draws must be at most {MAX_COIN_DRAWS}, got {self.coin_draws!r}: each draw "
                                 f"repairs every budget once more, so a run's time grows with it (BCR averages 5)")
        if self.grow_max_span is not None:
            _positive_int(self.grow_max_span, "grow_max_span")
        if self.epic_k is not None:
            _positive_int(self.epic_k, "epic_k")
        share = self.relaxkv_context
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0.0 <= share <= 1.0):
            raise WorkbenchError(f"relaxkv_context must be a fraction in [0, 1] (or None: the budget's), got {share!r}")
        if self.pool not in POOLS:
            raise WorkbenchError(f"pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if self.chunk_scope not in CHUNK_SCOPES:
            raise WorkbenchError(f"chunk_scope must be one of {', '.join(CHUNK_SCOPES)}, got {self.chunk_scope!r}")
        try:
            tau = float(self.tau)
        except (TypeError, ValueError):
            raise WorkbenchError(f"tau must be a number in (0, 1], got {self.tau!r}") from None
        if not (math.isfinite(tau) and 0.0 < tau <= 1.0):
            raise WorkbenchError(f"tau must be in (0, 1], got {self.tau!r}")
        if self.rerotation not in REROTATIONS:
            raise WorkbenchError(f"rerotation must be one of {', '.join(REROTATIONS)}, got {self.rerotation!r}")
        if not isinstance(self.attribution, bool):
            raise WorkbenchError(f"attribution must be True or False, got {self.attribution!r}")
        return replace(self, selectors=tuple(s.label for s in specs), budgets=check_budgets(self.budgets), tau=tau)

    @property
    def signal_options(self) -> SignalOptions:
        return SignalOptions(check_layer=self.check_layer, draft_k=self.draft_k,
                             patch_max_tokens=self.patch_max_tokens, seed=self.seed, epic_k=self.epic_k,
                             relaxkv_context=self.relaxkv_context)

    @property
    def unit_options(self) -> UnitOptions:
        return UnitOptions(chunk_size=self.chunk_size, tau=self.tau, grow_max_span=self.grow_max_span,
                           chunk_scope=self.chunk_scope)

    def to_dict(self) -> dict:
        """JSON-safe: tuples become lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> DiagnoseConfig:
        """From `to_dict` output (unknown keys are refused, missing ones take their defaults)."""
        if not isinstance(data, dict):
            raise WorkbenchError(f"a diagnose config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WorkbenchError(f"unknown diagnose settings {unknown}; known: {sorted(known)}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**values)
