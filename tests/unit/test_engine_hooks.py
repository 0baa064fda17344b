"""Hook points on the engine's passes (TransformerLens names): the serial repair, the batched
cells and their decode steps, on tiny 4-layer models of every family."""

import pytest
import torch

import workbench as wb
from tests.conftest import FAMILIES, small_example, tiny_model
from workbench.diagnosis import diagnose
from workbench.engine.answers import answer_cells
from workbench.engine.hooks import LAYER_HOOKS, HookPoint, Hooks, caching_hooks, compose, hook_names
from workbench.family import visible_keys
from workbench.repair import recompute_rows

LAYER = 3  # the blocks.3


@pytest.fixture(scope="module", params=FAMILIES)
def ctx(request):
    extra = {"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]} \
        if request.param == "gemma3_text" else {}
    model = tiny_model(request.param, num_hidden_layers=4, **extra)
    return wb.build_context(model, small_example())


def _identity(x, hook):
    return x


def _every_name_but_pattern(adapter) -> dict:
    """Every point but those that round differently: the two that write the softmax out
    (hook_attn_scores, hook_pattern) and the norms' hook_scale (a division, not rsqrt)."""
    return {name: _identity for name in hook_names(adapter)
            if not name.endswith(("hook_pattern", "hook_attn_scores", "hook_scale"))}


def _check_pattern(probs: torch.Tensor, hook, window) -> None:
    """probs [cell, head, row, key]: each real row sums to 1 over the keys it may see, 0 elsewhere."""
    q, k = hook.positions, hook.key_positions  # [cell, row], [cell, key]
    assert probs.shape[0] == q.shape[0] and probs.shape[2] == q.shape[1] and probs.shape[3] == k.shape[1]
    real = q >= 0  # [cell, row]
    sums = probs.sum(-1)  # [cell, head, row]
    assert torch.allclose(sums.permute(0, 2, 1)[real], torch.ones(()), atol=1e-5)
    hidden = ~visible_keys(q, k, window) | (k < 0)[:, None, :]  # [cell, row, key]: never visible
    never = (real[..., None] & hidden)[:, None]  # [cell, 1, row, key]
    assert float(probs.masked_fill(~never, 0).abs().max()) == 0.0 and float(probs.amax()) > 0


def test_a_pattern_hook_of_a_repaired_cell_sees_rows_summing_to_one(ctx):
    rows = ctx.reused_positions[::3]
    window = ctx.model.adapter.windows[LAYER]
    seen = []

    def look(probs, hook):
        assert hook.name == f"blocks.{LAYER}.attn.hook_pattern" and hook.layer() == LAYER
        _check_pattern(probs, hook, window)
        seen.append(probs.shape)

    ctx.repair(rows, hooks={f"blocks.{LAYER}.attn.hook_pattern": look})  # the serial repair: one cell
    assert seen == [(1, ctx.model.adapter.n_heads, len(rows), ctx.layout.suffix_start)]
    wrong = [1, 2, 3]  # a reference every cell leaves at once: the decode steps run hooked too
    answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [rows, rows[:4], torch.empty(0, dtype=torch.long)],
                 ctx.suffix_ids, wrong, max_new_tokens=3, hooks={f"blocks.{LAYER}.attn.hook_pattern": look})
    assert len(seen) >= 3 and seen[1][0] == 3 and seen[2][2] == 1  # the batched pass, then a decode step


def test_an_identity_hook_leaves_answers_and_kv_bit_identical(ctx):
    model, rows = ctx.model, ctx.reused_positions[1::2]
    hooks = _every_name_but_pattern(model.adapter)
    plain, hooked = ctx.repair(rows), ctx.repair(rows, hooks=hooks)
    assert torch.equal(plain.keys, hooked.keys) and torch.equal(plain.values, hooked.values)
    none = ctx.repair(rows, hooks={name: lambda x, hook: None for name in hooks})  # None keeps the tensor
    assert torch.equal(plain.keys, none.keys) and torch.equal(plain.values, none.values)

    row_sets, wrong = [rows, rows[:5]], [7, 8, 9]
    args = (model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, wrong, 4)
    a, b = answer_cells(*args), answer_cells(*args, hooks=hooks)
    assert sum(c.decode_steps for c in a) > 0  # the decode steps ran, hooked
    for x, y in zip(a, b):
        assert x.answer == y.answer and x.reference_token_logprobs == y.reference_token_logprobs
        assert torch.equal(x.repaired.keys, y.repaired.keys) and torch.equal(x.repaired.values, y.repaired.values)
    # a pattern hook writes the softmax out: the fused kernel's result up to rounding
    pattern = ctx.repair(rows, hooks={f"blocks.{l}.attn.hook_pattern": _identity for l in range(4)})
    assert torch.allclose(pattern.keys, plain.keys, atol=1e-5) and torch.allclose(pattern.values, plain.values, atol=1e-5)


