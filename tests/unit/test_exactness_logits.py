"""The exactness check's near-tie logits come from the engine, equal to HF's forward (the oracle)."""

import torch

import workbench as wb
from conftest import small_example
from workbench import exactness
from workbench.exactness import answer_every_cell_leaves, dense_next_logits


def hf_next_logits(ctx, answer_ids) -> torch.Tensor:
    inputs = torch.cat([ctx.suffix_ids, torch.tensor(answer_ids, dtype=torch.long)])
    with torch.inference_mode():
        return ctx.model.hf(input_ids=inputs[None], cache=ctx.dense.to_hf(), use_cache=True,
                            logits_to_keep=1).logits[0, -1].float()


def test_dense_next_logits_equal_hf_forward(tiny):
    ctx = wb.build_context(tiny, small_example())
    answer = ctx.generate(ctx.dense, 4).token_ids
    for step in (0, len(answer)):
        got = dense_next_logits(ctx, torch.tensor(answer[:step], dtype=torch.long))
        assert torch.equal(got, hf_next_logits(ctx, answer[:step]))


def test_a_divergence_reports_dense_gap_at_its_step(tiny_llama):
    ctx = wb.build_context(tiny_llama, small_example())
    answer = ctx.generate(ctx.dense, 4).token_ids
    other = list(answer[:1]) + answer_every_cell_leaves(tiny_llama, answer[1:])  # diverges at step 1
    got = exactness._answers(ctx, ctx.dense, tuple(other), 1e-5, 4)
    top = hf_next_logits(ctx, answer[:1]).topk(2).values
    assert got["divergence_step"] == 1 and not got["equal"]
    assert got["dense_gap"] == float(top[0] - top[1])
