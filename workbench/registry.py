"""One registry for every kind of thing the workbench lets a user add: selectors, signals, reuse
methods and data sets.

A `Registry` is a dict from a key (a name, or a ``(kind, name)`` pair for signals) to a typed
record, kept in registration order, with the two things every registry needs: a clear error for
an unknown key that lists the known ones, and a rule for a key registered twice (replace it, as
a notebook re-running its cell expects, or refuse it). The decorators that fill each one
(`register_selector`, `register_signal`, `register_method`, `register_dataset`) check their own
fields and call `add`.

Plugins fill them from outside: `load_plugins()` imports every module or .py file named in
$KVWB_PLUGINS, once per process; the `kvwb` CLI and the app both call it. A plugin may add names
but not take a built-in's (the selector, signal and data set decorators refuse that, naming the
plugin's module; a reuse method's registry refuses any second registration).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Generic, TypeVar

from workbench.errors import WorkbenchError

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """``{key: record}`` in registration order; `what` names the kind in messages ("selector")."""

    def __init__(self, what: str, *, replace: bool = True, items=()):
        super().__init__(items)
        self.what = what
        self.replace = replace  # False: a second registration of a key is refused

    def add(self, key: Hashable, record: T) -> T:
        """Register `record` under `key` (see `replace`); returns the record."""
        if not self.replace and key in self:
            raise WorkbenchError(f"{self.what} {_shown(key)!r} is already registered")
        self[key] = record
        return record

    def get_or_raise(self, key: Hashable) -> T:
        """The record under `key`, or an error naming the known keys."""
        if key not in self:
            raise WorkbenchError(f"unknown {self.what} {_shown(key)!r}; valid: {', '.join(map(_shown, self))}")
        return self[key]

    def names(self) -> tuple:
        """The keys in registration order."""
        return tuple(self)

    def copy(self) -> Registry[T]:
        """A shallow copy that is still a registry (a test registers into it and drops it)."""
        return Registry(self.what, replace=self.replace, items=self.items())


def qualified_name(fn) -> str:
    """`module.qualname` of a function (its repr when it has no qualified name)."""
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        return repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else name


PLUGINS_ENV = "KVWB_PLUGINS"  # comma-separated modules (`mypkg.signals`) or files (`~/kv/toy.py`)


def import_plugin(spec: str) -> None:
    """Import a module by name, or a .py file by path (once per process; a file that fails to
    import is not kept, so a fixed file imports on the next call)."""
    path = Path(spec).expanduser()
    if not (spec.endswith(".py") or os.sep in spec or path.is_file()):
        importlib.import_module(spec)
        return
    path = path.resolve()
    name = f"kvwb_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def load_plugins(specs: str | None = None) -> list[str]:
    """Import every plugin `specs` names (default: $KVWB_PLUGINS); the failures, one line each."""
    text = os.environ.get(PLUGINS_ENV, "") if specs is None else specs
    problems = []
    for spec in (s.strip() for s in text.split(",")):
        if not spec:
            continue
        try:
            import_plugin(spec)
        except Exception as err:  # noqa: BLE001 - any error of a plugin's own code is its failure to load
            detail = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
            problems.append(f"plugin {spec!r} did not load ({type(err).__name__}: {detail})")
    return problems


def _shown(key: Hashable) -> str:
    return ":".join(key) if isinstance(key, tuple) else str(key)
