"""KV deviation, decision saliency (attribution patching) and actual patching on tiny models."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.kv import KVCache
from workbench.signals import (
    attribution_check, cache_gradients, decision_saliency, deviation_frame, kv_deviation,
    patch_effects, residual_deviation, sample_positions,
)
from workbench.signals.saliency import _params_frozen


@pytest.fixture(scope="module")
def ctx(tiny_llama) -> wb.Context:
    return wb.build_context(tiny_llama, small_example())


@pytest.fixture(scope="module", params=("llama", "gemma3_text"))
def ctx64(request) -> wb.Context:
    """fp64 tiny Llama and Gemma 3 (sliding-window layers), for derivative checks (teacher_forced
    still scores in fp32)."""
    return wb.build_context(tiny_model(request.param, dtype=torch.float64), small_example())


@pytest.fixture(scope="module")
def answer(ctx) -> tuple[int, ...]:
    return ctx.generate(ctx.spliced, 12).token_ids


def loss(ctx, cache, answer_ids) -> float:
    return -ctx.teacher_forced(cache, answer_ids).logprob


def snapshot(ctx) -> list[torch.Tensor]:
    return [t.clone() for t in (ctx.spliced.keys, ctx.spliced.values, ctx.dense.keys, ctx.dense.values)]


def assert_unchanged(ctx, before) -> None:
    after = (ctx.spliced.keys, ctx.spliced.values, ctx.dense.keys, ctx.dense.values)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


# --- deviation ---------------------------------------------------------------------------

def test_splice_deviation_vanishes_at_layer0_and_grows_above(ctx):
    dev = kv_deviation(ctx.spliced, ctx.dense, ctx.reused_positions)
    assert dev["k", "l2"].shape == (ctx.spliced.n_layers, ctx.n_reused)
    assert dev["v", "l2"][0].max() == 0 and dev["k", "rel_l2"][0].max() < 1e-5
    assert dev["k", "cosine"][0].min() > 1 - 1e-6
    assert dev["v", "rel_l2"][1:].max() > 1e-3


def test_identical_caches_have_zero_distance_and_unit_cosine(ctx):
    dev = kv_deviation(ctx.dense, ctx.dense.clone(), ctx.reused_positions)
    for kind in ("k", "v"):
        assert dev[kind, "l2"].abs().max() == 0 and dev[kind, "rel_l2"].abs().max() == 0
        assert torch.allclose(dev[kind, "cosine"], torch.ones_like(dev[kind, "cosine"]), atol=1e-6)


def test_rel_l2_and_residual_match_a_hand_computation():
    torch.manual_seed(0)
    a, b = (KVCache(torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)) for _ in range(2))
    pos = [4, 1]
    dev = kv_deviation(a, b, pos)
    for l in range(2):
        for i, p in enumerate(pos):
            diff = (a.values[l, :, p] - b.values[l, :, p]).norm()
            assert dev["v", "rel_l2"][l, i] == pytest.approx(float(diff / b.values[l, :, p].norm()), rel=1e-5)
            x, y = a.keys[l, :, p].flatten(), b.keys[l, :, p].flatten()
            assert dev["k", "cosine"][l, i] == pytest.approx(float(x @ y / (x.norm() * y.norm())), rel=1e-5)
    res = residual_deviation(a, b, pos)
    expect = (a.keys[:, :, pos] - b.keys[:, :, pos]).flatten(1).norm(dim=1) / b.keys[:, :, pos].flatten(1).norm(dim=1)
    assert torch.allclose(res["k"], expect, rtol=1e-5)


def test_deviation_frame_is_tidy(ctx):
    frame = deviation_frame(ctx)
    assert list(frame.columns) == ["example_id", "layer", "position", "segment", "token", "kind", "metric", "value"]
    assert len(frame) == ctx.spliced.n_layers * ctx.n_reused * 2 * 3
    assert not frame.duplicated(["layer", "position", "kind", "metric"]).any()
    assert set(frame["segment"]) == {"passage 1", "passage 2", "passage 3"}
    assert (frame["example_id"] == ctx.example.id).all()


def test_deviation_refuses_positions_outside_the_cache(ctx):
    with pytest.raises(wb.WorkbenchError, match="out of range"):
        kv_deviation(ctx.spliced, ctx.dense, [ctx.spliced.n_positions])


# --- saliency ----------------------------------------------------------------------------

def test_gradients_match_finite_differences(ctx64):
    ans = ctx64.generate(ctx64.spliced, 12).token_ids
    grads = cache_gradients(ctx64.model, ctx64.spliced, ctx64.suffix_ids, ans)
    assert grads.loss == pytest.approx(loss(ctx64, ctx64.spliced, ans), rel=1e-6)
    p, eps = ctx64.layout.passages[2].start + 5, 3e-2
    for kind in ("keys", "values"):
        g = getattr(grads, kind)[1, :, p]  # [kv_head, d_head]
        h, d = divmod(int(g.abs().argmax()), g.shape[1])

        def shifted(step):
            c = ctx64.spliced.clone()
            getattr(c, kind)[1, h, p, d] += step
            return c
        fd = (loss(ctx64, shifted(eps), ans) - loss(ctx64, shifted(-eps), ans)) / (2 * eps)
        assert fd == pytest.approx(float(g[h, d]), rel=2e-2, abs=2e-4), kind


def test_a_sliding_layer_has_no_gradient_outside_its_window():
    """Gemma 3's local layers: no suffix query sees a cache row older than the window, so those
    rows' K/V get exactly zero gradient there. Rows inside it do below the global layer (layer 1);
    above it only the answer's own queries reach the loss, and they see only suffix rows."""
    ctx = wb.build_context(tiny_model("gemma3_text"), small_example())
    assert ctx.model.adapter.windows == (16, None, 16)
    grads = cache_gradients(ctx.model, ctx.spliced, ctx.suffix_ids, ctx.generate(ctx.spliced, 6).token_ids)
    older = ctx.layout.suffix_start - 16 + 1  # the first suffix query sees rows from here on
    assert torch.count_nonzero(grads.keys[0, :, :older]) == 0
    assert torch.count_nonzero(grads.values[0, :, :older]) == 0
    assert torch.count_nonzero(grads.keys[0, :, older:]) > 0
    assert torch.count_nonzero(grads.keys[1, :, :older]) > 0  # the global layer reads every row
    assert torch.count_nonzero(grads.keys[2]) == 0


