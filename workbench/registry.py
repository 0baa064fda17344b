"""One registry for every kind of thing the workbench lets a user add: selectors, signals, reuse
methods and data sets.

A `Registry` is a dict from a key (a name, or a ``(kind, name)`` pair for signals) to a typed
record, kept in registration order, with the two things every registry needs: a clear error for
an unknown key that lists the known ones, and a rule for a key registered twice (replace it, as
a notebook re-running its cell expects, or refuse it). The decorators that fill each one
(`register_selector`, `register_signal`, `register_method`, `register_dataset`) check their own
fields and call `add`.
"""

from __future__ import annotations

from collections.abc import Hashable
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


def _shown(key: Hashable) -> str:
    return ":".join(key) if isinstance(key, tuple) else str(key)