def _hf_logprob(model, ids: torch.Tensor, answer: list[int], head: int | None) -> float:
    """log p(answer | ids) through HF, with query head `head` of layer LAYER zeroed at o_proj's input."""
    ad = model.adapter
    lo, hi = (head or 0) * ad.head_dim, ((head or 0) + 1) * ad.head_dim

    def zero(module, args):
        x = args[0].clone()
        x[..., lo:hi] = 0
        return (x,)

    handle = ad.layers[LAYER].self_attn.o_proj.register_forward_pre_hook(zero) if head is not None else None
    try:
        with torch.inference_mode():
            inputs = torch.cat([ids, torch.tensor(answer[:-1], dtype=torch.long)])
            logits = model.hf(input_ids=inputs[None]).logits[0, len(ids) - 1:].float()
    finally:
        if handle is not None:
            handle.remove()
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(answer)[:, None]).sum())


def test_zeroing_a_head_of_hook_z_moves_the_answer_as_the_same_edit_through_hf(ctx):
    model, head = ctx.model, 1
    n = ctx.layout.suffix_start
    answer = [int(t) for t in ctx.generate(ctx.dense, 4).token_ids] or [5]

    def zero_head(z, hook):  # [cell, row, head, d_head]
        z[:, :, head] = 0

    every_row = torch.arange(n)  # a full repair: every row runs through the hooked pass
    hooked, plain = (answer_cells(model, ctx.spliced, ctx.layout.ids, [every_row], ctx.suffix_ids, answer, 4,
                                  hooks=h)[0].reference_logprob
                     for h in ({f"blocks.{LAYER}.attn.hook_z": zero_head}, None))
    keep = torch.ones(model.adapter.n_heads, 1)
    keep[head] = 0
    replaced = answer_cells(model, ctx.spliced, ctx.layout.ids, [every_row], ctx.suffix_ids, answer, 4,
                            hooks={f"blocks.{LAYER}.attn.hook_z": lambda z, hook: z * keep})[0].reference_logprob
    assert replaced == hooked  # a returned replacement is the same edit as one made in place
    ids = torch.cat([ctx.layout.ids[:n], ctx.suffix_ids])
    want_hooked, want_plain = _hf_logprob(model, ids, answer, head), _hf_logprob(model, ids, answer, None)
    assert abs(want_hooked - want_plain) > 1e-2  # the edit matters
    assert hooked == pytest.approx(want_hooked, abs=1e-4) and plain == pytest.approx(want_plain, abs=1e-4)


def test_hook_points_name_each_cell_among_the_callers_in_groups_and_decode_steps(ctx):
    n, n_suffix = ctx.layout.suffix_start, len(ctx.suffix_ids)
    row_sets = [ctx.reused_positions[::3], torch.empty(0, dtype=torch.long), ctx.reused_positions[:4]]
    seen = []
    answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, [1, 2, 3], 3, max_bytes=1,
                 hooks={"hook_embed": lambda x, hook: seen.append((hook.cells.tolist(), hook.positions))})
    groups = [(cells, pos) for cells, pos in seen if pos.shape[1] > 1]  # the batched pass: a group per cell here
    assert sorted(c for cells, _ in groups for c in cells) == [0, 1, 2]
    for (c,), pos in groups:  # a cell's rows: its repaired rows, the suffix, the teacher-forced answer
        assert pos[0, :len(row_sets[c])].tolist() == row_sets[c].tolist()
        assert pos[0, len(row_sets[c]):].tolist() == list(range(n, n + n_suffix + 2))
    steps = [(cells, pos) for cells, pos in seen if pos.shape[1] == 1]
    assert steps and all(set(cells) <= {0, 1, 2} and len(cells) == pos.shape[0] for cells, pos in steps)
    assert set(steps[0][1][:, 0].tolist()) == {n + n_suffix}  # the first step: the row after the suffix
    serial = []
    ctx.repair(row_sets[0], hooks={"hook_embed": lambda x, hook: serial.append(hook.cells.tolist())})
    assert serial == [[0]]  # a serial repair is one cell


def test_compose_runs_the_earlier_maps_hooks_first():
    order = []
    a = {"hook_embed": lambda x, hook: order.append("a") or x + 1}
    b = {"hook_embed": [lambda x, hook: order.append("b") or x * 2], "blocks.0.hook_resid_post": _identity}
    hooks = Hooks(compose(a, None, Hooks(b, 1)), 1)
    out = hooks.call("hook_embed", torch.zeros(1), HookPoint("hook_embed", None, torch.zeros(1, 1)))
    assert order == ["a", "b"] and out.tolist() == [2.0] and set(hooks.fns) == {"hook_embed", "blocks.0.hook_resid_post"}


