"""TransformerLens 4.x (TransformerBridge) agrees with the workbench's dense cache and attention.

Hook names are the bridge's own, read off `run_with_cache`: `blocks.{l}.attn.hook_rot_k` (keys
after RoPE) and `blocks.{l}.attn.hook_v` are [batch, pos, kv_head, d_head] with SmolLM2's 3 kv
heads (not expanded to its 9 query heads); `blocks.{l}.attn.hook_pattern` is [batch, head, q, k].
"""

import pytest
import torch

import workbench as wb
from tests.conftest import transformer_bridge
from tests.unit.test_hooks_tl import assert_every_point_is_the_bridges, engine_dense_pass, transformer_lens_point
from workbench import interop
from workbench.engine.hooks import hook_names

pytestmark = pytest.mark.slow

ATOL = 1e-4
PATTERN_LAYERS = (0, 1, 14, 29)


@pytest.fixture(scope="module")
def prefill(smol, tmp_path_factory):
    """The bridge's activations of a dense prefill of one example's handed-off ids, our context
    and our attention patterns. One thread: on a shared 2-core machine it is several times faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _prefill(smol, tmp_path_factory)
    finally:
        torch.set_num_threads(threads)


def _prefill(smol, tmp_path_factory):
    bridge = transformer_bridge(smol, tmp_path_factory.mktemp("tokenizer"), name="smollm2-135m")
    ctx = wb.build_context(smol, wb.load_example("synthetic#0"))
    ids = ctx.layout.ids[:ctx.layout.suffix_start]  # [pos]
    wanted = set(interop.transformer_lens_names(ctx.dense)) | set(hook_names(smol.adapter))  # every engine point
    with torch.no_grad():  # and every TransformerLens point of the bridge's, so that none is missed
        _, cache = bridge.run_with_cache(ids[None], names_filter=lambda name: name in wanted
                                         or transformer_lens_point(name))
    return ctx, cache, interop.attention_pattern(smol, ids, layers=PATTERN_LAYERS)


def test_hook_rot_k_and_hook_v_match_the_dense_cache(prefill):
    ctx, tl, _ = prefill
    ours = interop.transformer_lens_names(ctx.dense)
    assert ours["blocks.0.attn.hook_rot_k"].shape == (1, ctx.layout.suffix_start, 3, 64)
    worst = {name: float((tl[name] - value).abs().max()) for name, value in ours.items()}
    assert max(worst.values()) < ATOL, sorted(worst.items(), key=lambda kv: -kv[1])[:4]


def test_hook_pattern_matches_the_workbench_attention(prefill):
    ctx, tl, ours = prefill
    n = ctx.layout.suffix_start
    assert set(ours) == {f"blocks.{l}.attn.hook_pattern" for l in PATTERN_LAYERS}
    for name, value in ours.items():
        assert tl[name].shape == value.shape == (1, 9, n, n), name
        assert (tl[name] - value).abs().max() < ATOL, name


def test_every_engine_hook_point_equals_the_bridges(prefill):
    """Issue 44: each hook name of the engine's full dense pass means and holds what the bridge's
    does, and each TransformerLens name of the bridge's pass is the engine's."""
    ctx, tl, _ = prefill
    ids = ctx.layout.ids[:ctx.layout.suffix_start]
    assert_every_point_is_the_bridges(engine_dense_pass(ctx.model, ids), tl, hook_names(ctx.model.adapter))
