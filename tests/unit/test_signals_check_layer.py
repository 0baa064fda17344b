"""CacheBlend's check layer reads its queries, keys and values at the engine's hook points."""

import pytest
import torch

import workbench as wb
from workbench.engine.layers import rotated_qkv
from conftest import small_example
from workbench.repair import recompute_rows
from workbench.signals.attention import attention_rows
from workbench.signals.check_layer import check_layer_signals


def rebuilt_from_hidden(ctx: wb.Context, check_layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The former computation: recompute layers 0..c-1, then project and rotate layer c's q, k, v
    from the hidden rows with the family adapter. Returns (value deviation, influence), each [reused]."""
    ad, n = ctx.model.adapter, ctx.layout.suffix_start
    rows = torch.arange(n)
    _, h = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=check_layer)
    with torch.inference_mode():
        q, k, v = rotated_qkv(ad, check_layer, ad.layers[check_layer].input_layernorm(h), rows)
        probs = attention_rows(q, k.transpose(0, 1), rows, ad.scaling, ad.windows[check_layer])
        influence = probs.mean(0).tril(-1).sum(0)  # [key]
        spliced_v = ctx.spliced.values[check_layer].transpose(0, 1)
        dev = (v.float() - spliced_v.float()).square().sum((1, 2))  # [pos]
    reused = ctx.reused_positions
    return dev[reused], influence[reused].float()


@pytest.mark.parametrize("check_layer", [0, 1, 2])
def test_check_layer_signals_equal_the_queries_rebuilt_from_hidden_states_bit_for_bit(tiny, check_layer):
    ctx = wb.build_context(tiny, small_example())
    assert check_layer < tiny.adapter.n_layers
    got = check_layer_signals(ctx, check_layer)
    dev, influence = rebuilt_from_hidden(ctx, check_layer)
    assert torch.equal(got.value_deviation, dev) and torch.equal(got.influence, influence)
    assert got.influence.sum() > 0
    assert (got.value_deviation.sum() > 0) == (check_layer > 0)  # layer 0's values depend on the token alone
