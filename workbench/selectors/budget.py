"""What a budget buys: the rows a fraction of the pool buys (`budget_rows`), and the query-key
pairs a repair of chosen rows scores (`attention_pairs`, what a context mask saves)."""

from __future__ import annotations

import math

import torch

from workbench.engine.masks import check_context, context_allows
from workbench.errors import WorkbenchError
from workbench.family import visible_keys
from workbench.models import LoadedModel

__all__ = ["attention_pairs", "budget_rows"]


def budget_rows(budget: float, n_reused: int) -> int:
    """Rows a budget b buys: ceil(b * n_reused); b=0 reuses all, b=1 recomputes every reused row."""
    if not isinstance(budget, (int, float)) or not 0.0 <= float(budget) <= 1.0:
        raise WorkbenchError(f"budget must be a fraction in [0, 1], got {budget!r}")
    return min(n_reused, math.ceil(round(float(budget) * n_reused, 9)))


def attention_pairs(model: LoadedModel, positions: torch.Tensor, n_keys: int,
                    context: torch.Tensor | None = None) -> int:
    """Query-key pairs, summed over layers, that recomputing rows `positions` scores over keys
    [0, n_keys): each layer's causal (and windowed) mask, narrowed by `context` when given."""
    pos = torch.as_tensor(positions).long().cpu()
    key_pos = torch.arange(n_keys)
    allowed = context_allows(check_context(context), pos, key_pos) if context is not None else True
    windows = model.adapter.windows
    return sum(windows.count(w) * int((visible_keys(pos, key_pos, w) & allowed).sum()) for w in dict.fromkeys(windows))
