"""The question over a cache runs through the engine (`decode.question_pass`) and its answer
through the engine's decode steps: with no hooks the question's rows and `ctx.teacher_forced`
equal HF's forward bit for bit and `ctx.generate` / `ctx.answer` give HF's tokens (HF's modules
kept here as the oracle only: the code they replaced; the engine's one-row step rounds its
softmax otherwise, about 1e-5 of the tiny models' logits); with hooks, the hooks reach the
question, its decode steps and the teacher-forced rows. No answering pass (`greedy_answer`,
`greedy_answers`, `continue_greedy`, `draft_confidence`, the suffix pass's answer) calls HF's forward."""

import pytest
import torch

import workbench as wb
from conftest import hf_forward_calls, small_example, tiny_model
from tests.hf_oracle import hf_continue_greedy
from workbench.decode import (
    Answer, TeacherForced, continue_greedy, draft_confidence, forced_score, greedy_answer, greedy_answers,
    question_logits, question_pass,
)
from workbench.signals.attention import suffix_pass

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
    return hf_continue_greedy(model, out.logits[0, -1], out.cache, max_new_tokens), out.logits[0, -1]


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


def _caches(ctx) -> list:
    """The splice, a shorter cache and dense: two lengths, so each cache's suffix sits at its own positions."""
    return [ctx.spliced, ctx.dense.slice(0, ctx.spliced.n_positions - 3), ctx.dense]


def test_no_answering_pass_calls_hf_s_forward(ctx):
    """HF's modules load the model and are the tests' oracle; every answer steps the engine."""
    model = ctx.model
    with hf_forward_calls(model) as calls:
        record = suffix_pass(ctx, ctx.spliced, k=2)
        answers = [ctx.generate(ctx.spliced, 6), record.answer(model, 6),
                   continue_greedy(model, record.last_logits, record.prefilled, 6),
                   *greedy_answers(model, _caches(ctx), ctx.suffix_ids, 6)]
        confidence = draft_confidence(model, ctx.spliced, ctx.suffix_ids, 2)
    assert calls == []
    assert all(a.token_ids for a in answers) and 0 < confidence <= 1


def test_greedy_answers_over_caches_of_two_lengths_equal_one_at_a_time(ctx):
    caches = _caches(ctx)
    want = [greedy_answer(ctx.model, c, ctx.suffix_ids, max_new_tokens=6) for c in caches]
    assert greedy_answers(ctx.model, caches, ctx.suffix_ids, max_new_tokens=6) == want
    assert greedy_answers(ctx.model, caches, ctx.suffix_ids, max_new_tokens=6, max_bytes=1) == want  # one a group
    assert greedy_answers(ctx.model, caches, ctx.suffix_ids, max_new_tokens=0) == [Answer("", "", (), False)] * 3


def test_hooks_reach_every_pass_of_greedy_answers(ctx):
    """The suffix over each cache (its cell, at its own positions) and every decode step see the
    hooks; an ablated head gives each cache the answer `greedy_answer` gives it under the same hooks."""
    model, caches, k = ctx.model, _caches(ctx), len(ctx.suffix_ids)
    seen = []

    def record(x, hook):  # x: [cell, row, head, d_head]
        seen.append((hook.cells.tolist(), hook.positions.tolist()))

    plain = greedy_answers(model, caches, ctx.suffix_ids, 6)
    assert greedy_answers(model, caches, ctx.suffix_ids, 6, hooks={"blocks.1.attn.hook_z": record}) == plain
    lengths = [c.n_positions for c in caches]
    rows = {c: set() for c in range(len(caches))}
    for cells, positions in seen:
        for c, p in zip(cells, positions):
            rows[c] |= {q for q in p if q >= 0}
    for c, (n, answer) in enumerate(zip(lengths, plain)):
        steps = len(answer.token_ids) - (0 if answer.stopped else 1)  # rows fed back to the model
        assert rows[c] == set(range(n, n + k + steps)), c  # its suffix, then one row a step

    def zero_heads(z, hook):
        z[:, :, 0] = 0

    hooks = {f"blocks.{l}.attn.hook_z": zero_heads for l in range(model.adapter.n_layers)}
    ablated = greedy_answers(model, caches, ctx.suffix_ids, 6, hooks=hooks)
    assert ablated == [greedy_answer(model, c, ctx.suffix_ids, 6, hooks=hooks) for c in caches]
    assert ablated != plain


def test_hooks_reach_the_decode_steps_of_continue_greedy_and_the_draft_confidence(ctx):
    model = ctx.model
    n, k = ctx.spliced.n_positions, len(ctx.suffix_ids)
    prefilled, h = question_pass(model, ctx.spliced, ctx.suffix_ids)
    logits = question_logits(model, h[-1:], torch.tensor([n + k - 1]), None)[0]
    seen = []

    def record(x, hook):
        seen.append(hook.positions.tolist())

    plain = continue_greedy(model, logits, prefilled, 6)
    assert continue_greedy(model, logits, prefilled, 6, hooks={"blocks.0.hook_resid_post": record}) == plain
    steps = len(plain.token_ids) - (0 if plain.stopped else 1)
    assert seen == [[[n + k + i]] for i in range(steps)]  # one row a step, after the prefill

    seen.clear()
    confidence = draft_confidence(model, ctx.spliced, ctx.suffix_ids, 3, hooks={"blocks.0.hook_resid_post": record})
    assert confidence == draft_confidence(model, ctx.spliced, ctx.suffix_ids, 3)
    assert seen[0] == [list(range(n, n + k))] and seen[1:] == [[[n + k + i]] for i in range(len(seen) - 1)]

    def zero_heads(z, hook):
        z[:] = 0

    hooks = {f"blocks.{l}.attn.hook_z": zero_heads for l in range(model.adapter.n_layers)}
    assert draft_confidence(model, ctx.spliced, ctx.suffix_ids, 3, hooks=hooks) != confidence


def test_bad_hooks_on_the_question_are_one_line_errors_before_any_work(tiny_llama):
    ctx = wb.build_context(tiny_llama, small_example())
    with pytest.raises(wb.WorkbenchError, match="hook"):
        ctx.generate(ctx.dense, hooks={"blocks.99.attn.hook_z": lambda x, hook: None})
    with pytest.raises(wb.WorkbenchError, match="hook"):
        ctx.teacher_forced(ctx.dense, [1, 2], hooks={"no_such_point": lambda x, hook: None})
