"""CPU threading that survives a shared machine: idle OpenMP threads sleep instead of spinning.

With torch's default (`OMP_WAIT_POLICY` unset), an OpenMP worker that finishes a parallel
region spins on its core for a while before it sleeps. Two workbench processes on a 2-core
machine (the app and a sweep, say) then spend their cores waiting on each other's spinning
threads, and small ops run many times slower (`docs/BENCHMARKS.md`, "Under load"). A passive
wait policy makes idle workers yield the core at once.

The policy is read by the OpenMP runtime when torch loads, so this module must run before
`import torch`; `workbench/__init__.py` imports it first. Overrides:

- `KVWB_THREADS=N`: torch's intra-op threads (default: torch's own choice, the core count), N
  from 1 to the cores this process may use (more only oversubscribes them, and a huge N makes
  the OpenMP runtime fail to map its thread stacks and crash torch's import). A bad value is
  never applied at import (importing the workbench must not fail); `requested_threads()`
  refuses it with one line, which `kvwb` calls before any command;
- `OMP_WAIT_POLICY` set by the user is left as it is; set but empty, it is removed, which
  leaves the OpenMP runtime's own default (spin a while, then sleep).
"""

from __future__ import annotations

import os

ENV_THREADS = "KVWB_THREADS"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def requested_threads() -> int | None:
    """`KVWB_THREADS` as a thread count (None when unset); a one-line error when it is not a
    whole number from 1 to the cores this process may use."""
    raw = os.environ.get(ENV_THREADS, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    cores = available_cores()
    if not 1 <= n <= cores:
        from workbench.errors import WorkbenchError
        raise WorkbenchError(f"{ENV_THREADS}={raw!r} must be a whole number of threads from 1 to {cores} (the cores "
                             f"this machine gives the process); unset it for torch's default")
    return n


def _valid_threads() -> int | None:
    """`KVWB_THREADS` when it is valid, else None: what import-time setup applies."""
    from workbench.errors import WorkbenchError
    try:
        return requested_threads()
    except WorkbenchError:
        return None


def configure_before_torch() -> None:
    """Set the OpenMP environment; effective only if torch has not been imported yet."""
    if os.environ.get("OMP_WAIT_POLICY") == "":
        del os.environ["OMP_WAIT_POLICY"]
    else:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    n = _valid_threads()
    if n is not None:
        os.environ["OMP_NUM_THREADS"] = str(n)


def apply_thread_count() -> None:
    """Apply a valid `KVWB_THREADS` to torch, also when torch was imported before the workbench."""
    n = _valid_threads()
    if n is not None:
        import torch
        torch.set_num_threads(n)


def describe() -> str:
    """One line for benchmark headers: threads and wait policy in effect."""
    import torch
    return (f"{torch.get_num_threads()} threads, OMP_WAIT_POLICY="
            f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}")


configure_before_torch()
