"""One-line checks of a setting's value, run before any work (`DiagnoseConfig.checked` and the
option classes it holds)."""

from __future__ import annotations

from workbench.errors import WorkbenchError


def check_int(value, name: str, minimum: int = 1) -> int:
    """`value` when it is an integer >= `minimum` (a bool is not); else a one-line error naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkbenchError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
