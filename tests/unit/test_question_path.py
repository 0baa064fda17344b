"""The question over a cache runs through the engine (`decode.question_pass`): with no hooks
`ctx.generate` / `ctx.answer` / `ctx.teacher_forced` equal HF's forward bit for bit (HF's modules
kept here as the oracle only: the code they replaced); with hooks, the hooks reach the question,
its decode steps and the teacher-forced rows."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.decode import TeacherForced, continue_greedy, forced_score

FAMILIES = ["llama", "qwen3", "gemma3_text"]


@pytest.fixture(scope="module", params=FAMILIES)
def ctx(request) -> wb.Context:
    """The small example's context on the tiny model of each family (built once per family)."""
    return wb.build_context(tiny_model(request.param), small_example())


@torch.inference_mode()
def hf_greedy_answer(model, cache, suffix_ids, max_new_tokens=24):
    """The HF path `greedy_answer` took before (the oracle): HF's suffix forward, HF's steps."""
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True,
                   logits_to_keep=1)
    return continue_greedy(model, out.logits[0, -1], out.cache, max_new_tokens, engine=False), out.logits[0, -1]


def hf_teacher_forced(model, cache, suffix_ids, answer_ids) -> tuple[TeacherForced, torch.Tensor]:
    """The HF path `teacher_forced` took before (the oracle): one forward of suffix + answer."""
    answer = torch.as_tensor(list(answer_ids), dtype=torch.long)
    inputs = torch.cat([suffix_ids.cpu(), answer[:-1]]).to(model.device)
    with torch.inference_mode():
        out = model.hf(input_ids=inputs[None], cache=cache.to_hf(), use_cache=True)
    logits = out.logits[0, len(suffix_ids) - 1:]  # [answer, vocab]
    return forced_score(logits, answer), logits


def assert_same_as_hf(model, ctx, max_new_tokens: int = 24) -> None:
    """generate, answer and teacher_forced over dense, the splice and a repair equal the HF oracle."""
    from workbench.decode import question_logits, question_pass

    fixed = ctx.repair(ctx.reused_positions[::3])
    for cache in (ctx.dense, ctx.spliced, fixed):
        want, want_logits = hf_greedy_answer(model, cache, ctx.suffix_ids, max_new_tokens)
        got = ctx.generate(cache, max_new_tokens)
        assert got.token_ids == want.token_ids and got == want
        assert ctx.answer(cache, max_new_tokens) == want.text
        prefilled, h = question_pass(model, cache, ctx.suffix_ids)  # the first answer token's logits
        got_logits = question_logits(model, h[-1:], torch.tensor([prefilled.n_positions - 1]), None)[0]
        assert torch.equal(got_logits, want_logits)
        forced = list(want.token_ids) or [1]
        tf_want, tf_logits = hf_teacher_forced(model, cache, ctx.suffix_ids, forced)
        tf = ctx.teacher_forced(cache, forced)
        assert tf == tf_want  # every log-probability, bit for bit
        n = cache.n_positions
        inputs = torch.cat([ctx.suffix_ids, torch.tensor(forced[:-1])])
        _, h = question_pass(model, cache, inputs)
        all_logits = question_logits(model, h, torch.arange(n, n + len(inputs)), None)
        assert torch.equal(all_logits[len(ctx.suffix_ids) - 1:], tf_logits)


def test_the_question_through_the_engine_equals_hf_bit_for_bit(ctx):
    assert_same_as_hf(ctx.model, ctx)


@pytest.mark.slow
def test_the_question_through_the_engine_equals_hf_bit_for_bit_on_smollm2(smol):
    assert_same_as_hf(smol, wb.build_context(smol, small_example()), max_new_tokens=8)


def test_hooks_reach_the_question_its_decode_and_teacher_forcing(ctx):
    seen: list[tuple] = []

    def record(x, hook):
        seen.append((hook.name, tuple(hook.positions.shape), int(hook.positions.max())))

    names = ["blocks.1.attn.hook_z", "hook_unembed"]
    plain = ctx.generate(ctx.dense, max_new_tokens=4)
    assert ctx.generate(ctx.dense, max_new_tokens=4, hooks={n: record for n in names}) == plain
    n, k = ctx.dense.n_positions, len(ctx.suffix_ids)
    z = [s for s in seen if s[0] == names[0]]
    assert z[0] == (names[0], (1, k), n + k - 1)  # the question's rows, one cell
    steps = len(plain.token_ids) - (0 if plain.stopped else 1)
    assert len(z) == 1 + steps and all(s[1] == (1, 1) for s in z[1:])  # then one row per decode step
    assert [s for s in seen if s[0] == "hook_unembed"][0] == ("hook_unembed", (1, 1), n + k - 1)  # its last row

    seen.clear()
    forced = list(plain.token_ids)
    assert ctx.teacher_forced(ctx.dense, forced, hooks={names[1]: record}) == ctx.teacher_forced(ctx.dense, forced)
    assert seen == [("hook_unembed", (1, k + len(forced) - 1), n + k + len(forced) - 2)]  # every row


def test_an_ablated_head_moves_the_answer_and_its_score(ctx):
    model = ctx.model

    def zero_heads(z, hook):  # z: [cell, row, head, d_head]
        z[:] = 0

    hooks = {f"blocks.{l}.attn.hook_z": zero_heads for l in range(model.adapter.n_layers)}
    plain = ctx.generate(ctx.dense, max_new_tokens=6)
    forced = list(plain.token_ids)
    tf, ablated = ctx.teacher_forced(ctx.dense, forced), ctx.teacher_forced(ctx.dense, forced, hooks=hooks)
    assert ablated.logprob != tf.logprob
    assert ctx.generate(ctx.dense, max_new_tokens=6, hooks=hooks) != plain
    hf = hf_greedy_answer(model, ctx.dense, ctx.suffix_ids, 6)[0]  # the HF oracle never sees the hooks
    assert hf == plain


def test_bad_hooks_on_the_question_are_one_line_errors_before_any_work(tiny_llama):
    ctx = wb.build_context(tiny_llama, small_example())
    with pytest.raises(wb.WorkbenchError, match="hook"):
        ctx.generate(ctx.dense, hooks={"blocks.99.attn.hook_z": lambda x, hook: None})
    with pytest.raises(wb.WorkbenchError, match="hook"):
        ctx.teacher_forced(ctx.dense, [1, 2], hooks={"no_such_point": lambda x, hook: None})
