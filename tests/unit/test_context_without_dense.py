"""A Context without a dense reference (a served cache at serve time): what reads dense refuses in
one line naming itself; what reads only the cache (draft attention, CADENCE-Grad's gradients and
the rest) works as with one."""

from dataclasses import replace

import pytest
import torch

from conftest import small_example
from workbench.context import build_context
from workbench.diagnosis import diagnose
from workbench.diagnosis.layer_effects import layer_effects
from workbench.errors import WorkbenchError
from workbench.exactness import check_exactness
from workbench.experiments.unit_curve import attention_probe
from workbench.interop import suffix_cache
from workbench.signals import SignalSet, decision_saliency, deviation_frame, patch_effects
from workbench.signals.registry import signals_of

NEEDS_DENSE = "needs a dense reference; this context has none"


@pytest.fixture(scope="module")
def contexts(tiny_llama):
    """The same example with its dense reference and without it."""
    ctx = build_context(tiny_llama, small_example())
    return ctx, replace(ctx, dense=None)


@pytest.mark.parametrize("per", ["record", "token"])
def test_every_signal_that_reads_dense_refuses_by_name(contexts, per):
    _, bare = contexts
    needing = {info.name for info in signals_of(per) if info.needs_dense}
    assert needing >= ({"deviation", "patch", "attribution"} if per == "record" else {"densedev", "cadence", "first_order"})
    signals = SignalSet(bare)
    for name in needing:
        with pytest.raises(WorkbenchError, match=f"^signal '{name}' {NEEDS_DENSE}"):
            signals[name] if per == "record" else signals.token(name)
    assert signals.computed == ()  # refused before any work


def test_the_signals_that_read_only_the_cache_are_the_same_without_dense(contexts):
    ctx, bare = contexts
    with_dense, without = SignalSet(ctx), SignalSet(bare)
    free = [info.name for info in signals_of("token") if not info.needs_dense]
    assert {"draft_attention", "cacheblend", "cadence_grad"} <= set(free)
    for name in free:
        assert torch.equal(without.token(name), with_dense.token(name)), name
    layers = without.values("layer")  # what was computed above, those that read dense left out
    assert torch.equal(layers["grad_sq_k"], with_dense.values("layer")["grad_sq_k"])
    assert "gated_k" not in layers and "gated_k" in with_dense.values("layer")
    assert "cadence" not in without.values("token") and "cadence" in with_dense.values("token")


def test_cadence_grad_needs_no_dense_reference_and_the_gated_score_says_it_does(contexts):
    ctx, bare = contexts
    with_dense, without = decision_saliency(ctx), decision_saliency(bare)
    assert without.answer_ids == with_dense.answer_ids and without.gated_k is None
    assert torch.equal(without.cadence_grad, with_dense.cadence_grad)
    with pytest.raises(WorkbenchError, match="^the gated CADENCE score needs a dense reference"):
        without.cadence
    for context, read_dense in ((bare, False), (ctx, True)):  # the record's cost says whether it read dense
        signals = SignalSet(context)
        signals["saliency"]
        assert signals.costs["saliency"].needs_dense is read_dense


@pytest.mark.parametrize("call, name", [
    (lambda ctx: ctx.layer0_error(), "layer0_error"),
    (lambda ctx: ctx.splice_tolerance(), "splice_tolerance"),
    (lambda ctx: ctx.check_splice(), "check_splice"),
    (lambda ctx: deviation_frame(ctx), "deviation_frame"),
    (lambda ctx: patch_effects(ctx, ctx.reused_positions[:2], [1]), "patch_effects"),
    (lambda ctx: layer_effects(ctx, ctx.reused_positions[:2]), "layer_effects"),
    (lambda ctx: check_exactness(ctx), "check_exactness"),
    (lambda ctx: attention_probe(ctx), "attention_probe"),
    (lambda ctx: suffix_cache(ctx, "dense"), 'the "dense" cache'),
])
def test_what_compares_with_dense_refuses_in_one_line(contexts, call, name):
    _, bare = contexts
    with pytest.raises(WorkbenchError, match=f"^{name} {NEEDS_DENSE}") as err:
        call(bare)
    assert "\n" not in str(err.value)


def test_diagnose_refuses_a_context_without_dense_before_any_model_work(tiny_llama, contexts, monkeypatch):
    _, bare = contexts
    monkeypatch.setattr(SignalSet, "__getitem__", lambda *a: pytest.fail("a signal was computed"))
    with pytest.raises(WorkbenchError, match="diagnose needs a dense reference"):
        diagnose(tiny_llama, small_example(), ctx=bare, progress=False, budgets=(0.2,), selectors="bcr")