def test_run_with_cache_returns_every_name_of_every_layer(ctx):
    rows = ctx.reused_positions[:10]
    n_q = len(ctx.suffix_ids)
    logits, acts = ctx.run_with_cache(rows)
    ad = ctx.model.adapter
    assert set(acts.keys()) == set(hook_names(ad))  # the question computes logits: every point fires
    assert logits.shape == (1, n_q, ctx.model.config.vocab_size)
    assert acts["hook_embed"].shape == (1, 10 + n_q, ctx.model.config.hidden_size)  # the repair's rows, then the question's
    assert acts[f"blocks.{LAYER}.attn.hook_rot_k"].shape == (1, 10 + n_q, ad.n_kv_heads, ad.head_dim)
    assert acts[f"blocks.{LAYER}.attn.hook_z"].shape == (1, 10 + n_q, ad.n_heads, ad.head_dim)
    n = ctx.layout.suffix_start + n_q
    assert acts[f"blocks.{LAYER}.attn.hook_pattern"].shape == (1, ad.n_heads, 10 + n_q, n)  # by absolute key position
    assert acts["hook_unembed"].shape == (1, 10 + n_q, ctx.model.config.vocab_size)  # every row of the pass
    # the cached keys and values are the repaired cache's rows
    fixed = ctx.repair(rows)
    assert torch.allclose(acts[f"blocks.{LAYER}.attn.hook_rot_k"][0, :10].transpose(0, 1), fixed.keys[LAYER][:, rows],
                          atol=1e-5)
    _, some = ctx.run_with_cache(rows, names_filter="blocks.0.hook_resid_post")
    assert list(some.keys()) == ["blocks.0.hook_resid_post"]


def test_bad_hooks_fail_with_a_clear_error(ctx):
    with pytest.raises(wb.WorkbenchError, match="unknown hook points"):
        ctx.repair(ctx.reused_positions[:3], hooks={"blocks.9.attn.hook_z": _identity})
    with pytest.raises(wb.WorkbenchError, match="returned a tensor"):
        ctx.repair(ctx.reused_positions[:3], hooks={"blocks.0.hook_resid_pre": lambda x, hook: x[:, :1]})


def test_diagnose_passes_hooks_to_every_cell():
    """The plumbing, on one family (the engine's passes are family-blind; the tests above cover each)."""
    ctx = wb.build_context(tiny_model("llama", num_hidden_layers=4), small_example())
    seen = []
    d = diagnose(ctx.model, ctx.example, ctx=ctx, selectors=("random",), budgets=(0.5,), progress=False,
                 hooks={"hook_embed": lambda x, hook: seen.append(hook.positions.shape[0])})
    cells = {tuple(p) for p in d.selections["positions"]} | {()}  # the repairs' row sets and the splice's
    assert seen[0] == len(cells) > 2  # the first pass holds every cell


@pytest.mark.parametrize("stop", [1, LAYER])
def test_stop_after_qkv_ends_the_last_layer_at_its_rotated_keys(ctx, stop):
    """`stop_after_qkv`: the last layer fires its hook points up to hook_rot_k and nothing after;
    the layers below run whole, and what they fire and return is the full pass's, bit for bit."""
    ad, rows = ctx.model.adapter, ctx.reused_positions[:10]
    every = hook_names(ad)
    full_acts, cut_acts = {}, {}
    full, h_full = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=stop + 1,
                                  hooks=caching_hooks(every, full_acts))
    cut, h_cut = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=stop + 1,
                                hooks=caching_hooks(every, cut_acts), stop_after_qkv=True)
    last = [f"blocks.{stop}.{name}" for name in LAYER_HOOKS]
    fired = last[:LAYER_HOOKS.index("attn.hook_rot_k") + 1]  # resid_pre, q, k, v, rot_q, rot_k
    assert list(cut_acts) == [n for n in full_acts if n not in last or n in fired]  # the same order, cut short
    assert all(torch.equal(cut_acts[n], full_acts[n]) for n in cut_acts)
    assert torch.equal(h_cut[None], full_acts[f"blocks.{stop}.hook_resid_pre"])  # the rows entering layer stop
    assert torch.equal(cut.keys[:stop], full.keys[:stop]) and torch.equal(cut.values[:stop], full.values[:stop])
    assert torch.equal(cut.keys[stop], ctx.spliced.keys[stop])  # the stopped layer never attended: rows kept
    _, bare = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=stop + 1, stop_after_qkv=True)
    _, below = recompute_rows(ctx.model, ctx.spliced, ctx.layout.ids, rows, n_layers=stop)
    assert torch.equal(bare, below)  # without hooks (no hook_pattern below) it returns the rows entering layer stop
