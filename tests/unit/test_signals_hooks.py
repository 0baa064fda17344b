"""The signals' passes run through the engine (issue 44 item 1): `diagnose(..., hooks=)` and
`SignalSet(..., hooks=)` reach the suffix pass and its draft, CADENCE's teacher-forced forward and
backward (the engine's grad mode), the check layer and the patching; without hooks the values are
HF's path's (kept here as the oracle only: the code the engine replaced)."""

import sys
from contextlib import contextmanager

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.diagnosis import diagnose
from workbench.kv import KVCache, hf_cache
from workbench.repair import recompute_rows
from workbench.signals import SignalSet
from workbench.signals.attention import attention_rows, suffix_pass
from workbench.signals.check_layer import check_layer_signals
from workbench.signals.patching import patch_effects
from workbench.signals.saliency import cache_gradients, decision_saliency

FAMILIES = ["llama", "qwen3", "gemma3_text"]


@pytest.fixture(scope="module", params=FAMILIES)
def ctx(request) -> wb.Context:
    return wb.build_context(tiny_model(request.param), small_example())


@pytest.fixture(scope="module")
def llama_ctx() -> wb.Context:
    return wb.build_context(tiny_model("llama"), small_example())


def zero_head(layer: int, head: int = 0):
    """A hook map that zeroes one head's output (`hook_z`, [cell, row, head, d_head])."""
    def ablate(z, hook):
        assert hook.layer() == layer
        z[:, :, head] = 0
    return {f"blocks.{layer}.attn.hook_z": ablate}


# ----------------------------------------------------------------------------- the HF oracles


@contextmanager
def hf_queries(model):
    """Each layer's post-RoPE queries ([row, head, d_head], one per forward) as HF's attention
    modules make them: a forward pre-hook projects the attention input and rotates it with the
    position embeddings HF hands the module, through the modeling file's own functions."""
    recorded = [[] for _ in model.adapter.layers]

    def pre(layer, attn):
        rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb

        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]  # [1, row, hidden]
            q = attn.q_proj(x).view(*x.shape[:-1], -1, attn.head_dim).transpose(1, 2)  # [1, head, row, d_head]
            q = attn.q_norm(q) if hasattr(attn, "q_norm") else q
            cos, sin = kwargs["position_embeddings"]
            recorded[layer].append(rotary(q, q, cos, sin)[0][0].transpose(0, 1))
        return hook

    handles = [block.self_attn.register_forward_pre_hook(pre(l, block.self_attn), with_kwargs=True)
               for l, block in enumerate(model.adapter.layers)]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def hf_suffix_pass(model, cache: KVCache, suffix: torch.Tensor, k: int):
    """The suffix pass as HF's modules ran it: the suffix, then k-1 greedy one-token steps, every
    row's query recorded; per-layer draft / question attention [layer, n]."""
    ad, n = model.adapter, cache.n_positions
    with hf_queries(model) as recorded:
        out = model.hf(input_ids=suffix[None], cache=cache.to_hf(), use_cache=True, logits_to_keep=1)
        prefilled, last, hf, drafted = KVCache.from_hf(out.cache), out.logits[0, -1], out.cache, []
        logits = last
        for _ in range(k):
            drafted.append(int(logits.argmax()))
            if len(drafted) == k:
                break
            step = model.hf(input_ids=torch.tensor([[drafted[-1]]]), cache=hf, use_cache=True)
            hf, logits = step.cache, step.logits[0, -1]
    queries = [torch.cat(rows) for rows in recorded]  # per layer [row, head, d_head]
    positions = torch.arange(n, n + queries[0].shape[0])
    n_suffix = len(suffix)
    question, draft = torch.empty(ad.n_layers, n), torch.empty(ad.n_layers, n)
    for l in range(ad.n_layers):
        probs = attention_rows(queries[l], hf.layers[l].keys[0], positions, ad.scaling, ad.windows[l])[..., :n]
        question[l] = probs[:, :n_suffix].mean((0, 1))
        draft[l] = probs[:, n_suffix - 1:].mean((0, 1))
    return prefilled, last, tuple(drafted), question, draft


def hf_cache_gradients(model, cache: KVCache, inputs: torch.Tensor, targets: list[int]):
    """CADENCE's loss and dL/dK, dL/dV as HF's teacher-forced forward and backward gave them."""
    keys = [cache.keys[l].clone().requires_grad_() for l in range(cache.n_layers)]
    values = [cache.values[l].clone().requires_grad_() for l in range(cache.n_layers)]
    for p in model.hf.parameters():
        p.requires_grad_(False)
    try:
        out = model.hf(input_ids=inputs[None], cache=hf_cache([(k[None], v[None]) for k, v in zip(keys, values)]),
                       use_cache=True, logits_to_keep=len(targets))
        logits = out.logits[0].float()
        loss = -torch.log_softmax(logits, -1).gather(1, torch.tensor(targets)[:, None]).sum()
        grads = torch.autograd.grad(loss, keys + values)
    finally:
        for p in model.hf.parameters():
            p.requires_grad_(True)
    return float(loss.detach()), torch.stack(grads[:cache.n_layers]), torch.stack(grads[cache.n_layers:])


