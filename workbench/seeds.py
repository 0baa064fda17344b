"""The range of a run seed, checked before any work: an integer from 0 to 2**32 - 1.

A seed reaches torch generators, numpy's SeedSequence and int64 parquet columns (the curve's
prompt seeds), directly or through a hash. `torch.Generator.manual_seed` overflows past 64 bits,
so an unchecked huge `--seed` failed only after the whole computation; every command that takes
a seed checks it here first (`SignalOptions` in a `DiagnoseConfig`, the curve, the fidelity probe, the pipeline).
"""

from __future__ import annotations

from workbench.errors import WorkbenchError

MAX_SEED = 2**32 - 1


def check_seed(value, name: str = "seed") -> int:
    """`value` when it is an integer in [0, MAX_SEED]; else a one-line error naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise WorkbenchError(f"{name} must be an integer from 0 to {MAX_SEED} (2**32 - 1), got {value!r}")
    return value
