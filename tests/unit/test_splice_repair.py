"""Splice, dense and repair against each other on tiny random models of every family."""

import pytest
import torch

import workbench as wb
from workbench.engine.layers import rotate
from conftest import shifted_splice, small_example, tiny_model
from workbench.kv import relative_error
from workbench.repair import check_positions, repair
from workbench.selectors.budget import attention_pairs, budget_rows


_CONTEXTS: dict[str, wb.Context] = {}


def context_for(model) -> wb.Context:
    """One context per tiny model, built once for the module."""
    if model.name not in _CONTEXTS:
        _CONTEXTS[model.name] = wb.build_context(model, small_example())
    return _CONTEXTS[model.name]


def passage_rows(ctx, first: int = 0) -> torch.Tensor:
    return torch.cat([torch.arange(s.start, s.end) for s in ctx.layout.passages[first:]])


def test_layer0_of_splice_equals_dense(tiny):
    err = context_for(tiny).check_splice()
    assert err["v"] == 0.0  # values are copied, not rotated: bit-exact
    assert err["k"] <= 1e-4


def long_example(n_chars: int) -> wb.Example:
    """Four passages of about n_chars bytes in all (the byte tokenizer: one token per byte)."""
    filler = " Records about this are kept in a small local archive."
    base = small_example(4)
    passages = [p + filler * max(0, (n_chars // 4 - len(p)) // len(filler)) for p in base.passages]
    return wb.Example("long", passages, base.question, base.gold)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_layer0_check_passes_in_every_dtype_up_to_the_position_limit(family, dtype):
    """The tolerance follows the dtype, the largest position and the key magnitude (a fixed 1e-4
    failed bf16, fp16 and long fp32 contexts); the exact re-rotation is bit-exact at layer 0."""
    model = tiny_model(family, dtype=dtype)
    ctx = wb.build_context(model, long_example(1900))
    assert ctx.layout.suffix_start > 1800  # positions close to the model's 2048
    err = ctx.check_splice()
    assert err["v"] == 0.0
    exact = wb.build_context(model, long_example(1900), rerotation="exact")
    assert exact.layer0_error() == {"k": 0.0, "v": 0.0} and exact.rerotation == "exact"
    floor = ctx.rope_floor  # [layer]: the delta rotation's rounding, the same in both modes
    assert floor.shape == (model.adapter.n_layers,) and torch.equal(floor, exact.rope_floor)
    assert float(floor.max()) < (0.02 if dtype != torch.float32 else 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_layer0_check_holds_at_a_real_hidden_width(dtype):
    """At width 2048 (Llama-3.2-1B's) the prefix, prefilled alone in a few rows, may take another
    matrix-product kernel than the whole context: its layer-0 values then differ by a few fp32
    ulps (2e-5 here on the CPU, over the storage-only bound of 1.7e-5). The tolerance counts the
    sum over the width; a row one position off still fails it."""
    model = tiny_model("llama", dtype=dtype, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                       head_dim=64, num_hidden_layers=1)
    ctx = wb.build_context(model, small_example())
    ctx.check_splice()
    with pytest.raises(wb.WorkbenchError, match="splice self-check failed at layer 0"):
        shifted_splice(ctx).check_splice()


def test_the_layer0_check_catches_a_splice_off_by_one_position(tiny_llama):
    ctx = wb.build_context(tiny_llama, small_example())
    with pytest.raises(wb.WorkbenchError, match="splice self-check failed at layer 0"):
        shifted_splice(ctx).check_splice()


def test_splice_drifts_above_layer0(tiny):
    ctx = context_for(tiny)
    rel = relative_error(ctx.spliced, ctx.dense)["v"]
    assert rel[0] < 1e-6
    assert (rel[1:] > 1e-3).all(), f"no drift above layer 0: {rel.tolist()}"


def test_repair_of_every_reused_row_reproduces_dense(tiny):
    ctx = context_for(tiny)
    fixed = ctx.repair(ctx.reused_positions)
    rel = relative_error(fixed, ctx.dense)
    assert rel["k"].max() <= 1e-4 and rel["v"].max() <= 1e-4, rel
    assert ctx.generate(fixed, 8).token_ids == ctx.generate(ctx.dense, 8).token_ids


def test_repair_of_nothing_returns_the_splice(tiny):
    ctx = context_for(tiny)
    before = ctx.spliced.clone()
    same = ctx.repair([])
    assert torch.equal(same.keys, ctx.spliced.keys) and torch.equal(same.values, ctx.spliced.values)
    assert same.keys is not ctx.spliced.keys  # a new cache, never the input itself
    assert torch.equal(before.keys, ctx.spliced.keys)


def test_first_passage_is_already_exact_and_repairing_the_rest_gives_dense(tiny):
    ctx = context_for(tiny)
    first = ctx.layout.passages[0]
    rows = slice(0, first.end)
    assert (ctx.spliced.keys[:, :, rows] - ctx.dense.keys[:, :, rows]).abs().max() <= 1e-4
    assert (ctx.spliced.values[:, :, rows] - ctx.dense.values[:, :, rows]).abs().max() <= 1e-4
    rel = relative_error(ctx.repair(passage_rows(ctx, first=1)), ctx.dense)
    assert rel["k"].max() <= 1e-4 and rel["v"].max() <= 1e-4


def test_repair_never_mutates_its_input(tiny_llama):
    ctx = context_for(tiny_llama)
    keys, values = ctx.spliced.keys.clone(), ctx.spliced.values.clone()
    ctx.repair(ctx.reused_positions[::3])
    ctx.answer(ctx.spliced, max_new_tokens=4)
    assert torch.equal(keys, ctx.spliced.keys) and torch.equal(values, ctx.spliced.values)


def test_scattered_rows_use_an_absolute_causal_mask(tiny_llama):
    """Rows of passage 2 depend only on the exact rows before them: repaired, they equal dense,
    even when rows of passage 3 are repaired in the same pass. A bottom-right mask would let
    them attend to passage 3's keys and fail this."""
    ctx = context_for(tiny_llama)
    p2, p3 = ctx.layout.passages[1], ctx.layout.passages[2]
    scattered = torch.cat([torch.arange(p2.start, p2.end), torch.arange(p3.start, p3.end, 4)])
    fixed = ctx.repair(scattered)
    rows = slice(p2.start, p2.end)
    assert (fixed.values[:, :, rows] - ctx.dense.values[:, :, rows]).abs().max() <= 1e-4
    assert (fixed.keys[:, :, rows] - ctx.dense.keys[:, :, rows]).abs().max() <= 1e-4
    untouched = torch.arange(p3.start + 1, p3.end, 4)
    assert torch.equal(fixed.values[:, :, untouched], ctx.spliced.values[:, :, untouched])


def test_repair_is_independent_of_the_order_positions_are_given_in(tiny_llama):
    ctx = context_for(tiny_llama)
    rows = ctx.reused_positions[::5]
    a = ctx.repair(rows)
    b = ctx.repair(rows.flip(0))
    assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_partial_repair_moves_toward_dense(tiny_llama):
    ctx = context_for(tiny_llama)
    spliced_err = relative_error(ctx.spliced, ctx.dense)["v"][1:].mean()
    half = relative_error(ctx.repair(passage_rows(ctx, 1)[: ctx.n_reused // 3]), ctx.dense)["v"][1:].mean()
    assert half < spliced_err


def test_a_full_context_mask_repairs_bit_identically(tiny):
    """RelaxKV's kernel with every key in the context is today's repair, bit for bit."""
    ctx = context_for(tiny)
    rows = ctx.reused_positions[::3]
    plain = ctx.repair(rows)
    full = repair(tiny, ctx.spliced, ctx.layout.ids, rows, context=torch.ones(ctx.layout.suffix_start, dtype=torch.bool))
    assert torch.equal(plain.keys, full.keys) and torch.equal(plain.values, full.values)


def test_a_restricted_row_reads_only_the_keys_in_its_context(tiny):
    """A repaired row is blind to a key outside its context (changing that key changes nothing) and
    reads a key inside it (changing that one moves the row), in every family and window."""
    ctx = context_for(tiny)
    p2 = ctx.layout.passages[1]
    row = torch.tensor([p2.start + 6])
    inside, outside = p2.start + 5, p2.start + 4
    context = torch.zeros(ctx.layout.suffix_start, dtype=torch.bool)
    context[: ctx.layout.prefix.end] = True
    context[inside] = True
    base = repair(tiny, ctx.spliced, ctx.layout.ids, row, context=context)
    for changed, moves in ((outside, False), (inside, True)):
        poked = ctx.spliced.clone()
        poked.values[:, :, changed] += 1.0
        fixed = repair(tiny, poked, ctx.layout.ids, row, context=context)
        same = torch.equal(fixed.values[1:, :, row], base.values[1:, :, row])
        assert same != moves, (changed, moves)
    unrestricted = ctx.repair(row)
    assert not torch.equal(unrestricted.values[1:, :, row], base.values[1:, :, row])


def test_attention_pairs_count_the_visible_keys_and_what_a_context_saves(tiny_llama):
    ctx = context_for(tiny_llama)
    rows, n = torch.tensor([3, 10]), 12
    layers = tiny_llama.adapter.n_layers
    assert attention_pairs(tiny_llama, rows, n) == (4 + 11) * layers  # causal: keys 0..p
    context = torch.zeros(n, dtype=torch.bool)
    context[:2] = True
    assert attention_pairs(tiny_llama, rows, n, context) == (3 + 3) * layers  # keys 0, 1 and its own


def test_a_bad_context_mask_is_refused_before_any_work(tiny_llama):
    ctx = context_for(tiny_llama)
    for bad in (torch.ones(5), torch.zeros(0, dtype=torch.bool), [True, False]):
        with pytest.raises(wb.WorkbenchError, match="context"):
            repair(tiny_llama, ctx.spliced, ctx.layout.ids, [3], context=bad)


@pytest.mark.parametrize("bad, match", [
    ([0, 0], "duplicates"), ([-1], "out of range"), ([10_000], "out of range"),
    ([0.5], "integers"), ([[1, 2]], "1-D"),
])
def test_bad_positions_are_refused_before_any_work(bad, match):
    with pytest.raises(wb.WorkbenchError, match=match):
        check_positions(bad, 100)


def test_budget_rows():
    assert budget_rows(0, 10) == 0 and budget_rows(1.0, 10) == 10
    assert budget_rows(0.2, 10) == 2 and budget_rows(0.21, 10) == 3 and budget_rows(0.1, 7) == 1
    for bad in (-0.1, 1.5, "0.2"):
        with pytest.raises(wb.WorkbenchError, match="budget"):
            budget_rows(bad, 10)


def test_delta_rotation_composes(tiny):
    """R(d) R(p) k == R(p + d) k, which is what lets a cached key move to a new position."""
    ad = tiny.adapter
    k = torch.randn(5, ad.n_kv_heads, ad.head_dim)
    p = torch.arange(3, 8)
    moved = ad.rerotate(rotate(ad, k, p, 0).transpose(0, 1), 17, 0).transpose(0, 1)
    assert torch.allclose(moved, rotate(ad, k, p + 17, 0), atol=1e-5)


def test_scaled_rope_variants_splice_exactly():
    """yarn scales cos/sin by an attention factor; the delta rotation must divide it out."""
    model = tiny_model("llama", rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128})
    assert model.adapter.rotary.attention_scaling != 1.0
    ctx = wb.build_context(model, small_example())
    ctx.check_splice()
    rel = relative_error(ctx.repair(ctx.reused_positions), ctx.dense)
    assert rel["k"].max() <= 1e-4


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 0.05), (torch.float16, 0.01)])
def test_half_precision_paths_run_and_agree_loosely(dtype, tol):
    model = tiny_model("qwen3", dtype=dtype)
    ctx = wb.build_context(model, small_example())
    assert ctx.spliced.keys.dtype == dtype
    ctx.check_splice()
    rel = relative_error(ctx.repair(ctx.reused_positions), ctx.dense)
    assert rel["k"].max() <= tol and rel["v"].max() <= tol, rel


def test_teacher_forced_agrees_with_greedy(tiny_llama):
    ctx = context_for(tiny_llama)
    answer = ctx.generate(ctx.dense, 6)
    tf = ctx.teacher_forced(ctx.dense, answer.token_ids)
    assert tf.agrees and tf.n_agree == len(answer.token_ids) and tf.logprob <= 0
    wrong = list(answer.token_ids)
    wrong[1] = (wrong[1] + 1) % 256
    tf_wrong = ctx.teacher_forced(ctx.dense, wrong)
    assert not tf_wrong.agrees and tf_wrong.n_agree == 1 and tf_wrong.logprob < tf.logprob