# ----------------------------------------------------------------------------- without hooks: HF's values


def test_without_hooks_the_suffix_pass_is_hf_s(ctx):
    """The suffix rows bit for bit (the question attention, the relevance's inputs, the cache and
    logits the answer decodes on from), and the draft's too where the engine's one-row step is HF's
    decode step bit for bit (Llama, Qwen3); Gemma 3's rounds its sliding-window layers differently."""
    model = ctx.model
    prefilled, last, drafted, question, draft = hf_suffix_pass(model, ctx.spliced, ctx.suffix_ids, 2)
    got = suffix_pass(ctx, k=2)
    assert torch.equal(got.prefilled.keys, prefilled.keys) and torch.equal(got.prefilled.values, prefilled.values)
    assert torch.equal(got.last_logits, last)
    assert got.draft.draft_ids == drafted
    assert torch.equal(got.question.per_layer, question)
    if ctx.model.adapter.has_windows:
        torch.testing.assert_close(got.draft.per_layer, draft, rtol=1e-5, atol=1e-6 * float(draft.abs().max()))
    else:
        assert torch.equal(got.draft.per_layer, draft)
    assert got.answer(model) == ctx.generate(ctx.spliced)


def test_without_hooks_cadence_s_gradients_are_hf_s(ctx):
    """The same loss bit for bit (the engine's forward is HF's); the backward sums a grouped key's
    gradient in another order (HF repeats the kv heads, the engine's kernel takes them grouped):
    equal to a few float32 ulps."""
    model = ctx.model
    answer = list(ctx.generate(ctx.spliced).token_ids[:6])
    inputs = torch.cat([ctx.suffix_ids, torch.tensor(answer[:-1])])
    loss, grad_k, grad_v = hf_cache_gradients(model, ctx.spliced, inputs, answer)
    got = cache_gradients(model, ctx.spliced, ctx.suffix_ids, answer)
    assert got.loss == loss and got.answer_ids == tuple(answer)
    for ours, hf in ((got.keys, grad_k), (got.values, grad_v)):
        assert ours.shape == hf.shape and not ours.requires_grad
        torch.testing.assert_close(ours, hf, rtol=1e-5, atol=1e-5 * float(hf.abs().max()))


def test_a_signal_set_without_hooks_equals_one_given_an_empty_hook_map(llama_ctx):
    plain, empty = SignalSet(llama_ctx), SignalSet(llama_ctx, hooks={})
    assert empty.hooks is None
    for name in ("cadence_grad", "draft_attention", "question_attention", "cacheblend"):
        assert torch.equal(plain.token(name), empty.token(name)), name


# ----------------------------------------------------------------------------- hooks reach every signal


def test_a_head_ablated_through_diagnose_moves_cadence_grad_and_the_draft_attention(llama_ctx):
    """`diagnose(hooks=)` hands its hooks to the signals: CADENCE-Grad's scores and the draft
    attention in the Diagnosis are those computed under the ablation, and differ from the plain ones."""
    ctx = llama_ctx
    ablate = zero_head(1)
    common = dict(ctx=ctx, selectors=("cadence-grad", "bcr:chunk"), budgets=(0.2,), attribution=False, progress=False)
    plain = diagnose(ctx.model, ctx.example, **common)
    ablated = diagnose(ctx.model, ctx.example, hooks=ablate, **common)

    def table(d, name):
        t = d.tables["token_signals"]
        return torch.tensor(t[t["signal"] == name]["value"].to_numpy())

    direct = SignalSet(ctx, hooks=ablate)
    for name in ("cadence_grad", "draft_attention"):
        before, after = table(plain, name), table(ablated, name)
        assert not torch.allclose(before, after, rtol=1e-3), name  # the head moved the scores
        torch.testing.assert_close(after, direct.token(name).double())  # and they are the hooked signals'
        torch.testing.assert_close(before, SignalSet(ctx).token(name).double())


def test_each_pass_of_diagnose_names_itself_and_keeps_the_callers_ctx(llama_ctx):
    """A hook knows which of diagnose's passes calls it (`hook.pass_name`: the signal record being
    computed, or "cells" for the splice's and the repairs' pass), and its `hook.ctx` lives across all
    of them, the passes that add readers of their own (the draft's queries, the layer effects) included."""
    ctx, seen = llama_ctx, []

    def count(x, hook):
        hook.ctx["calls"] = hook.ctx.get("calls", 0) + 1
        seen.append((hook.pass_name, hook.ctx["calls"]))
    diagnose(ctx.model, ctx.example, ctx=ctx, selectors=("cadence-grad", "bcr:chunk"), budgets=(0.2,),
             attribution=False, progress=False, layer_effects=True, hooks={"blocks.0.attn.hook_rot_q": count})
    names = [name for name, _ in seen]
    # CADENCE-Grad's record, BCR's suffix pass and its draft, then the cells: no pass unnamed
    assert set(names) == {"saliency", "suffix", "cells"}, sorted(set(map(str, names)))
    assert [calls for _, calls in seen] == list(range(1, len(seen) + 1))  # one ctx over every pass
    assert names.index("cells") > max(i for i, name in enumerate(names) if name != "cells")  # cells last


