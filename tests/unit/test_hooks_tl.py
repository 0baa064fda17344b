"""Hooks with TransformerLens's meanings: every engine hook point equals TransformerLens 4's
`TransformerBridge` on a full dense pass (tiny Llama, Qwen3, Gemma 3); TransformerLens's calling
convention, filters and `fwd_hooks`; `Context.run_with_cache` / `run_with_hooks`; `hook_pattern`
by absolute key position in the batched cells."""

import pytest
import torch

import workbench as wb
from tests.conftest import small_example, tiny_model, transformer_bridge
from workbench.engine.answers import answer_cells
from workbench.engine.hooks import QK_NORM_HOOKS, Hooks, Rows, caching_hooks, hook_names
from workbench.engine.layers import final_logits
from workbench.kv import KVCache
from workbench.repair import recompute_rows

LAYER = 1


def engine_dense_pass(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every hook point of the engine's full dense pass of `ids` ([pos]) from an empty cache."""
    ad = model.adapter
    store: dict[str, torch.Tensor] = {}
    hooks = Hooks.of(caching_hooks(hook_names(ad), store), ad)
    shape = (ad.n_layers, ad.n_kv_heads, 0, ad.head_dim)
    empty = KVCache(*(torch.zeros(shape, dtype=model.dtype) for _ in "kv"))
    positions = torch.arange(len(ids))
    _, h = recompute_rows(model, empty, ids, positions, hooks=hooks)
    with torch.inference_mode():
        final_logits(ad, h, Rows.one_cell(positions), hooks)
    return store


def bridge_dense_pass(model, ids: torch.Tensor, folder) -> tuple[torch.Tensor, dict]:
    """TransformerLens 4's `TransformerBridge` over a copy of the same weights: (logits, cache)."""
    bridge = transformer_bridge(model, folder)
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(ids[None])
    return logits, cache


def same_as_the_bridge(model, ids: torch.Tensor, folder) -> dict[str, torch.Tensor]:
    """Assert every engine hook point of a dense pass of `ids` equals the bridge's; returns ours."""
    ours = engine_dense_pass(model, ids)
    logits, tl = bridge_dense_pass(model, ids, folder)
    assert_every_point_is_the_bridges(ours, tl, hook_names(model.adapter))
    assert torch.allclose(ours["hook_unembed"], logits, atol=1e-4 * float(logits.abs().max().clamp(min=1)))
    return ours


# What the bridge's cache holds that is not a TransformerLens 3 name, each left out of "every
# bridge point is the engine's" with its reason (by the name's last part).
BRIDGE_ONLY_POINTS = {
    "hook_in": "a bridge component's input (block, norm, attn, mlp and each linear's): TL3 has none",
    "hook_out": "a bridge component's output (block, norm, attn, mlp and each linear's): TL3 has none",
    "hook_cos": "the bridge's RoPE cos table (rotary_emb, attn): a table, not an activation of TL3's",
    "hook_sin": "the bridge's RoPE sin table (rotary_emb, attn): a table, not an activation of TL3's",
}


def transformer_lens_point(name: str) -> bool:
    """Whether the bridge's point `name` is one the engine must have (not in the list above)."""
    return name.rsplit(".", 1)[-1] not in BRIDGE_ONLY_POINTS


def assert_every_point_is_the_bridges(ours: dict, tl, names) -> None:
    """Each of `names` fired in `ours` and equals the bridge's cache `tl` (relative 1e-4), and each
    TransformerLens point of the bridge's cache (`transformer_lens_point`) is one of `names`."""
    assert set(ours) == set(names)  # every point fired on the dense pass
    assert set(names) <= set(tl.keys()), sorted(set(names) - set(tl.keys()))  # each name is the bridge's
    theirs = {name for name in tl.keys() if transformer_lens_point(name)}
    assert theirs <= set(names), sorted(theirs - set(names))  # and each of the bridge's is ours
    worst = {}
    for name in names:
        want = tl[name]
        if name.endswith(QK_NORM_HOOKS):  # the bridge gives [batch, head, pos, ...]; ours is hook_q's layout
            want = want.transpose(1, 2)
        got = ours[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        if name.endswith("hook_attn_scores"):  # masked keys: -inf here, the dtype's minimum or -inf there
            seen = torch.isfinite(got)
            assert torch.equal(seen, want > torch.finfo(want.dtype).min / 2), name
            got, want = got[seen], want[seen]
        worst[name] = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1))
    assert max(worst.values()) < 1e-4, sorted(worst.items(), key=lambda kv: -kv[1])[:4]


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text"])
def test_every_hook_point_equals_the_transformer_bridges(family, tmp_path):
    model = tiny_model(family)
    ours = same_as_the_bridge(model, wb.build_context(model, small_example()).layout.ids[:60], tmp_path)
    assert (f"blocks.{LAYER}.attn.hook_q_normed" in ours) == (family != "llama")
    # the meanings, not only the values: q before its norm, resid_mid between attention and the MLP
    l = f"blocks.{LAYER}"
    assert torch.equal(ours[f"{l}.hook_resid_mid"], ours[f"{l}.hook_resid_pre"] + ours[f"{l}.hook_attn_out"])
    attn = model.adapter.layers[LAYER].self_attn
    if family != "llama":
        gain = attn.q_norm.weight.float() + (1 if family == "gemma3_text" else 0)  # Gemma: 1 + weight
        with torch.inference_mode():
            normed = attn.q_norm(ours[f"{l}.attn.hook_q"])
            weighted = ours[f"{l}.attn.q_norm.hook_normalized"] * gain  # the q norm's rows before its weight
        assert torch.equal(weighted, ours[f"{l}.attn.hook_q_normed"])
        # the module's rsqrt, where the hooked hook_scale divides: equal up to rounding
        assert torch.allclose(normed, ours[f"{l}.attn.hook_q_normed"], rtol=1e-6, atol=1e-6)
        assert not torch.allclose(ours[f"{l}.attn.hook_q"], ours[f"{l}.attn.hook_q_normed"], atol=1e-3)
    block = model.adapter.layers[LAYER]
    assert (f"{l}.ln1_post.hook_scale" in ours) == (family == "gemma3_text")
    if family == "gemma3_text":  # the post-norms' rows before their weight: what attention and the MLP add
        for norm, module, out in (("ln1_post", block.post_attention_layernorm, "hook_attn_out"),
                                  ("ln2_post", block.post_feedforward_layernorm, "hook_mlp_out")):
            with torch.inference_mode():
                weighted = ours[f"{l}.{norm}.hook_normalized"] * (1 + module.weight.float())
            assert torch.equal(weighted, ours[f"{l}.{out}"])



