"""Run seeds: their range, checked before any work, and the one way a draw's seed derives from them.

A seed reaches torch generators, numpy generators and int64 parquet columns (the curve's
prompt seeds), directly or through `derive_seed`. `torch.Generator.manual_seed` overflows past 64 bits,
so an unchecked huge `--seed` failed only after the whole computation; every command that takes
a seed checks it here first (`SignalOptions` in a `DiagnoseConfig`, the curve, the fidelity probe, the pipeline).
"""

from __future__ import annotations

import hashlib

from workbench.errors import WorkbenchError

MAX_SEED = 2**32 - 1


def check_seed(value, name: str = "seed") -> int:
    """`value` when it is an integer in [0, MAX_SEED]; else a one-line error naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise WorkbenchError(f"{name} must be an integer from 0 to {MAX_SEED} (2**32 - 1), got {value!r}")
    return value


def derive_seed(seed: int, *parts) -> int:
    """The seed of one draw under run seed `seed`: SHA-256 of `seed:part:part...`, its first 8 bytes
    (little-endian) shifted to 63 bits, a valid torch seed and a parquet int64. The workbench's
    only derivation: a coin's draw (`seed, example id, draw`), a pipeline call's policy (`seed,
    example id, "agent", agent`), a fidelity probe's noise (`seed, example id, name, level`) and pool (`seed, example id,
    "pool"`) and a unit
    curve's random draw (`seed, "curve", prompt, draw`) each name their parts, so no two share a stream and
    a rerun draws the same."""
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


# Not derivations: a data set's examples come from its own data seed, hashed with the task's name
# in `workbench.tasks` (`random.Random("workbench-ruler:TASK:SEED:INDEX")`); they define the data,
# and changing them would change every example a recorded study ran on.