def test_hooks_see_the_suffix_and_each_drafted_row(llama_ctx):
    ctx, seen = llama_ctx, []

    def record(q, hook):
        if hook.layer() == 0:
            seen.append(hook.positions[0].tolist())
    n, n_suffix = ctx.spliced.n_positions, len(ctx.suffix_ids)
    suffix_pass(ctx, k=3, hooks={f"blocks.{l}.attn.hook_rot_q": record for l in range(3)})
    assert seen == [list(range(n, n + n_suffix)), [n + n_suffix], [n + n_suffix + 1]]


def test_an_ablated_head_moves_every_signal_with_a_pass(llama_ctx):
    """The suffix pass (question attention, the answer), the saliency, the check layer and the
    patching all run under the hooks a SignalSet is given."""
    ctx = llama_ctx
    ablate = zero_head(0)
    plain, hooked = SignalSet(ctx), SignalSet(ctx, hooks=ablate)
    for name in ("question_attention", "query_relevance", "cacheblend", "relay", "cadence_grad"):
        assert not torch.allclose(plain.token(name), hooked.token(name), rtol=1e-3), name
    assert plain["suffix"].answer(ctx.model) == ctx.generate(ctx.spliced)
    assert hooked["suffix"].answer(ctx.model) == ctx.generate(ctx.spliced, hooks=ablate)
    pos, answer = ctx.reused_positions[-6:], list(plain["saliency"].answer_ids)  # the last passage: moved rows
    before = patch_effects(ctx, pos, answer)["delta_loss"].to_numpy()
    after = patch_effects(ctx, pos, answer, hooks=ablate)["delta_loss"].to_numpy()
    assert abs(before - after).max() > 0.05
    check = check_layer_signals(ctx, 1, ablate)  # layer 0's head feeds the check layer's rows
    assert not torch.allclose(check.value_deviation, plain["check_layer"].value_deviation)


def test_a_hook_at_the_final_points_reaches_cadence_s_loss(llama_ctx):
    ctx = llama_ctx
    answer = list(ctx.generate(ctx.spliced).token_ids[:4])
    plain = decision_saliency(ctx, answer_ids=answer)

    def boost(logits, hook):  # [1, row, vocab]: every predicting row, the answer's token raised
        assert hook.positions.shape[1] == len(answer)
        logits[0, torch.arange(len(answer)), torch.tensor(answer)] += 5.0
    hooked = decision_saliency(ctx, answer_ids=answer, hooks={"hook_unembed": boost})
    assert hooked.loss < plain.loss
    assert not torch.allclose(hooked.cadence_grad, plain.cadence_grad)


# ----------------------------------------------------------------------------- the engine's grad mode


def test_a_gradient_flows_through_the_repair_in_grad_mode(llama_ctx):
    """A cache whose tensors require grad runs the engine with autograd: the same values as the
    inference pass, gradients into every key a repaired row or the question reads, none into the
    rows the repair overwrites, and into a hook's own tensor (a head's scale)."""
    ctx = llama_ctx
    model, n = ctx.model, ctx.spliced.n_positions
    rows = ctx.reused_positions[::4]
    positions = torch.cat([rows, torch.arange(n, len(ctx.layout.ids))])  # the repair, then the question
    want_cache, want = recompute_rows(model, ctx.spliced, ctx.layout.ids, positions)
    keys = ctx.spliced.keys.clone().requires_grad_()
    values = ctx.spliced.values.clone().requires_grad_()
    scale = torch.ones((), requires_grad=True)

    def scaled(z, hook):
        return z * scale
    got_cache, got = recompute_rows(model, KVCache(keys, values), ctx.layout.ids, positions,
                                    hooks={"blocks.1.attn.hook_z": scaled})
    assert got.requires_grad and got_cache.keys.requires_grad
    assert torch.equal(got.detach(), want) and torch.equal(got_cache.keys.detach(), want_cache.keys)
    got[-1].square().sum().backward()
    assert scale.grad is not None and float(scale.grad) != 0.0
    grad_k = keys.grad.abs().sum((0, 1, 3))  # [pos]
    assert bool((grad_k[rows] == 0).all())  # overwritten before any row attends to them
    kept = torch.ones(n, dtype=torch.bool)
    kept[rows] = False
    assert bool((grad_k[kept] > 0).all())
    assert not torch.is_inference(got)
    _, plain = recompute_rows(model, ctx.spliced, ctx.layout.ids, positions)
    assert torch.is_inference(plain) and not plain.requires_grad  # no grad asked: inference mode
