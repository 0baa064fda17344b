"""nnsight traces of the question suffix over workbench caches, and TransformerLens names (tiny models)."""

import nnsight
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from tests.conftest import FAMILIES, small_example, tiny_model, transformer_bridge
from tests.hf_oracle import record_attention_inputs
from workbench import interop
from workbench.context import build_context
from workbench.diagnosis import diagnose
from workbench.diagnosis import Diagnosis
from workbench.engine.layers import rotated_qkv
from workbench.errors import WorkbenchError
from workbench.kv import KVCache, hf_cache
from workbench.signals.attention import attention_rows


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")  # llama3-scaled RoPE, grouped-query heads (4 query, 2 kv)


@pytest.fixture(scope="module")
def diagnosis(model):
    return diagnose(model, small_example(), selectors=["random"], budgets=[0.3], progress=False)


def hf_logits(model, ctx, cache: KVCache) -> torch.Tensor:
    """The plain HF forward of the suffix over `cache`. [suffix, vocab]"""
    with torch.no_grad():
        return model.hf(input_ids=ctx.suffix_ids[None], cache=cache.to_hf(), use_cache=True).logits[0]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_trace_logits_equal_hf_over_the_same_cache(family):
    model = tiny_model(family)
    ctx = build_context(model, small_example())
    last = {}
    for name in ("dense", "spliced"):
        with interop.trace_suffix(ctx, name) as lm:
            hidden = lm.model.layers[1].output.save()
            logits = lm.lm_head.output.save()
        assert hidden.shape == (1, len(ctx.suffix_ids), model.config.hidden_size)
        ref = hf_logits(model, ctx, getattr(ctx, name))
        assert torch.allclose(logits[0].detach(), ref, atol=1e-5, rtol=0)
        last[name] = logits[0, -1].detach()
    assert (last["dense"] - last["spliced"]).abs().max() > 1e-3


def test_intervention_changes_logits_and_leaves_caches_intact(model, diagnosis):
    ctx = diagnosis.ctx
    before = ctx.spliced.clone(), ctx.dense.clone()
    with interop.trace_suffix(diagnosis, "spliced") as lm:
        plain = lm.lm_head.output.save()
    with interop.trace_suffix(diagnosis, "spliced") as lm:
        lm.model.layers[1].mlp.output[:] = 0
        patched = lm.lm_head.output.save()
    assert (plain[0, -1] - patched[0, -1]).abs().max() > 1e-3
    for kept, now in zip(before, (ctx.spliced, ctx.dense)):
        assert torch.equal(kept.keys, now.keys) and torch.equal(kept.values, now.values)
    assert torch.allclose(hf_logits(model, ctx, ctx.spliced), plain[0].detach(), atol=1e-5, rtol=0)


def test_repair_form_traces_the_selectors_repaired_cache(model, diagnosis):
    ctx = diagnosis.ctx
    fixed = ctx.repair(torch.tensor(diagnosis.picks("random", 0.3)))
    with interop.trace_suffix(diagnosis, ("repair", "random", 0.3)) as lm:
        logits = lm.lm_head.output.save()
    assert torch.allclose(logits[0].detach(), hf_logits(model, ctx, fixed), atol=1e-5, rtol=0)
    with interop.trace_suffix(ctx, fixed) as lm:  # a KVCache is taken as is
        same = lm.lm_head.output.save()
    assert torch.equal(same, logits)


def test_gradient_idiom_inside_a_suffix_trace(diagnosis):
    with interop.trace_suffix(diagnosis, "spliced") as lm:
        hidden = lm.model.layers[1].output
        loss = lm.lm_head.output[0, -1].log_softmax(-1).max()
        with loss.backward():
            grad = nnsight.save(hidden.grad)
    ctx = diagnosis.ctx  # only saved values leave the block
    assert grad.shape == (1, len(ctx.suffix_ids), ctx.model.config.hidden_size) and grad.abs().sum() > 0


def test_nnsight_model_is_built_once_and_leaves_the_tokenizer_alone(model):
    padding = model.tokenizer.padding_side, model.tokenizer.pad_token
    assert interop.nnsight_model(model) is interop.nnsight_model(model)
    assert (model.tokenizer.padding_side, model.tokenizer.pad_token) == padding


