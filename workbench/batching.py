"""The one batcher: items packed into groups under a budget (memory, rows, a batch size).

Below every module that batches (the KV prefill, the engine's cells, answers and decoder), so
that each of them packs the same way; it imports nothing of the workbench.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

DEFAULT_MAX_BYTES = 512 << 20  # what one group of a batched pass may hold (its caches, masks, scores), fp32


def pack(n: int, fits: Callable[[list[int]], bool], key: Callable[[int], object] | None = None) -> list[list[int]]:
    """Indices 0..n-1, in order of `key` (as given when None), packed greedily: each joins the last
    group when `fits(group + [i])`, else opens a new one (a lone item always forms a group)."""
    order = sorted(range(n), key=key) if key is not None else range(n)
    groups: list[list[int]] = []
    for i in order:
        if groups and fits(groups[-1] + [i]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def pack_sizes(sizes: Sequence, fits: Callable[[list[int]], bool]) -> list[list[int]]:
    """`pack` in order of size, smallest first (each group's last member is its largest)."""
    return pack(len(sizes), fits, key=lambda i: sizes[i])
