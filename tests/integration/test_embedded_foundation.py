"""The exact operations on the embedded SmolLM2-135M (slow tier: one model per session)."""

import pytest
import torch

import workbench as wb
from workbench.kv import relative_error

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ctx(smol):
    return wb.build_context(smol, wb.load_example("synthetic#0"))


def test_layer0_exact_and_drift_grows_with_depth(ctx):
    ctx.check_splice(atol=1e-4)
    rel = relative_error(ctx.spliced, ctx.dense)["v"]
    assert rel[0] < 1e-6
    assert rel[-1] > rel[1] > 1e-3, rel.tolist()


def test_full_repair_reproduces_dense_tensor_by_tensor_and_token_by_token(ctx):
    fixed = ctx.repair(ctx.reused_positions)
    rel = relative_error(fixed, ctx.dense)
    assert rel["k"].max() <= 1e-4 and rel["v"].max() <= 1e-4, (rel["k"].max(), rel["v"].max())
    assert ctx.generate(fixed).token_ids == ctx.generate(ctx.dense).token_ids


def test_repairing_passages_after_the_first_is_enough(ctx):
    rest = torch.cat([torch.arange(s.start, s.end) for s in ctx.layout.passages[1:]])
    rel = relative_error(ctx.repair(rest), ctx.dense)
    assert rel["k"].max() <= 1e-4 and rel["v"].max() <= 1e-4


def test_repairing_nothing_is_the_splice(ctx):
    same = ctx.repair(torch.empty(0, dtype=torch.long))
    assert torch.equal(same.keys, ctx.spliced.keys) and torch.equal(same.values, ctx.spliced.values)
    assert ctx.answer(same) == ctx.answer(ctx.spliced)


def test_answers_are_short_and_the_dense_answer_is_teacher_forced_exactly(ctx):
    dense = ctx.generate(ctx.dense)
    assert 0 < len(dense.token_ids) <= 12 and "\n" not in dense.text
    assert ctx.teacher_forced(ctx.dense, dense.token_ids).agrees
