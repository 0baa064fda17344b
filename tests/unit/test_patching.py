"""Activation patching on a splice (diagnosis.patching) and its figures (plots.patching), on a tiny
Llama whose splice of two passages flips dense's first answer token."""

import numpy as np
import pytest
import torch

import workbench as wb
from tests.conftest import small_example
from workbench.diagnosis.patching import Patch, activation_patching, patched_logits
from workbench.errors import WorkbenchError
from workbench.plots import figure_problems
from workbench.plots.patching import head_patching_figure, resid_patching_figure


@pytest.fixture(scope="module")
def ctx(tiny_llama):
    return wb.build_context(tiny_llama, small_example(2))  # dense and the splice disagree on the first token


def question(ctx) -> tuple[int, ...]:
    return tuple(range(ctx.layout.suffix_start, len(ctx.layout.ids)))


def test_patching_all_of_dense_gives_dense_and_nothing_gives_the_splice(ctx):
    n_layers = ctx.model.adapter.n_layers
    dense = ctx.run_with_hooks(over="dense")[0, -1]  # [vocab]
    splice = ctx.run_with_hooks(over="spliced")[0, -1]
    assert dense.argmax() != splice.argmax()
    every = [Patch(f"blocks.{l}.hook_resid_post", question(ctx)) for l in range(n_layers)]
    logits = patched_logits(ctx, [every, []])  # [2, vocab]
    _, clean = ctx.run_with_cache(over="dense", names_filter=f"blocks.{n_layers - 1}.hook_resid_post")
    with torch.inference_mode():  # dense's last residual row through the final norm and head
        exact = ctx.model.adapter.logits(clean[f"blocks.{n_layers - 1}.hook_resid_post"][0, -1:])[0]
    assert torch.equal(logits[0], exact)
    torch.testing.assert_close(logits[0], dense, rtol=1e-5, atol=1e-5)  # the head on one row or on all
    torch.testing.assert_close(logits[1], splice, rtol=1e-5, atol=1e-5)  # batched against serial rounding
    p = activation_patching(ctx, rows=question(ctx)[-3:], z_rows=question(ctx)[-3:])
    assert p.resid[-1, -1] == 1.0  # the last row's last residual is dense's: exactly dense's logits
    assert np.abs(p.resid[:, 0]).max() < 1 and np.isfinite(p.z).all()


def test_patching_nothing_scores_zero_and_everything_one(ctx):
    rows = question(ctx)
    p = activation_patching(ctx, rows=rows[-2:], z_rows=rows[-2:])
    logits = patched_logits(ctx, [[]])[0]
    plus = int(ctx.run_with_hooks(over="dense")[0, -1].argmax())
    minus = int(ctx.run_with_hooks(over="spliced")[0, -1].argmax())
    metric = (float(logits[plus] - logits[minus]) - p.splice_diff) / (p.dense_diff - p.splice_diff)
    assert metric == pytest.approx(0.0, abs=1e-5)  # the unpatched pass is the scale's 0 (up to batch rounding)
    assert abs(p.dense_diff - p.splice_diff) > 1e-2
    assert p.resid.shape == (ctx.model.adapter.n_layers, 2) and p.z.shape == (3, ctx.model.adapter.n_heads)
    assert p.layers == [0, 1, 2] and len(p.tokens) == 2 and p.dense_token != p.splice_token


def test_every_head_of_a_layer_equals_its_attention_output(ctx):
    rows, n_heads = question(ctx), ctx.model.adapter.n_heads
    splice = patched_logits(ctx, [[]])[0]
    for layer in range(ctx.model.adapter.n_layers):
        heads = [Patch(f"blocks.{layer}.attn.hook_z", rows, h) for h in range(n_heads)]
        out = [Patch(f"blocks.{layer}.hook_attn_out", rows)]
        by_heads, by_out, one_head = patched_logits(ctx, [heads, out, heads[:1]])
        torch.testing.assert_close(by_heads, by_out, rtol=1e-5, atol=1e-5)
        # layer 0's K/V of the splice are dense's, so its attention output is too: only later layers move
        assert torch.allclose(by_out, splice, atol=1e-4) == (layer == 0)
        assert torch.allclose(one_head, by_out, atol=1e-4) == (layer == 0)  # one head is not the whole layer


def test_a_patch_from_a_middle_row_equals_the_whole_hooked_pass(ctx):
    """A cell recomputes the question from its first patched row; the full pass with the same hook agrees."""
    rows = question(ctx)
    row, start = rows[len(rows) // 2], ctx.layout.suffix_start
    _, clean = ctx.run_with_cache(over="dense", names_filter="blocks.1.hook_resid_post")

    def put(x, hook):  # x: [1, question, hidden]
        x[0, row - start] = clean["blocks.1.hook_resid_post"][0, row - start]

    whole = ctx.run_with_hooks(over="spliced", fwd_hooks=[("blocks.1.hook_resid_post", put)])[0, -1]
    cell = patched_logits(ctx, [[Patch("blocks.1.hook_resid_post", (row,))]])[0]
    torch.testing.assert_close(cell, whole, rtol=1e-5, atol=1e-5)


def test_bad_patches_and_an_unflipped_example_are_refused(ctx, tiny_llama):
    with pytest.raises(WorkbenchError, match="unknown hook point"):
        patched_logits(ctx, [[Patch("blocks.9.hook_resid_post", question(ctx))]])
    with pytest.raises(WorkbenchError, match="question positions"):
        patched_logits(ctx, [[Patch("blocks.0.hook_resid_post", (0,))]])
    with pytest.raises(WorkbenchError, match="head 7"):
        patched_logits(ctx, [[Patch("blocks.0.attn.hook_z", question(ctx), 7)]])
    with pytest.raises(WorkbenchError, match="layers"):
        activation_patching(ctx, layers=[5])
    same = wb.build_context(tiny_llama, small_example(3))  # dense and the splice agree here
    with pytest.raises(WorkbenchError, match="nothing to patch back"):
        activation_patching(same, rows=question(same)[-1:])


def test_the_figures_show_every_cell(ctx):
    rows = question(ctx)
    p = activation_patching(ctx, rows=rows[-4:], z_rows=rows[-4:])
    resid, heads = resid_patching_figure(p), head_patching_figure(p)
    assert figure_problems(resid) == [] and figure_problems(heads) == []
    assert np.asarray(resid.data[0].z).shape == (3, 4) and np.asarray(heads.data[0].z).shape == (3, 4)
    assert list(resid.layout.xaxis.ticktext)[-1].startswith(str(rows[-1]))
    assert resid.data[0].zmid == 0 and resid.data[0].zmax >= 1
