"""Where an answer looks while it is written (`diagnosis.answer_attention`), checked against HF's eager
attention on tiny random models of both families: dense's and the splice's rows are HF's rows of a
forward of the context and the answer, summed over each region; the regions cover every key; a full
repair reads as dense; an example without evidence records no evidence region."""

from dataclasses import replace

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from test_heads_lens import hf_attention
from workbench.diagnosis.answer_attention import REGIONS, answer_attention, regions
from workbench.errors import WorkbenchError

ANSWER = [5, 9, 14, 3]


def _with_evidence():
    """small_example with its two bridge facts (passages 0 and 1) as evidence, the first only in part."""
    ex = small_example()
    return replace(ex, meta={"evidence": [[0, 0, 12], [1, 0, len(ex.passages[1])]]})


@pytest.fixture(scope="module", params=["llama", "gemma3_text"])
def ctx(request) -> wb.Context:
    return wb.build_context(tiny_model(request.param, attn="eager"), _with_evidence())


def _by_region(ctx, probs) -> dict[str, torch.Tensor]:
    """HF's rows [layer, step, key] summed over each region's keys."""
    masks = regions(ctx, probs.shape[-1])
    return {name: probs[..., m].sum(-1) for name, m in masks.items() if m is not None}


def _table(table, cache: str, region: str) -> torch.Tensor:
    at = table[table["cache"] == cache].sort_values(["layer", "step"])
    n_layers = int(at["layer"].max()) + 1
    return torch.tensor(at[region].to_numpy(), dtype=torch.float32).reshape(n_layers, -1)  # [layer, step]


def test_dense_and_the_splice_are_hf_eager_attention_summed_over_each_region(ctx):
    n = ctx.layout.n_tokens
    table = answer_attention(ctx, ANSWER)
    assert set(table["cache"]) == {"dense", "splice"} and table["step"].max() == len(ANSWER) - 1
    tail = torch.tensor(ANSWER[:-1])
    dense = torch.stack([a[:, n - 1:].mean(0) for a in hf_attention(ctx, torch.cat([ctx.layout.ids, tail]))])
    splice = torch.stack([a[:, -len(ANSWER):].mean(0)
                          for a in hf_attention(ctx, torch.cat([ctx.suffix_ids, tail]), ctx.spliced)])
    for cache, want in (("dense", dense), ("splice", splice)):  # want: [layer, step, key]
        for region, mass in _by_region(ctx, want).items():
            torch.testing.assert_close(_table(table, cache, region), mass, atol=1e-5, rtol=0)
    total = sum(_table(table, "dense", r) for r in REGIONS)
    torch.testing.assert_close(total, torch.ones_like(total), atol=1e-5, rtol=0)  # every key in one region
    assert (_table(table, "dense", "answer")[:, 0] == 0).all()  # step 0 has no answer so far
    assert float((_table(table, "splice", "evidence") - _table(table, "dense", "evidence")).abs().max()) > 1e-4


def test_a_full_repair_looks_where_dense_looks(ctx):
    table = answer_attention(ctx, ANSWER, rows=ctx.layout.changed_positions)
    for region in REGIONS:
        torch.testing.assert_close(_table(table, "repaired", region), _table(table, "dense", region),
                                   atol=1e-5, rtol=0)


def test_regions_split_the_passages_by_evidence():
    ctx = wb.build_context(tiny_model("llama"), _with_evidence())
    masks = regions(ctx, ctx.layout.n_tokens + 2)
    first, second, third = [s for s in ctx.layout.segments if s.kind == "passage"]
    assert masks["evidence"][first.start:first.end].any() and masks["same_passage"][first.start:first.end].any()
    inside = masks["evidence"][second.start:second.end]  # the second passage's text, then its separator's rows
    assert inside[:-2].all() and (masks["same_passage"][second.start:second.end] == ~inside).all()
    assert masks["other_passages"][third.start:third.end].all() and not masks["other_passages"][:third.start].any()
    assert masks["answer"].sum() == 2


def test_without_evidence_the_evidence_regions_are_not_zeros():
    ctx = wb.build_context(tiny_model("llama"), small_example())
    table = answer_attention(ctx, ANSWER[:2])
    assert table["evidence"].isna().all() and table["same_passage"].isna().all()
    assert (table["other_passages"] > 0).all()


def test_an_empty_or_out_of_vocabulary_answer_is_refused():
    ctx = wb.build_context(tiny_model("llama"), small_example())
    with pytest.raises(WorkbenchError, match="empty"):
        answer_attention(ctx, [])
    with pytest.raises(WorkbenchError, match="must lie in"):
        answer_attention(ctx, [10**9])
