"""Draft and question attention on tiny random models, checked against HF's own attention."""

import pytest
import torch

import workbench as wb
import workbench.decode
from conftest import FAMILIES, small_example, tiny_model
from workbench.signals import SignalSet
from workbench.engine.attention import grouped_scores
from workbench.signals.attention import attention_rows, draft_attention, question_attention, record_queries, suffix_pass


@pytest.fixture(scope="module", params=FAMILIES)
def eager_ctx(request) -> wb.Context:
    """A context on a tiny model of each family with eager attention (it can return weights)."""
    return wb.build_context(tiny_model(request.param, attn="eager"), small_example())


@pytest.fixture(scope="module")
def llama_ctx(tiny_llama) -> wb.Context:
    return wb.build_context(tiny_llama, small_example())


def hf_attentions(ctx: wb.Context) -> tuple[torch.Tensor, ...]:
    """HF's attention weights of the suffix forward over the splice, per layer [head, query, key]."""
    with torch.inference_mode():
        out = ctx.model.hf(input_ids=ctx.suffix_ids[None], cache=ctx.spliced.to_hf(),
                           use_cache=True, output_attentions=True)
    return tuple(a[0].float() for a in out.attentions)


def test_last_query_matches_hf_attention(eager_ctx):
    n = eager_ctx.layout.suffix_start
    got = draft_attention(eager_ctx, k=1)
    want = torch.stack([a[:, -1, :n].mean(0) for a in hf_attentions(eager_ctx)])  # [layer, pos]
    assert got.per_layer.shape == want.shape
    torch.testing.assert_close(got.per_layer, want, atol=1e-5, rtol=0)
    assert got.query_positions == (eager_ctx.layout.n_tokens - 1,)


@pytest.mark.parametrize("k", [None, 3])
def test_question_attention_matches_hf_attention_with_or_without_a_draft_after_it(eager_ctx, k):
    """The shared pass drafts after the suffix; the drafted keys lie after every suffix query."""
    n = eager_ctx.layout.suffix_start
    got = suffix_pass(eager_ctx, k=k).question
    want = torch.stack([a[:, :, :n].mean((0, 1)) for a in hf_attentions(eager_ctx)])  # [layer, pos]
    assert got.per_layer.shape == (eager_ctx.model.adapter.n_layers, n)
    torch.testing.assert_close(got.per_layer, want, atol=1e-5, rtol=0)
    assert got.draft_ids == ()
    assert got.query_positions == tuple(range(n, eager_ctx.layout.n_tokens))


def test_query_relevance_is_hf_attention_renormalized_over_the_cached_rows(eager_ctx):
    """ProphetKV's relevance: each question row's attention as a softmax over the cached keys
    alone (a row that sees none of them, outside a sliding window, adds 0), mean over rows and
    heads, at every layer; the token signal fuses the layers by their mean."""
    n = eager_ctx.layout.suffix_start
    want = []
    for a in hf_attentions(eager_ctx):  # [head, query, key]
        cached = a[:, :, :n]
        mass = cached.sum(-1, keepdim=True)
        want.append(torch.where(mass > 0, cached / mass.clamp_min(1e-30), 0.0).mean((0, 1)))
    want = torch.stack(want)  # [layer, pos]
    got = suffix_pass(eager_ctx, k=2).relevance
    torch.testing.assert_close(got.per_layer, want, atol=1e-5, rtol=0)
    assert got.layers_summed == range(0, eager_ctx.model.adapter.n_layers)
    fused = SignalSet(eager_ctx).token("query_relevance")
    torch.testing.assert_close(fused, want[:, eager_ctx.reused_positions].mean(0), atol=1e-6, rtol=0)
    assert not torch.allclose(got.per_layer, suffix_pass(eager_ctx, k=2).question.per_layer)