@pytest.fixture(scope="module")
def ctx():
    return wb.build_context(tiny_model("qwen3", num_hidden_layers=4), small_example())


def test_a_transformer_lens_style_hook_runs(ctx):
    seen = []

    def f(x, *, hook):  # TransformerLens's convention: hook= by keyword (only), layer() a method, ctx a dict
        hook.ctx["calls"] = hook.ctx.get("calls", 0) + 1
        seen.append((hook.name, hook.layer(), hook.ctx["calls"]))
        return x

    ctx.repair(ctx.reused_positions[:5], hooks={"blocks.2.hook_resid_post": f, "hook_embed": f})
    assert seen == [("hook_embed", None, 1), ("blocks.2.hook_resid_post", 2, 1)]
    seen.clear()
    answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [ctx.reused_positions[:3]], ctx.suffix_ids, [1, 2, 3], 3,
                 hooks=[("blocks.0.attn.hook_z", f)])
    assert [s[2] for s in seen] == list(range(1, len(seen) + 1)) and len(seen) > 1  # ctx kept over the decode steps


@pytest.mark.parametrize("spec, want", [
    ("blocks.1.hook_resid_post", ["blocks.1.hook_resid_post"]),
    (["blocks.0.attn.hook_z", "hook_embed"], ["hook_embed", "blocks.0.attn.hook_z"]),
    (lambda name: name.endswith("ln2.hook_normalized"), [f"blocks.{l}.ln2.hook_normalized" for l in range(4)]),
])
def test_names_filter_and_fwd_hooks_take_a_name_a_list_or_a_callable(ctx, spec, want):
    rows = ctx.reused_positions[:4]
    _, cache = ctx.run_with_cache(rows, names_filter=spec)
    assert list(cache.keys()) == want
    hit = []
    ctx.run_with_hooks(rows, fwd_hooks=[(spec, lambda x, hook: hit.append(hook.name))])
    assert sorted(set(hit)) == sorted(want)