def test_saliency_reduces_the_gradients_per_layer_and_token(ctx64):
    sal = decision_saliency(ctx64)
    grads = cache_gradients(ctx64.model, ctx64.spliced, ctx64.suffix_ids, sal.answer_ids)
    pos = ctx64.reused_positions
    g = grads.values[:, :, pos]  # [layer, kv_head, n, d_head]
    delta = ctx64.dense.values[:, :, pos] - ctx64.spliced.values[:, :, pos]
    assert torch.allclose(sal.grad_sq_v, g.square().sum((1, 3)).float(), rtol=1e-5)
    gated = (g * delta).sum((1, 3)).float()
    assert torch.allclose(sal.gated_v, gated, rtol=1e-5, atol=1e-6 * float(gated.abs().max()))  # fp32 sums


def test_first_order_estimate_is_linear_for_a_small_patch(ctx64):
    sal = decision_saliency(ctx64)
    i = int(sal.first_order.abs().argmax())
    p, h = int(sal.positions[i]), 1e-3
    nudged = ctx64.spliced.clone()
    nudged.keys[:, :, p] += h * (ctx64.dense.keys[:, :, p] - ctx64.spliced.keys[:, :, p])
    nudged.values[:, :, p] += h * (ctx64.dense.values[:, :, p] - ctx64.spliced.values[:, :, p])
    actual = loss(ctx64, nudged, sal.answer_ids) - loss(ctx64, ctx64.spliced, sal.answer_ids)
    assert actual == pytest.approx(h * float(sal.first_order[i]), rel=3e-2)


def test_saliency_shapes_and_no_side_effects(ctx, answer):
    before = snapshot(ctx)
    params = list(ctx.model.hf.parameters())
    flags = [p.requires_grad for p in params]
    sal = decision_saliency(ctx, answer_ids=answer)
    n = ctx.n_reused
    assert sal.answer_ids == answer and sal.loss == pytest.approx(loss(ctx, ctx.spliced, answer), rel=1e-5)
    assert torch.equal(sal.positions, ctx.reused_positions)
    for scores in (sal.cadence_grad, sal.cadence, sal.first_order, sal.first_order_k, sal.first_order_v):
        assert scores.shape == (n,) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    assert sal.grad_sq_k.shape == (ctx.spliced.n_layers, n)
    assert (sal.cadence_grad >= 0).all() and (sal.cadence >= 0).all() and sal.seconds > 0
    patch_effects(ctx, ctx.reused_positions[:3], answer)
    assert_unchanged(ctx, before)
    assert [p.requires_grad for p in params] == flags and all(p.grad is None for p in params)


