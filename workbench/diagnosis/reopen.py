"""A diagnosed example reopened on the model, for views that run it again (attention by head, the
logit lens): its context rebuilt, and a repaired cell's rows as the diagnosis chose them.

    ctx = reopen_context(model, d)                   # refuses a layout other than the record's
    rows, context = cell_rows(ctx, d, "bcr:grow", 0.2)
"""

from __future__ import annotations

import torch

from workbench.context import Context, build_context
from workbench.diagnosis.record import Diagnosis
from workbench.diagnosis.run import _selections
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel
from workbench.selectors import parse_selectors
from workbench.signals import SignalSet


def reopen_context(model: LoadedModel, d: Diagnosis) -> Context:
    """`d`'s example laid out, spliced and prefilled again on `model` (as `d` was: its re-rotation);
    a one-line refusal when it lays out to another length than the record's (another model or
    tokenizer)."""
    ctx = build_context(model, d.example, rerotation=d.config.rerotation)
    if ctx.layout.n_tokens != d.context.n_tokens:
        raise WorkbenchError(f"example {d.example_id} lays out to {ctx.layout.n_tokens} tokens on "
                             f"{model.describe().get('name', 'this model')}, the diagnosis has {d.context.n_tokens}: "
                             f"open it with the model it was run with ({d.model.get('name', '?')})")
    return ctx


def cell_rows(ctx: Context, d: Diagnosis, selector: str, budget: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows ([row] positions) `selector` recomputes at `budget` in `d` (a drawn one's first
    draw) and its context mask (bool [suffix_start]; None: every key). Read from `d`'s selections
    where they are kept and the selector restricts no context; chosen again otherwise (a kept
    record keeps none), from the signals of `ctx` under `d`'s config; refused for a diagnosis run
    under hooks (its signals were computed under them, and a record keeps no hook functions)."""
    (spec,) = parse_selectors([selector])
    table = d.tables.get("selections")
    if table is not None and not table.empty and spec.info.restrict is None:
        return torch.as_tensor(d.picks(selector, budget), dtype=torch.long), None
    if d.hooked:
        raise WorkbenchError(f"example {d.example_id} was diagnosed under hooks ({', '.join(sorted(d.hooks))[:80]}): "
                             f"{selector}'s rows at {budget:g} are not kept and would be chosen again from "
                             "unhooked signals; diagnose it again with the same hooks to read them")
    config = d.config.with_(budgets=(float(budget),), coin_draws=1)
    pool = ctx.layout.pool_positions(config.pool)
    (chosen,) = _selections(ctx.model, [spec], SignalSet(ctx, config.signal_options), config, pool,
                            lambda *_: None, {})
    return chosen.positions, chosen.context
