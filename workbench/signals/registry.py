"""The signal registry: name -> how to compute it, what it cost, how to label and plot it.

A signal is one function of a `SignalSet`, registered with one decorator (in the manner of
Inseq's step functions). It is one of three kinds (`per`):

- ``"record"``: a model computation (a prefill, a backward, a draft) whose result other
  signals and the selectors read, e.g. ``signals["saliency"]``. It declares its `cost`;
- ``"token"``: one score per reused row, ``[n_reused]``, read from records (`reads`);
- ``"layer"``: one score per layer and reused row, ``[layer, n_reused]``, read from records.

Token and layer signals are free: their cost is the records they read. Every token and layer
signal whose records were computed in a Diagnosis lands in its `token_signals` /
`layer_signals` tables, and the app, the report and the notebooks take their labels and log
scales from here. A new signal in one small file:

    @register_signal("late_grad_v", per="token", reads=("saliency",), log=True,
                     label="||dL/dV||^2 summed over the upper half of the layers")
    def late_grad_v(signals):
        grad = signals["saliency"].grad_sq_v            # [layer, n_reused]
        return grad[grad.shape[0] // 2:].sum(0)          # [n_reused]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from workbench.errors import WorkbenchError
from workbench.registry import Registry, qualified_name

KINDS = ("record", "token", "layer")


@dataclass(frozen=True)
class Cost:
    """What producing a record cost. `layer_tokens` counts token rows x layers computed."""

    forward_passes: int = 0
    backward_passes: int = 0
    decode_steps: int = 0
    layer_tokens: int = 0
    needs_dense: bool = False
    seconds: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.forward_passes + other.forward_passes, self.backward_passes + other.backward_passes,
                    self.decode_steps + other.decode_steps, self.layer_tokens + other.layer_tokens,
                    self.needs_dense or other.needs_dense, self.seconds + other.seconds)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SignalInfo:
    """A registered signal."""

    name: str
    per: str  # "record" | "token" | "layer"
    compute: Callable  # fn(signals) -> value
    label: str
    reads: tuple[str, ...] = ()  # records a token/layer signal reads
    cost: Callable | None = None  # records: fn(signals, value) -> Cost
    log: bool = False  # plotted on a log10 scale
    needs_dense: bool = False  # reads the dense reference (a full prefill a real receiver skips)
    description: str = ""
    code: str = ""  # the code that defined it: its function's module and qualified name (a run records it)

    @property
    def builtin(self) -> bool:
        """Defined by the workbench itself (a plugin may not take its name)."""
        return self.code.startswith("workbench.")


_REGISTRY: Registry[SignalInfo] = Registry("signal")  # keyed (per, name)


def register_signal(name: str, *, per: str, label: str = "", reads: tuple[str, ...] = (), cost=None,
                    log: bool = False, needs_dense: bool = False, description: str = ""):
    """Decorator: register `fn(signals) -> value` as signal `name` of kind `per` (see module doc)."""
    if not name or ":" in name:
        raise WorkbenchError(f"signal names must be non-empty and contain no ':', got {name!r}")
    if per not in KINDS:
        raise WorkbenchError(f"signal {name!r}: per must be one of {KINDS}, got {per!r}")
    if per == "record" and reads:
        raise WorkbenchError(f"signal {name!r}: a record computes; only token and layer signals read records")
    if per != "record" and cost is not None:
        raise WorkbenchError(f"signal {name!r}: token and layer signals are free; their cost is the records "
                             f"they read")
    unknown = [r for r in reads if ("record", r) not in _REGISTRY]
    if unknown:
        raise WorkbenchError(f"signal {name!r} reads unknown records {unknown}; known: {record_names()}")

    def decorate(fn):
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        needs = needs_dense or any(_REGISTRY["record", r].needs_dense for r in reads)
        held = _REGISTRY.get((per, name))
        module = getattr(fn, "__module__", None)
        if held is not None and held.builtin and module != getattr(held.compute, "__module__", None):
            raise WorkbenchError(f"plugin module {module!r} may not register the {per} signal {name!r}: it is built "
                                 f"in ({held.code}); register it under a name of its own")
        _REGISTRY.add((per, name), SignalInfo(name, per, fn, label or name, tuple(reads), cost, log, needs, doc,
                                              qualified_name(fn)))
        return fn
    return decorate


def get_signal(name: str, per: str = "record") -> SignalInfo:
    if (per, name) not in _REGISTRY:
        known = ", ".join(n for p, n in _REGISTRY if p == per)
        raise WorkbenchError(f"unknown {per} signal {name!r}; known: {known}")
    return _REGISTRY[per, name]


def signals_of(per: str) -> list[SignalInfo]:
    """The registered signals of one kind, in registration order."""
    return [info for (p, _), info in _REGISTRY.items() if p == per]


def record_names() -> list[str]:
    return [info.name for info in signals_of("record")]


def label(name: str, per: str = "token") -> str:
    """The display label of a token or layer signal (the name itself when unregistered)."""
    info = _REGISTRY.get((per, name))
    return info.label if info else name


def is_log(name: str, per: str = "layer") -> bool:
    """Whether a token or layer signal plots on a log10 scale (False when unregistered)."""
    info = _REGISTRY.get((per, name))
    return bool(info and info.log)