def test_params_are_restored_after_an_error(tiny_llama):
    flags = [p.requires_grad for p in tiny_llama.hf.parameters()]
    with pytest.raises(RuntimeError), _params_frozen(tiny_llama.hf):
        assert not any(p.requires_grad for p in tiny_llama.hf.parameters())
        raise RuntimeError
    assert [p.requires_grad for p in tiny_llama.hf.parameters()] == flags


def test_end_of_turn_target_is_the_likeliest_end_id(ctx):
    ends = {1, 2, 3}
    grads = cache_gradients(ctx.model, ctx.spliced, ctx.suffix_ids, (), end_ids=ends)
    assert len(grads.answer_ids) == 1 and grads.answer_ids[0] in ends
    scores = {t: loss(ctx, ctx.spliced, (t,)) for t in ends}
    assert grads.answer_ids[0] == min(scores, key=scores.get)
    assert grads.loss == pytest.approx(scores[grads.answer_ids[0]], rel=1e-5)


def test_empty_or_bad_answers_are_refused(ctx):
    with pytest.raises(wb.WorkbenchError, match="empty"):
        decision_saliency(ctx, answer_ids=())
    with pytest.raises(wb.WorkbenchError, match="empty"):
        patch_effects(ctx, ctx.reused_positions[:2], [])
    with pytest.raises(wb.WorkbenchError, match="vocabulary"):
        decision_saliency(ctx, answer_ids=[10**6])


# --- patching ----------------------------------------------------------------------------

def test_patch_effects_match_teacher_forcing_a_patched_copy(ctx, answer):
    pos = ctx.layout.passages[1].start + torch.tensor([0, 7])
    frame = patch_effects(ctx, pos, answer, batch_size=3)
    assert list(frame.columns) == ["position", "kind", "delta_loss"] and len(frame) == 6
    base = loss(ctx, ctx.spliced, answer)
    for row in frame.itertuples():
        patched = ctx.spliced.clone()
        if "k" in row.kind:
            patched.keys[:, :, row.position] = ctx.dense.keys[:, :, row.position]
        if "v" in row.kind:
            patched.values[:, :, row.position] = ctx.dense.values[:, :, row.position]
        assert row.delta_loss == pytest.approx(loss(ctx, patched, answer) - base, abs=1e-4)
    again = patch_effects(ctx, pos, answer, kinds=("v",), batch_size=1)
    assert torch.allclose(torch.tensor(again["delta_loss"].to_numpy()),
                          torch.tensor(frame[frame["kind"] == "v"]["delta_loss"].to_numpy()), atol=1e-4)


def test_patching_refuses_positions_that_are_not_reused(ctx, answer):
    with pytest.raises(wb.WorkbenchError, match="not reused"):
        patch_effects(ctx, [0], answer)
    with pytest.raises(wb.WorkbenchError, match="kinds"):
        patch_effects(ctx, ctx.reused_positions[:1], answer, kinds=("q",))


def test_sample_positions_takes_all_when_short(ctx):
    assert torch.equal(sample_positions(ctx, max_tokens=ctx.n_reused), ctx.reused_positions)


def test_sample_positions_is_stratified_and_seeded(ctx):
    picked = sample_positions(ctx, max_tokens=12, seed=3)
    assert len(picked) == 12 and torch.isin(picked, ctx.reused_positions).all()
    assert torch.equal(picked, picked.sort().values) and len(picked.unique()) == 12
    for seg in ctx.layout.passages:
        assert ((picked >= seg.start) & (picked < seg.end)).sum() == 4
    assert torch.equal(picked, sample_positions(ctx, max_tokens=12, seed=3))
    assert not torch.equal(picked, sample_positions(ctx, max_tokens=12, seed=4))


def test_a_short_passage_gives_its_unused_share_to_the_others(tiny_llama):
    example = wb.Example("short", ["Hi.", *small_example().passages[:2]], "Who?", ("x",))
    short = wb.build_context(tiny_llama, example)
    first = short.layout.passages[0]
    picked = sample_positions(short, max_tokens=3 * len(first) + 4)
    assert len(picked) == 3 * len(first) + 4
    assert ((picked >= first.start) & (picked < first.end)).sum() == len(first)


def test_attribution_check_gives_finite_correlations(ctx, answer):
    sal = decision_saliency(ctx, answer_ids=answer)
    check = attribution_check(ctx, sal, max_tokens=15)
    assert list(check.frame.columns) == ["position", "segment", "kind", "estimate", "actual"]
    assert len(check.frame) == 15 * 3
    for kind in ("kv", "k", "v"):
        c = check.correlations[kind]
        assert -1 <= c.rho <= 1 and 0 <= c.p_value <= 1 and c.n == 15
    assert "keys" in check.summary()