def test_bad_input_is_refused_with_a_clear_error(diagnosis, tmp_path):
    ctx = diagnosis.ctx
    with pytest.raises(WorkbenchError, match="unknown cache"):
        interop.trace_suffix(ctx, "sliced")
    with pytest.raises(WorkbenchError, match="reads a Diagnosis"):
        interop.trace_suffix(ctx, ("repair", "random", 0.3))
    with pytest.raises(WorkbenchError, match="no selection"):
        interop.trace_suffix(diagnosis, ("repair", "random", 0.9))
    with pytest.raises(WorkbenchError, match="covers"):
        interop.trace_suffix(ctx, ctx.spliced.slice(0, 5))
    with pytest.raises(WorkbenchError, match="Context or a Diagnosis"):
        interop.trace_suffix(ctx.spliced, "dense")
    loaded = Diagnosis.load(diagnosis.save(tmp_path / "d"))
    with pytest.raises(WorkbenchError, match="re-run"):
        interop.trace_suffix(loaded, "spliced")


def test_transformer_lens_names_shapes_and_safetensors_export(diagnosis, tmp_path):
    cache = diagnosis.ctx.dense
    names = interop.transformer_lens_names(cache)
    n_layers, n_kv, n_pos, d_head = cache.keys.shape
    assert len(names) == 2 * n_layers
    k1 = names["blocks.1.attn.hook_rot_k"]
    assert k1.shape == (1, n_pos, n_kv, d_head)
    assert torch.equal(k1[0, 7, 1], cache.keys[1, 1, 7])
    assert torch.equal(names["blocks.2.attn.hook_v"][0, 3, 0], cache.values[2, 0, 3])
    path = interop.save_transformer_lens_names(cache, tmp_path / "kv.safetensors")
    loaded = load_file(path)
    assert loaded.keys() == names.keys()
    assert all(torch.equal(loaded[k], v) for k, v in names.items())
    with safe_open(path, "pt") as handle:
        assert handle.metadata()["keys"] == "post-RoPE"
    with pytest.raises(WorkbenchError, match="does not exist"):
        interop.save_transformer_lens_names(cache, tmp_path / "missing" / "kv.safetensors")


def test_attention_pattern_is_causal_and_normalized(model):
    ids = torch.arange(3, 40)
    pattern = interop.attention_pattern(model, ids, layers=[0, 2])
    assert set(pattern) == {"blocks.0.attn.hook_pattern", "blocks.2.attn.hook_pattern"}
    p = pattern["blocks.2.attn.hook_pattern"]
    assert p.shape == (1, model.adapter.n_heads, len(ids), len(ids))
    assert torch.allclose(p.sum(-1), torch.ones(()), atol=1e-5)
    assert p.triu(1).abs().max() == 0
    with pytest.raises(WorkbenchError, match="out of range"):
        interop.attention_pattern(model, ids, layers=[3])


def rebuilt_from_hidden(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The former `attention_pattern`: an HF prefill records each layer's attention input, whose
    queries the family adapter projects and rotates, over the HF cache's keys."""
    ad = model.adapter
    with torch.inference_mode():
        with record_attention_inputs(ad) as recorded:
            out = model.hf(input_ids=ids[None], cache=hf_cache(), use_cache=True)
        positions = torch.arange(len(ids))
        return {f"blocks.{l}.attn.hook_pattern": attention_rows(
                    rotated_qkv(ad, l, recorded[l][0], positions)[0], out.cache.layers[l].keys[0], positions,
                    ad.scaling, ad.windows[l])[None] for l in range(ad.n_layers)}


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_pattern_from_hook_points_equals_the_queries_rebuilt_from_hidden_states(family):
    model = tiny_model(family)
    ids = build_context(model, small_example()).layout.ids
    got, want = interop.attention_pattern(model, ids), rebuilt_from_hidden(model, ids)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[name], want[name]) for name in want)
    assert interop.attention_pattern(model, ids, layers=[1]).keys() == {"blocks.1.attn.hook_pattern"}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_transformer_bridge_hooks_match_our_names(family, tmp_path):
    """TransformerLens 4.x bridge on a tiny model: K/V and patterns agree with ours."""
    model = tiny_model(family)
    ctx = build_context(model, small_example())
    bridge = transformer_bridge(model, tmp_path, name=family)
    ids = ctx.layout.ids[:ctx.layout.suffix_start]
    with torch.no_grad():
        _, tl = bridge.run_with_cache(ids[None])
    ours = interop.transformer_lens_names(ctx.dense) | interop.attention_pattern(model, ids)
    for name, value in ours.items():
        assert tl[name].shape == value.shape, name
        assert (tl[name] - value).abs().max() < 1e-4, name