def test_the_suffix_pass_decodes_on_to_the_greedy_answer_bit_for_bit(tiny):
    ctx = wb.build_context(tiny, small_example())
    for cache in (ctx.spliced, ctx.dense):
        shared = suffix_pass(ctx, cache, k=2)
        assert shared.answer(tiny) == ctx.generate(cache)
        assert shared.draft.draft_ids == draft_attention(ctx, cache, k=2).draft_ids
        assert torch.equal(shared.draft.per_layer, draft_attention(ctx, cache, k=2).per_layer)


def test_a_signal_set_prefills_the_splice_suffix_once_for_draft_question_and_saliency(tiny_llama, monkeypatch):
    ctx = wb.build_context(tiny_llama, small_example())
    signals = SignalSet(ctx)
    hf_lengths, engine_rows = [], []
    real, real_pass = type(tiny_llama.hf).forward, workbench.decode.recompute_rows

    def counting(self, *args, input_ids=None, **kwargs):
        hf_lengths.append(input_ids.shape[1])
        return real(self, *args, input_ids=input_ids, **kwargs)

    def counting_pass(model, cache, ids, positions, *args, **kwargs):
        engine_rows.append(positions.numel())
        return real_pass(model, cache, ids, positions, *args, **kwargs)
    monkeypatch.setattr(type(tiny_llama.hf), "forward", counting)
    monkeypatch.setattr(workbench.decode, "recompute_rows", counting_pass)  # decode.question_pass's engine pass
    start = __import__("time").perf_counter()
    for name in ("draft", "question", "saliency"):
        signals[name]
    wall = __import__("time").perf_counter() - start
    assert set(hf_lengths) <= {1}  # HF's modules run only the answer's one-token decode steps
    prefills = [n for n in engine_rows if n > 1]  # the rest are the draft's one-row passes
    assert len(prefills) == 2  # the shared suffix pass and the saliency's teacher-forced pass with grad
    assert prefills[0] == len(ctx.suffix_ids)
    assert signals["saliency"].answer_ids[:len(ctx.generate(ctx.spliced).token_ids)] == \
        ctx.generate(ctx.spliced).token_ids
    assert sum(c.seconds for c in signals.costs.values()) <= wall  # a record read inside another counts once
    assert signals.cost_of(["draft"]).forward_passes == 1  # the draft costs the suffix pass it reads


def test_the_suffix_pass_costs_the_rows_it_ran_when_the_draft_stops_early(tiny_llama, monkeypatch):
    ctx = wb.build_context(tiny_llama, small_example())
    drafted = suffix_pass(ctx, k=2).draft.draft_ids
    assert len(drafted) == 2 and drafted[0] != drafted[1]
    # the second drafted token is an end of turn: the draft is its first token, fed back once
    monkeypatch.setattr("workbench.engine.decode.stop_token_ids", lambda model: {drafted[1]})
    signals = SignalSet(ctx)
    assert signals["draft"].draft_ids == drafted[:1]
    rows = len(ctx.suffix_ids) + 1
    assert signals.costs["suffix"].layer_tokens == rows * tiny_llama.adapter.n_layers


def test_input_cache_unchanged_bit_for_bit(llama_ctx):
    ctx = llama_ctx
    keys, values = ctx.spliced.keys.clone(), ctx.spliced.values.clone()
    draft_attention(ctx, k=3)
    question_attention(ctx)
    assert torch.equal(ctx.spliced.keys, keys) and torch.equal(ctx.spliced.values, values)
    assert ctx.spliced.n_positions == ctx.layout.suffix_start


def test_draft_ids_are_the_greedy_answer(tiny):
    ctx = wb.build_context(tiny, small_example())
    for cache in (ctx.spliced, ctx.dense):
        got = draft_attention(ctx, cache, k=3)
        greedy = ctx.generate(cache).token_ids
        assert got.draft_ids[:len(greedy)] == greedy[:3]
        fed = min(len(got.draft_ids), 2)  # drafted tokens whose queries were recorded
        assert len(got.query_positions) == 1 + fed


