"""Attention by head (diagnosis.heads) and the logit lens on every answer token (diagnosis.lens),
checked against HF's eager attention and logits on tiny random models; the cell a diagnosis chose,
reopened (diagnosis.reopen); their figures."""

from dataclasses import replace

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench import plots
from workbench.diagnosis import diagnose
from workbench.diagnosis.heads import head_patterns
from workbench.diagnosis.lens import COLUMNS, logit_lens
from workbench.diagnosis.reopen import cell_rows, reopen_context
from workbench.tasks import synthetic_examples


@pytest.fixture(scope="module", params=["llama", "gemma3_text"])
def eager_ctx(request) -> wb.Context:
    """A context on a tiny model with eager attention (HF returns its weights); Gemma 3's has a
    sliding window shorter than the context."""
    return wb.build_context(tiny_model(request.param, attn="eager"), small_example())


def hf_attention(ctx, ids, cache=None) -> list[torch.Tensor]:
    """HF's eager attention weights of a forward of `ids` (over `cache`), per layer [head, query, key]."""
    with torch.inference_mode():
        out = ctx.model.hf(input_ids=ids[None], cache=None if cache is None else cache.to_hf(),
                           use_cache=cache is not None, output_attentions=True)
    return [a[0].float() for a in out.attentions]


def test_dense_and_splice_patterns_are_hf_eager_attention_and_sum_to_one(eager_ctx):
    ctx, n = eager_ctx, eager_ctx.layout.n_tokens
    found = head_patterns(ctx)  # the question's last row
    assert found.query == n - 1 and found.patterns["repaired"] is None and found.notes["repaired"]
    dense, splice = found.patterns["dense"], found.patterns["splice"]  # [layer, head, key]
    assert dense.shape == (ctx.model.adapter.n_layers, ctx.model.adapter.n_heads, n)
    torch.testing.assert_close(dense.sum(-1), torch.ones(dense.shape[:2]), atol=1e-5, rtol=0)
    want_dense = torch.stack([a[:, -1] for a in hf_attention(ctx, ctx.layout.ids)])
    want_splice = torch.stack([a[:, -1] for a in hf_attention(ctx, ctx.suffix_ids, ctx.spliced)])
    torch.testing.assert_close(dense, want_dense, atol=1e-5, rtol=0)
    torch.testing.assert_close(splice, want_splice, atol=1e-5, rtol=0)
    torch.testing.assert_close(dense.mean(1), want_dense.mean(1), atol=1e-5, rtol=0)  # the head mean
    assert float(found.distance().max()) > 1e-3  # the splice attends elsewhere


def test_a_full_repair_attends_and_predicts_as_dense(eager_ctx):
    ctx = eager_ctx
    full = ctx.layout.changed_positions
    found = head_patterns(ctx, rows=full)
    torch.testing.assert_close(found.patterns["repaired"], found.patterns["dense"], atol=1e-5, rtol=0)
    assert float(found.distance("repaired", "dense").max()) < 1e-5
    answer = ctx.generate(ctx.dense, 4).token_ids or [5]
    lens = logit_lens(ctx, answer, rows=full, k=3)
    by = {cache: t.reset_index(drop=True) for cache, t in lens.groupby("cache")}
    assert by["repaired"]["top_ids"].tolist() == by["dense"]["top_ids"].tolist()
    torch.testing.assert_close(torch.tensor(by["repaired"]["p_target"]), torch.tensor(by["dense"]["p_target"]),
                               atol=1e-5, rtol=1e-4)


def test_a_context_row_reads_the_pass_that_computed_it(eager_ctx):
    ctx = eager_ctx
    row = int(ctx.layout.changed_positions[3])  # a row of a later passage: the splice reused it
    found = head_patterns(ctx, query=row, rows=ctx.layout.changed_positions[:2])
    want = torch.stack([a[:, row, :row + 1] for a in hf_attention(ctx, ctx.layout.ids)])
    torch.testing.assert_close(found.patterns["dense"], want, atol=1e-5, rtol=0)
    assert found.patterns["splice"] is None and "sender" in found.notes["splice"]
    assert found.patterns["repaired"] is None  # this cell does not recompute it either
    repaired = head_patterns(ctx, query=row, rows=ctx.layout.changed_positions[:4]).patterns["repaired"]
    torch.testing.assert_close(repaired.sum(-1), torch.ones(repaired.shape[:2]), atol=1e-5, rtol=0)
    first = head_patterns(ctx, query=ctx.layout.passages[0].start + 1)  # computed under the same prefix everywhere
    torch.testing.assert_close(first.patterns["splice"], first.patterns["dense"], atol=1e-5, rtol=0)
    with pytest.raises(wb.WorkbenchError, match="outside the context"):
        head_patterns(ctx, query=ctx.layout.n_tokens)