def test_run_with_cache_logits_equal_hfs_question_logits_over_the_repaired_cache(ctx):
    rows = ctx.reused_positions[1::3]
    for over, cache in (("spliced", ctx.spliced), ("dense", ctx.dense), (ctx.spliced, ctx.spliced)):
        logits, acts = ctx.run_with_cache(rows, over=over)
        fixed = ctx.repair(rows, cache)
        with torch.inference_mode():
            want = ctx.model.hf(input_ids=ctx.suffix_ids[None], cache=fixed.to_hf(), use_cache=True).logits
        assert logits.shape == want.shape == (1, len(ctx.suffix_ids), ctx.model.config.vocab_size)
        assert torch.allclose(logits, want, atol=1e-4), float((logits - want).abs().max())
        assert acts.positions.tolist() == rows.tolist() + list(range(ctx.layout.suffix_start, len(ctx.layout.ids)))
    plain = ctx.run_with_hooks(rows)
    bare, _ = ctx.run_with_cache(rows, names_filter=[])
    assert torch.equal(plain, bare)  # no hook registered: the same bare pass
    ablated = ctx.run_with_hooks(rows, fwd_hooks={"blocks.2.attn.hook_z": lambda z, hook: z * 0})
    assert (ablated - plain).abs().max() > 1e-3


def test_accumulated_resid_and_decompose_resid_work_on_the_returned_cache(ctx):
    from transformer_lens.ActivationCache import ActivationCache

    _, cache = ctx.run_with_cache(ctx.reused_positions[:6])
    assert isinstance(cache, ActivationCache)
    n_rows, d = 6 + len(ctx.suffix_ids), ctx.model.config.hidden_size
    stack, labels = cache.accumulated_resid(return_labels=True)
    assert stack.shape == (5, 1, n_rows, d) and labels[-1] == "final_post"
    assert torch.equal(stack[2], cache["blocks.2.hook_resid_pre"])
    parts = cache.decompose_resid()  # embed + each layer's attn_out and mlp_out sum to the last residual
    assert torch.allclose(parts.sum(0), cache["blocks.3.hook_resid_post"], atol=1e-4)
    assert torch.equal(cache["resid_mid", 1], cache["blocks.1.hook_resid_mid"])
    normed = cache.accumulated_resid(layer=2, apply_ln=True)  # the cached ln1 scale of layer 2
    assert torch.allclose(normed[-1], cache["blocks.2.ln1.hook_normalized"], atol=1e-5)


def test_an_identity_hook_on_hook_scale_rounds_only(ctx):
    rows = ctx.reused_positions[:8]
    plain = ctx.run_with_hooks(rows)
    scaled = ctx.run_with_hooks(rows, fwd_hooks=[(lambda name: name.endswith("hook_scale"), lambda x, hook: x)])
    assert torch.allclose(plain, scaled, atol=1e-4)
    doubled = ctx.run_with_hooks(rows, fwd_hooks={"blocks.1.ln2.hook_scale": lambda x, hook: x * 2})
    assert (doubled - plain).abs().max() > 1e-3  # an edited scale reaches the MLP's input


def test_hook_pattern_keys_are_absolute_positions_in_the_batched_cells_and_decode_steps(ctx):
    """The batched cells lay each cell's keys out as base, known, new rows (a repaired position
    twice); the hooks see them by absolute position, once, equal to the serial repair's pattern."""
    rows = ctx.reused_positions[2::4]
    name = f"blocks.{LAYER}.attn.hook_pattern"
    serial = {}
    ctx.repair(rows, hooks=caching_hooks([name, f"blocks.{LAYER}.attn.hook_attn_scores"], serial))
    batched, steps = [], []

    def keep(probs, hook):
        assert torch.equal(hook.key_positions, torch.arange(probs.shape[-1]).expand(probs.shape[0], -1))
        real = hook.positions >= 0  # [cell, row]
        assert torch.allclose(probs.sum(-1).permute(0, 2, 1)[real], torch.ones(()), atol=1e-5)
        (batched if probs.shape[2] > 1 else steps).append((probs.clone(), hook.positions.clone(), hook.cells.clone()))

    answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [torch.empty(0, dtype=torch.long), rows], ctx.suffix_ids,
                 [7, 8, 9], 3, hooks={name: keep})
    probs, positions, cells = batched[0]
    c = cells.tolist().index(1)
    here = probs[c, :, :len(rows), :ctx.layout.suffix_start]  # the repaired rows over the handed-off keys
    assert torch.allclose(here, serial[name][0], atol=1e-5)
    assert float(probs[c, :, :len(rows), ctx.layout.suffix_start:].abs().max()) == 0  # no later key seen
    assert steps and all(p.shape[-1] > ctx.layout.suffix_start for p, _, _ in steps)  # the decode steps too
    scores = serial[f"blocks.{LAYER}.attn.hook_attn_scores"]
    assert scores.shape == serial[name].shape and torch.equal(scores.softmax(-1), serial[name])