def test_k1_and_k2_differ_and_rows_are_distributions(llama_ctx):
    ctx = llama_ctx
    one, two = draft_attention(ctx, k=1), draft_attention(ctx, k=2)
    assert len(one.draft_ids) == 1 and one.draft_ids == two.draft_ids[:1]
    assert two.query_positions == (ctx.layout.n_tokens - 1, ctx.layout.n_tokens)
    assert not torch.allclose(one.per_layer, two.per_layer)
    for s in (one, two):
        sums = s.per_layer.sum(1)  # [layer]: mass left on the handed-off rows
        assert ((sums > 0) & (sums <= 1 + 1e-6)).all()
        assert s.layers_summed == range(1, ctx.model.adapter.n_layers)
        torch.testing.assert_close(s.scores([0, 5]), s.per_layer[1:, [0, 5]].sum(0))
        assert s.scores().shape == (ctx.layout.suffix_start,)


def test_attention_rows_sum_to_one_over_visible_keys():
    torch.manual_seed(0)
    q = torch.randn(3, 4, 8)  # [row, head, d_head]
    keys = torch.randn(2, 10, 8)  # [kv_head, key, d_head]
    pos = torch.tensor([5, 7, 9])
    probs = attention_rows(q, keys, pos, 8 ** -0.5)  # [head, row, key]
    torch.testing.assert_close(probs.sum(-1), torch.ones(4, 3))
    assert (probs[:, 0, 6:] == 0).all() and (probs[:, 1, 8:] == 0).all()
    # query head h reads kv head h // 2
    alone = attention_rows(q[:, 3:4], keys[1:2], pos, 8 ** -0.5)
    torch.testing.assert_close(probs[3:4], alone)


def test_the_signals_and_the_hooked_attention_score_through_one_grouped_product_bit_for_bit(tiny):
    """q·kᵀ is written once (`engine.attention.grouped_scores`, kv heads never copied per group):
    it equals the per-head product over kv heads copied per group bit for bit on the signals'
    recorded rows, and the question's `hook_attn_scores` are it, scaled and masked, bit for bit."""
    ctx = wb.build_context(tiny, small_example())
    ad, n = tiny.adapter, ctx.layout.suffix_start
    rec = record_queries(tiny, ctx.spliced, ctx.suffix_ids, 2)
    _, cache = ctx.run_with_cache(names_filter=lambda name: name.endswith(("rot_q", "rot_k", "attn_scores")))
    for l in range(ad.n_layers):
        q, keys = rec.queries[l].float(), rec.keys.keys[l].float()  # [row, head, d_head], [kv_head, key, d_head]
        copied = torch.einsum("rhd,hkd->hrk", q, keys.repeat_interleave(q.shape[1] // keys.shape[0], dim=0))
        assert torch.equal(grouped_scores(q.transpose(0, 1), keys), copied)
        q = cache[f"blocks.{l}.attn.hook_rot_q"][0].transpose(0, 1).float()  # [head, row, d_head]
        keys = torch.cat([ctx.spliced.keys[l], cache[f"blocks.{l}.attn.hook_rot_k"][0].transpose(0, 1)], 1).float()
        positions = torch.arange(n, n + q.shape[1])
        want = grouped_scores(q[None], keys[None]) * ad.scaling  # [1, head, row, key]
        want = want.masked_fill(~ad.visible(positions, torch.arange(keys.shape[1]), l), float("-inf"))
        assert torch.equal(cache[f"blocks.{l}.attn.hook_attn_scores"], want), l


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_k_errors(llama_ctx, k):
    with pytest.raises(wb.WorkbenchError, match="k"):
        draft_attention(llama_ctx, k=k)


def test_cache_of_wrong_length_errors(llama_ctx):
    with pytest.raises(wb.WorkbenchError, match="suffix starts"):
        question_attention(llama_ctx, llama_ctx.spliced.slice(0, 10))
