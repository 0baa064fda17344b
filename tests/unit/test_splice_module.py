"""The prefills and the splice run through the engine (workbench.splice), bit for bit what HF's
forward gives on the CPU in fp32 (HF's model is the oracle here, nowhere else)."""

import pytest
import torch

import workbench as wb
from workbench.engine.layers import rotated_qkv
from conftest import hf_forward_calls, small_example
from hf_oracle import record_attention_inputs
from workbench.kv import KVCache, hf_cache
from workbench.layout import build_layout
from workbench.splice import dense_cache, prefill, prefill_many, sender_cache, splice


def hf_prefill(model, ids, past=None) -> KVCache:
    """HF's forward of ids ([pos]) after `past`: the oracle."""
    with torch.inference_mode():
        out = model.hf(input_ids=ids[None], cache=past.to_hf() if past is not None else hf_cache(), use_cache=True)
    return KVCache.from_hf(out.cache)


def test_engine_prefill_equals_hf_forward_bit_for_bit(tiny):
    ids = build_layout(tiny.tokenizer, small_example(4)).ids  # longer than Gemma's window of 16
    got, want = prefill(tiny, ids), hf_prefill(tiny, ids)
    assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    prefix = prefill(tiny, ids[:20])
    got, want = prefill(tiny, ids[20:90], past=prefix), hf_prefill(tiny, ids[20:90], past=prefix)
    assert got.n_positions == 90
    assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)


def test_exact_rerotation_equals_hf_recorded_inputs(tiny):
    """The sender's pre-RoPE keys read at the engine's hook points are those HF's attention input
    gives (recorded by forward pre-hooks, the old path), so the exact splice is unchanged."""
    layout = build_layout(tiny.tokenizer, small_example())
    got = splice(tiny, layout, "exact")
    ad, prefix_len = tiny.adapter, layout.prefix.end
    prefix = hf_prefill(tiny, layout.ids[:prefix_len])
    for seg in layout.passages:
        with record_attention_inputs(ad) as inputs:
            hf_prefill(tiny, layout.ids[seg.start:seg.end], past=prefix)
        receiver = torch.arange(seg.start, seg.end)
        with torch.inference_mode():
            want = torch.stack([rotated_qkv(ad, l, inputs[l][0], receiver)[1].transpose(0, 1)
                                for l in range(ad.n_layers)])
        assert torch.equal(got.cache.keys[:, :, seg.start:seg.end], want)
    assert torch.equal(got.cache.keys[0], dense_cache(tiny, layout).keys[0])  # layer 0: dense's own RoPE


def test_splice_and_dense_never_call_hf_forward(tiny_llama):
    with hf_forward_calls(tiny_llama) as calls:
        ctx = wb.build_context(tiny_llama, small_example())
        splice(tiny_llama, ctx.layout, "exact")
        prefill_many(tiny_llama, [ctx.layout.ids[s.start:s.end] for s in ctx.layout.passages])
    assert calls == [], sorted(set(calls))
    assert ctx.dense.n_positions == ctx.spliced.n_positions == ctx.layout.suffix_start


def test_prefill_hooks_see_the_rows_at_their_positions(tiny_llama):
    ids = torch.arange(3, 40)
    prefix = prefill(tiny_llama, ids[:10])
    seen = {}

    def keep(x, hook):
        seen["shape"], seen["positions"] = tuple(x.shape), hook.positions.clone()

    sent = sender_cache(tiny_llama, prefix, ids[10:], hooks={"blocks.1.hook_resid_post": keep})
    assert sent.n_positions == 27
    assert seen["shape"] == (1, 27, 64) and torch.equal(seen["positions"][0], torch.arange(10, 37))


@pytest.mark.parametrize("bad", [torch.zeros(2, 3, dtype=torch.long), torch.zeros(4), [[1, 2]]])
def test_prefill_refuses_ids_that_are_not_a_row_of_token_ids(tiny_llama, bad):
    with pytest.raises(wb.WorkbenchError, match="1-D tensor of token ids"):
        prefill(tiny_llama, bad)
    with pytest.raises(wb.WorkbenchError, match=r"ids\[0\]: expected a 1-D tensor"):
        prefill_many(tiny_llama, [bad])
