"""Gemma 3 on a tiny random model: what the family adds beyond the checks every family runs
(splice, repair, batched repair, answers and draft attention are in the family-parametrized
tests): a RoPE base per layer type, the sliding window, logit soft-capping, and refusals."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_config, tiny_model
from workbench.decode import greedy_answer, greedy_answers
from workbench.kv import relative_error
from workbench.splice import splice


@pytest.fixture(scope="module")
def gemma() -> wb.LoadedModel:
    return tiny_model("gemma3_text")


@pytest.fixture(scope="module")
def ctx(gemma) -> wb.Context:
    return wb.build_context(gemma, small_example())


def test_the_adapter_reads_each_layer_type(gemma):
    ad = gemma.adapter
    assert ad.windows == (16, None, 16)
    assert ad.rope_kinds == ("sliding_attention", "full_attention", "sliding_attention")
    assert ad.scaling == pytest.approx(24 ** -0.5)  # query_pre_attn_scalar, not head_dim
    k = torch.randn(2, 5, 16)  # [kv_head, pos, d_head]
    local, full = ad.rotate_keys(k, 7, layer=0), ad.rotate_keys(k, 7, layer=1)
    assert not torch.allclose(local, full)  # two bases (and a linear scaling on the global one)
    torch.testing.assert_close(ad.rotate_keys(k, 7, layer=2), local)


def test_delta_rotation_matches_each_layers_own_rope(ctx):
    """The delta-RoPE splice lands on the dense path's rotation at every layer, each with its base:
    the rounding floor is float noise everywhere (a wrong base would err by O(1))."""
    floor = splice(ctx.model, ctx.layout).rope_floor  # [layer]
    assert floor.shape == (3,)
    assert float(floor.max()) < 1e-5
    exact = splice(ctx.model, ctx.layout, rerotation="exact").cache
    err = relative_error(ctx.spliced, exact)
    assert float(err["k"].max()) < 1e-5 and float(err["v"].max()) == 0.0


def test_a_local_layer_confines_the_splice_error_to_the_window(ctx):
    """Below the first global layer, a passage row further than the window from its passage's
    start saw the same tokens in isolation as in the dense prefill, so its layer-1 K/V are exact up
    to rounding; rows within the window of the start saw different tokens and deviate."""
    window = ctx.model.adapter.windows[0]
    deep, shallow = [], []
    for seg in ctx.layout.passages[1:]:
        assert len(seg) > window
        shallow += range(seg.start, seg.start + window - 1)
        deep += range(seg.start + window - 1, seg.end)

    def dev(rows):  # [row]: relative L2 of layer-1 values
        d = (ctx.spliced.values[1][:, rows] - ctx.dense.values[1][:, rows]).norm(dim=(0, 2))
        return d / ctx.dense.values[1][:, rows].norm(dim=(0, 2))
    assert float(dev(deep).max()) < 1e-4
    assert float(dev(shallow).max()) > 1e-2


def test_answers_over_caches_of_different_lengths_equal_one_at_a_time(ctx):
    """Caches of two lengths decode in one batch (each window by absolute position); every answer
    equals the one decoded alone."""
    caches = [ctx.spliced, ctx.dense.slice(0, ctx.spliced.n_positions - 3), ctx.dense]
    want = [greedy_answer(ctx.model, c, ctx.suffix_ids, max_new_tokens=6) for c in caches]
    assert greedy_answers(ctx.model, caches, ctx.suffix_ids, max_new_tokens=6) == want


def test_final_logit_softcapping_is_applied():
    model = tiny_model("gemma3_text", final_logit_softcapping=0.5)
    seen = []
    handle = model.adapter.final_norm.register_forward_pre_hook(lambda m, args: seen.append(args[0][0]))
    try:
        with torch.inference_mode():
            logits = model.hf(input_ids=torch.arange(3, 40)[None]).logits[0]  # [pos, vocab]
    finally:
        handle.remove()
    assert float(logits.abs().max()) <= 0.5
    torch.testing.assert_close(model.adapter.logits(seen[0]), logits)


@pytest.mark.parametrize("overrides, match", [
    (dict(attn_logit_softcapping=50.0), "soft-capping"),
    (dict(use_bidirectional_attention=True), "bidirectional"),
    (dict(rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                           "full_attention": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}}),
     "'dynamic' \\(full_attention layers\\)"),
])
def test_what_the_adapter_cannot_honour_is_refused(tmp_path, overrides, match):
    tiny_config("gemma3_text", **overrides).save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match=match):
        wb.load_model(str(tmp_path))


def test_the_multimodal_gemma3_is_refused_with_the_way_out():
    from transformers import AutoConfig

    with pytest.raises(wb.WorkbenchError, match="gemma3_text"):
        wb.family.check_supported_config(AutoConfig.for_model("gemma3"), "gemma3")


def test_restoring_blocks_on_a_windowed_model_is_exact_wherever_every_visible_key_is(ctx):
    """The unit curve's restoration (RESULTS 8.1) on a model whose window is shorter than the
    context: restoring the dense rows of any set of 16-row blocks gives dense K/V on exactly those
    rows, and a suffix query whose visible keys (causal, within its layer's window) are all exact
    gets exactly the dense attention output; one that sees an unrestored changed row does not."""
    from workbench.experiments.unit_curve import attention_probe

    probe = attention_probe(ctx)
    changed = ctx.layout.pool_positions("changed")  # [n]: rows computed under another prefix
    blocks = [changed[i:i + 16] for i in range(0, len(changed), 16)]
    n, windows = ctx.layout.suffix_start, ctx.model.adapter.windows
    gen = torch.Generator().manual_seed(0)
    exact_seen = inexact_seen = 0
    for trial in range(6):
        keep = [b for b in blocks if bool(torch.rand(1, generator=gen) < 0.5)] or blocks[-1:]
        restored_rows = torch.cat(keep)
        restored = ctx.spliced.with_rows(ctx.dense, restored_rows)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[restored_rows] = True
        assert torch.equal(restored.keys[:, :, mask], ctx.dense.keys[:, :, mask])
        assert torch.equal(restored.values[:, :, ~mask], ctx.spliced.values[:, :, ~mask])
        assert probe.error(restored_rows) == pytest.approx(probe.cache_error(restored), rel=1e-6)
        wrong = torch.zeros(n, dtype=torch.bool)
        wrong[changed] = True
        wrong &= ~mask  # changed rows still spliced
        for layer in range(ctx.model.adapter.n_layers):
            out = probe._output(layer, restored.keys[layer], restored.values[layer])  # [head, row, d_head]
            for r, q in enumerate(probe.query_positions.tolist()):
                lo = 0 if windows[layer] is None else max(0, q - windows[layer] + 1)
                sees_wrong = bool(wrong[lo:min(q + 1, n)].any())
                close = torch.allclose(out[:, r], probe.dense_outputs[layer][:, r], atol=1e-5, rtol=1e-4)
                if not sees_wrong:
                    assert close, (trial, layer, r)
                    exact_seen += 1
                elif not close:
                    inexact_seen += 1
    assert exact_seen and inexact_seen  # both cases occur, so the check can fail
    assert probe.error(changed) < 1e-5 < probe.error(changed[:0])
