"""The pipeline's repairs of a served cache, on a tiny model of every family.

`bcr` and `bcr-coin` choose the rows and build the caches the hand-made path before
`selectors.choose` did (a draft over a stand-in dense, `select_rows` in 64-row chunks at ρ = 0.2),
bit for bit. `cadence-grad` repairs the ρ = 0.2 slot rows with the largest ‖∂L/∂KV‖² of the call's
own greedy answer over the served cache, computed here from `cache_gradients` directly, with no
dense reference anywhere; its coin spends as many single rows by the call's seed."""

import pytest
import torch

from conftest import FAMILIES, tiny_model
from workbench.context import Context
from workbench.pipeline import AnchorPool, PipelineSpec, agent_layout, kvcomm_call
from workbench.engine.decode import stop_token_ids
from workbench.pipeline.bcr import DRAFT, DRAWN, bcr, bcr_coin
from workbench.pipeline.cadence_grad import cadence_grad, cadence_grad_coin
from workbench.pipeline.calls import agent_example
from workbench.pipeline.methods import CallContext, MethodState, kvcomm_result
from workbench.pipeline.request import task_text
from workbench.pipeline.served_repair import UNITS, chosen_positions
from workbench.repair import repair
from workbench.selectors.budget import budget_rows
from workbench.selectors import choose
from workbench.selectors.units import random_scores, select_rows
from workbench.signals.attention import draft_attention
from workbench.signals.saliency import cache_gradients
from workbench.tasks import synthetic_examples

TASK_CUT = 400  # characters (= tokens, byte tokenizer): over 320 slot rows, so ρM >= B and chunks are chosen


def _prompt(spec, seed, cut=None):
    task = task_text(synthetic_examples(1, seed=seed)[0])
    outputs = {0: f"Mira Tessk coaches him (source {seed}).", 1: f"She was born in Tressamor (source {seed})."}
    task = task[:cut] if cut else task
    return task, outputs


def _old_scores(call: CallContext, served, drawn: bool) -> torch.Tensor:
    """The scores as `pipeline/bcr.py` computed them before the `bcr` selector: [n] over every slot row."""
    pool = call.layout.reused_positions  # [n]
    if drawn:
        return random_scores(len(pool), call.seed)
    span = served.span(call.layout)
    ctx = Context(call.model, call.example, call.layout, spliced=span, dense=span)  # the former stand-in dense
    return draft_attention(ctx, k=2).scores(pool)


def _old_positions(pool: torch.Tensor, scores: torch.Tensor, rho: float = 0.2) -> torch.Tensor:
    """The rows as `pipeline/bcr.py` chose them before `selectors.choose`: [k] absolute positions."""
    return pool[select_rows(scores, budget_rows(rho, len(pool)), "chunk", chunk_size=64).rows]


@pytest.fixture(scope="module", params=FAMILIES)
def reused_call(request):
    """A model, and a function giving a fresh reused call of agent 2 (its own copy of the anchor pool)."""
    model, spec = tiny_model(request.param), PipelineSpec.fully_connected(3)
    pool = AnchorPool(gamma=1.0)
    for seed in range(3):
        task, outputs = _prompt(spec, seed)
        _, slots = agent_example(spec, 2, task, outputs)
        kvcomm_call(model, pool, 2, agent_layout(model.tokenizer, spec, 2, task, outputs)[0], slots)
    task, outputs = _prompt(spec, 7, cut=TASK_CUT)
    layout, slots = agent_layout(model.tokenizer, spec, 2, task, outputs)
    example, _ = agent_example(spec, 2, task, outputs)

    def fresh(seed: int = 5) -> CallContext:
        state = MethodState(AnchorPool(gamma=1.0))
        state.pool.slots = {k: dict(v) for k, v in pool.slots.items()}
        return CallContext(model, spec, 2, layout, slots, state, seed=seed, example=example)
    return model, fresh


@pytest.mark.parametrize("drawn", [False, True], ids=["bcr", "bcr-coin"])
def test_bcr_and_its_coin_choose_and_repair_exactly_as_before(reused_call, drawn):
    model, fresh = reused_call
    method = bcr_coin if drawn else bcr
    for seed in (5, 11) if drawn else (5,):
        served = kvcomm_result(fresh(seed))
        assert served.reused
        pool = fresh(seed).layout.reused_positions  # [n]
        old_scores = _old_scores(fresh(seed), served, drawn)
        scorer = DRAWN if drawn else DRAFT
        spec, scores = scorer(fresh(seed), served, len(pool))
        assert torch.equal(scores, old_scores)
        old = _old_positions(pool, old_scores)
        assert len(old) >= 64  # ρM >= B here: Algorithm 1 repairs, so the comparison is not of two empty sets
        assert torch.equal(chosen_positions(fresh(seed), served, scorer), old)
        for rho in (0.13, 0.3, 0.5, 0.8):  # the same choice at budgets that take other numbers of chunks
            assert torch.equal(pool[choose(spec, scores, rho, pool, UNITS)[0]], _old_positions(pool, old_scores, rho))
        want = repair(model, served.cache, fresh(seed).layout.ids, old)  # the former method's cache
        got = method(fresh(seed))
        assert got.n_repaired == len(old)
        assert torch.equal(got.cache.keys, want.keys) and torch.equal(got.cache.values, want.values)


def _gradient_rows(call: CallContext, served) -> torch.Tensor:
    """CADENCE-Grad's ρ = 0.2 slot rows, by hand: the served span's gradients of the greedy answer
    decoded over it, ||dL/dK||^2 + ||dL/dV||^2 summed over layers, heads and dims: [k] positions."""
    span = served.span(call.layout)
    ctx = Context(call.model, call.example, call.layout, spliced=span)  # no dense reference
    greedy = ctx.generate(span)
    grads = cache_gradients(call.model, span, ctx.suffix_ids, greedy.token_ids,
                            stop_token_ids(call.model) if greedy.stopped else None)
    pool = call.layout.pool_positions("all")  # [n]
    scores = sum(g[:, :, pool].float().square().sum((0, 1, 3)) for g in (grads.keys, grads.values))  # [n]
    return pool[scores.topk(budget_rows(0.2, len(pool))).indices].sort().values


def test_cadence_grad_repairs_the_rows_its_gradients_rank_first_with_no_dense_reference(reused_call):
    model, fresh = reused_call
    served = kvcomm_result(fresh(5))
    assert served.reused
    want = _gradient_rows(fresh(5), served)  # [k]
    got = cadence_grad(fresh(5))
    assert got.n_repaired == len(want) > 0
    expected = repair(model, served.cache, fresh(5).layout.ids, want)
    assert torch.equal(got.cache.keys, expected.keys) and torch.equal(got.cache.values, expected.values)


def test_cadence_grads_coin_spends_as_many_single_rows_by_the_calls_seed(reused_call):
    model, fresh = reused_call
    for seed in (5, 11):
        served = kvcomm_result(fresh(seed))
        pool = fresh(seed).layout.pool_positions("all")  # [n]
        k = budget_rows(0.2, len(pool))
        want = pool[random_scores(len(pool), seed).topk(k).indices].sort().values
        got = cadence_grad_coin(fresh(seed))
        assert got.n_repaired == k
        expected = repair(model, served.cache, fresh(seed).layout.ids, want)
        assert torch.equal(got.cache.keys, expected.keys) and torch.equal(got.cache.values, expected.values)
