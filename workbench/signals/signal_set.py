"""`SignalSet`: the signals of one Context, each computed once on first use, with its cost.

Selectors read records from here (``signals["saliency"]``), so one computation serves every
selector and budget: CADENCE-Grad and gated CADENCE share one backward; `bcr` in any unit
shares one draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.checks import check_int
from workbench.context import Context
from workbench.engine.hooks import Hooks, named_pass
from workbench.errors import WorkbenchError
from workbench.seeds import check_seed, derive_seed
from workbench.signals.deviation import DENSEDEV_NORMS
from workbench.signals.registry import Cost, get_signal, signals_of


@dataclass(frozen=True)
class SignalOptions:
    """The knobs of the built-in signals, and of the selectors that read them."""

    check_layer: int = 1  # CacheBlend's check layer
    draft_k: int = 2  # BCR's draft: query rows kept
    patch_max_tokens: int = 64  # attribution check: tokens patched (stratified sample)
    seed: int = 0  # the run's seed: the coin's draws and the attribution sample derive from it
    epic_k: int | None = None  # EPIC: rows per passage (None: the budget spread over the pool's passages)
    relaxkv_context: float | None = None  # RelaxKV: share of passage rows in the context (None: the budget's)
    densedev_norm: str = "none"  # DenseDev: "none" (the raw sum over layers) or "layer" (each layer over its row norm)

    def checked(self) -> SignalOptions:
        """These options when every knob is in range; a one-line error naming the first that is not."""
        check_seed(self.seed)
        check_int(self.check_layer, "check_layer", 0)
        check_int(self.draft_k, "draft_k")
        check_int(self.patch_max_tokens, "patch_max_tokens")
        if self.epic_k is not None:
            check_int(self.epic_k, "epic_k")
        share = self.relaxkv_context
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0.0 <= share <= 1.0):
            raise WorkbenchError(f"relaxkv_context must be a fraction in [0, 1] (or None: the budget's), got {share!r}")
        if self.densedev_norm not in DENSEDEV_NORMS:
            raise WorkbenchError(f"densedev_norm must be one of {', '.join(DENSEDEV_NORMS)}, got {self.densedev_norm!r}")
        return self


class SignalSet:
    """Lazily computed signals of `ctx`; `costs[name]` records what each record took. A signal that
    needs the dense reference refuses on a context without one (`Context.reference`). `hooks`
    ({name: fn} or [(name or filter, fn)], `engine.hooks`; checked here) run on every model pass a
    record makes: the suffix pass and its draft, the greedy answer, the saliency's forward and
    backward, the check layer's partial recompute and the patching passes."""

    def __init__(self, ctx: Context, options: SignalOptions = SignalOptions(), hooks=None):
        self.ctx = ctx
        self.options = options
        self.hooks = Hooks.of(hooks, ctx.model.adapter)
        self.costs: dict[str, Cost] = {}
        self._values: dict[str, object] = {}
        self._nested_seconds = 0.0
        self._computing: list[str] = []  # the records being computed, innermost last
        self._reads: dict[str, set[str]] = {}  # record -> the records it read

    def __getitem__(self, name: str):
        """The record `name`, computed on first use."""
        if self._computing:
            self._reads[self._computing[-1]].add(name)
        if name not in self._values:
            info = get_signal(name, "record")
            if info.needs_dense:
                self.ctx.reference(f"signal {name!r}")  # refuses on a context without one
            start, outer = time.perf_counter(), self._nested_seconds
            self._nested_seconds = 0.0  # what records computed inside this one take
            self._computing.append(name)
            self._reads.setdefault(name, set())
            try:
                with named_pass(self.hooks, name):  # HookPoint.pass_name
                    value = info.compute(self)
                cost = info.cost(self, value) if info.cost else Cost()
            finally:
                self._computing.pop()
                elapsed = time.perf_counter() - start
                own, self._nested_seconds = elapsed - self._nested_seconds, outer + elapsed
            self._values[name] = value
            self.costs[name] = Cost(**{**cost.to_dict(), "needs_dense": cost.needs_dense or info.needs_dense,
                                       "seconds": own})  # a record read inside it counts its own time
        return self._values[name]

    def cost_of(self, names) -> Cost:
        """What the records `names` cost with every record they read, each counted once."""
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += self._reads.get(name, ())
        total = Cost()
        for name in sorted(seen):
            total = total + self.costs.get(name, Cost())
        return total

    def __contains__(self, name: str) -> bool:
        return name in self._values

    @property
    def computed(self) -> tuple[str, ...]:
        """Names of the records computed so far."""
        return tuple(self._values)

    @property
    def n_layers(self) -> int:
        return self.ctx.model.adapter.n_layers

    def coin_seed(self, draw: int) -> int:
        """The seed of a coin's draw on this example: derived from (run seed, example id, draw), so
        every example and draw gets its own pattern and a rerun gets the same one."""
        return derive_seed(self.options.seed, self.ctx.example.id, draw)

    def token(self, name: str) -> torch.Tensor:
        """The token signal `name` ([n_reused]), computing the records it reads if needed."""
        info = get_signal(name, "token")
        if info.needs_dense:
            self.ctx.reference(f"signal {name!r}")  # refuses on a context without one
        return info.compute(self)

    def values(self, per: str) -> dict[str, torch.Tensor]:
        """Every registered token (`[n_reused]`) or layer (`[layer, n_reused]`) signal whose records
        were computed, by name (those that read dense only where the context has it); nothing is
        computed here."""
        if per not in ("token", "layer"):
            raise WorkbenchError(f"per must be 'token' or 'layer', got {per!r}")
        out = {}
        for info in signals_of(per):
            if all(r in self._values for r in info.reads) and (self.ctx.dense is not None or not info.needs_dense):
                out[info.name] = info.compute(self)
        return out