def test_the_last_layers_lens_is_the_models_own_output_for_every_answer_token(eager_ctx):
    ctx, n = eager_ctx, eager_ctx.layout.n_tokens
    answer = [7, 40, 99, 12]  # any tokens: teacher-forced, each predicted from the ones before it
    lens = logit_lens(ctx, answer, rows=ctx.layout.changed_positions[::2], k=4)
    n_layers = ctx.model.adapter.n_layers
    assert list(lens.columns) == list(COLUMNS) and len(lens) == 3 * n_layers * len(answer)
    with torch.inference_mode():
        logits = ctx.model.hf(input_ids=torch.cat([ctx.layout.ids, torch.tensor(answer[:-1])])[None]).logits[0]
    probs = logits[n - 1:].float().softmax(-1)  # [step, vocab]: the rows predicting each answer token
    last = lens[(lens["cache"] == "dense") & (lens["layer"] == n_layers - 1)].sort_values("step")
    assert last["top_ids"].tolist() == probs.topk(4, -1).indices.tolist()
    torch.testing.assert_close(torch.tensor(last["top_probs"].tolist()), probs.topk(4, -1).values, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(last["p_target"].tolist()), probs[range(4), answer], atol=1e-5, rtol=0)
    assert (last["rank"] == [int((probs[i] > probs[i, t]).sum()) for i, t in enumerate(answer)]).all()
    assert last["target_token"].tolist() == [ctx.model.tokenizer.decode([t]) for t in answer]
    with pytest.raises(wb.WorkbenchError, match="empty"):
        logit_lens(ctx, [])


def test_a_cell_is_read_from_the_diagnosis_or_chosen_again_and_the_figures_draw(tiny_llama):
    d = diagnose(tiny_llama, synthetic_examples(1, seed=3)[0], selectors=("bcr", "random"), budgets=(0.5,),
                 progress=False)
    ctx = reopen_context(tiny_llama, d)
    rows, context = cell_rows(ctx, d, "bcr", 0.5)
    assert rows.tolist() == d.picks("bcr", 0.5) and context is None
    # the head mean of the last row's mass on the evidence is what EvidenceAttention read from the answering pass
    found = head_patterns(ctx, rows=rows)
    evidence = ctx.layout.evidence
    attention = d.tables["evidence_attention"].set_index(["cell", "layer"])["mass_last"]
    for cache, cell in (("dense", "dense"), ("splice", "spliced"), ("repaired", "bcr")):
        mass = found.patterns[cache][..., evidence].sum(-1).mean(-1)  # [layer]
        want = torch.tensor([attention[(cell, l)] for l in range(len(mass))], dtype=torch.float32)
        torch.testing.assert_close(mass, want, atol=1e-5, rtol=0)
    kept = replace(d, tables={k: v for k, v in d.tables.items() if k != "selections"}, ctx=None)  # a kept record
    again, _ = cell_rows(ctx, kept, "bcr", 0.5)
    assert again.tolist() == rows.tolist()
    hooked = replace(kept, hooks={"blocks.0.attn.hook_z": ["ablate"]})  # its signals were hooked: not chosen again
    with pytest.raises(wb.WorkbenchError, match="diagnosed under hooks"):
        cell_rows(ctx, hooked, "bcr", 0.5)
    assert cell_rows(ctx, replace(d, hooks={"blocks.0.attn.hook_z": ["ablate"]}), "bcr", 0.5)[0].tolist() == rows.tolist()
    wrong = replace(d, context=replace(d.context, n_tokens=d.context.n_tokens + 1))
    with pytest.raises(wb.WorkbenchError, match="lays out to"):
        reopen_context(tiny_llama, wrong)
    fig = plots.head_pattern_figure(found, ctx.model.adapter.n_layers - 1)
    assert [t.type for t in fig.data] == ["heatmap", "heatmap", "heatmap", "scatter"]  # the cell's rows as ticks
    assert list(fig.data[-1].x) == rows.tolist() and plots.figure_problems(fig) == []
    lens = logit_lens(ctx, d.answers.dense.token_ids or [5], rows=rows)
    fig = plots.logit_lens_figure(lens)
    assert len(fig.data) == 3 and plots.figure_problems(fig) == []
