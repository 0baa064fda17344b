"""The batched engine against the serial reference: many repairs in one pass (engine.cells), their
answers and the dense answer's score (engine.answers), and the residual meter (tiny models)."""

import pytest
import torch

import workbench as wb
from conftest import FAMILIES, small_example, tiny_model
from workbench.decode import stop_token_ids
from workbench.engine.answers import answer_cells
from workbench.engine.cells import Cell, materialize, run_cells
from workbench.exactness import host_syncs, rel
from workbench.repair import repair
from workbench.signals.deviation import ResidualMeter, residual_deviation

MAX_NEW = 8


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request):
    torch.set_num_threads(1)
    model = tiny_model(request.param)
    ctx = wb.build_context(model, small_example())
    r = ctx.reused_positions
    row_sets = [r[:0], r[::3], r[5:40], r, r[::7], r[-1:]]  # empty, scattered, a span, every row, ...
    dense = ctx.generate(ctx.dense, MAX_NEW)
    reference = list(dense.token_ids) + ([min(stop_token_ids(model))] if dense.stopped else [])
    return model, ctx, row_sets, reference


def test_every_cell_of_a_mixed_batch_equals_the_serial_repair(setup):
    model, ctx, row_sets, _ = setup
    cells = run_cells(model, ctx.spliced, [Cell(s, ctx.layout.ids[s]) for s in row_sets])
    for rows, cell in zip(row_sets, cells):
        want, got = ctx.repair(rows), materialize(ctx.spliced, cell)
        assert torch.equal(cell.positions.cpu(), rows)
        assert rel(got.keys, want.keys) < 1e-5 and rel(got.values, want.values) < 1e-5, len(rows)


def test_a_cell_of_every_reused_row_equals_dense(setup):
    model, ctx, row_sets, _ = setup
    full = materialize(ctx.spliced, run_cells(model, ctx.spliced, [Cell(row_sets[3], ctx.layout.ids[row_sets[3]])])[0])
    assert rel(full.keys, ctx.dense.keys) < 1e-5 and rel(full.values, ctx.dense.values) < 1e-5


def test_memory_groups_change_nothing(setup):
    model, ctx, row_sets, _ = setup
    cells = [Cell(s, ctx.layout.ids[s]) for s in row_sets]
    one = run_cells(model, ctx.spliced, cells)
    seen = []
    split = run_cells(model, ctx.spliced, cells, max_bytes=1, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(cells), len(cells)) and len(seen) == len(cells)  # one cell per group
    for a, b in zip(one, split):
        assert rel(b.keys, a.keys) < 1e-5 and rel(b.hidden, a.hidden) < 1e-5


def test_answers_and_teacher_forced_scores_equal_the_serial_path(setup):
    model, ctx, row_sets, reference = setup
    got = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, reference, MAX_NEW)
    meter = ResidualMeter(ctx.spliced, ctx.dense, ctx.reused_positions)
    for rows, cell in zip(row_sets, got):
        cache = ctx.repair(rows)
        assert cell.answer == ctx.generate(cache, MAX_NEW)  # text, token ids and the stop flag
        assert abs(cell.reference_logprob - ctx.teacher_forced(cache, reference).logprob) < 1e-4
        want = residual_deviation(cache, ctx.dense, ctx.reused_positions)
        mine = meter.of(cell.repaired.positions, cell.repaired.keys, cell.repaired.values)
        for kind in ("k", "v"):
            torch.testing.assert_close(mine[kind], want[kind], atol=1e-5, rtol=1e-4)


def test_without_a_reference_each_cell_scores_its_own_answer_as_teacher_forcing_does(setup):
    """reference_ids=None (how the Diagnosis computes the dense answer once): each cell decodes its
    greedy answer (the serial path's), and its score, read from the rows that chose each token, is
    that answer teacher-forced (`StopRule.decision`: the end-of-turn token it stopped on, the
    smallest), within float rounding; the first-token distribution too."""
    from workbench.engine.decode import StopRule

    model, ctx, row_sets, _ = setup
    rule = StopRule.of(model, MAX_NEW)
    own = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets[:3], ctx.suffix_ids, None, MAX_NEW)
    for rows, cell in zip(row_sets[:3], own):
        decision = rule.decision(cell.answer)
        assert cell.answer == ctx.generate(ctx.repair(rows), MAX_NEW) and len(decision) > 0
        (forced,) = answer_cells(model, ctx.spliced, ctx.layout.ids, [rows], ctx.suffix_ids, decision, MAX_NEW)
        assert forced.answer == cell.answer and len(cell.reference_token_logprobs) == len(decision)
        torch.testing.assert_close(torch.tensor(cell.reference_token_logprobs),
                                   torch.tensor(forced.reference_token_logprobs), atol=1e-4, rtol=0)
        assert abs(cell.reference_logprob - forced.reference_logprob) < 1e-4
        torch.testing.assert_close(cell.first_logp, forced.first_logp, atol=1e-4, rtol=0)
        assert cell.first_token == forced.first_token


def test_the_diagnosis_computes_the_dense_answer_once(setup, monkeypatch):
    """One pass over the dense cache gives the dense answer (the serial path's tokens), its
    first-token distribution and its token log-probabilities; nothing decodes it again."""
    import workbench.diagnosis.run as run

    model, ctx, _, reference = setup
    want = ctx.generate(ctx.dense, MAX_NEW)
    bases, real = [], run.answer_cells
    monkeypatch.setattr(run, "answer_cells", lambda m, base, *a, **k: bases.append(base is ctx.dense) or real(m, base, *a, **k))
    monkeypatch.setattr(wb.Context, "generate", lambda *a, **k: pytest.fail("the dense answer decoded a second time"))
    d = wb.diagnose(model, ctx.example, ctx=ctx, selectors=("none", "full"), budgets=(0.5,), max_new_tokens=MAX_NEW,
                    progress=False)
    assert bases.count(True) == 1 and d.answers.dense.token_ids == want.token_ids
    tokens = d.tables["answer_tokens"]
    assert tuple(tokens[tokens["cell"] == "dense"]["token_id"]) == tuple(reference)


def test_an_answer_that_leaves_the_reference_decodes_on(setup):
    """With a wrong reference every answer leaves it at the first token and is decoded row by row."""
    model, ctx, row_sets, reference = setup
    wrong = [(t + 1) % 256 for t in reference] or [1]
    got = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets[:3], ctx.suffix_ids, wrong, MAX_NEW)
    for rows, cell in zip(row_sets[:3], got):
        assert cell.answer == ctx.generate(ctx.repair(rows), MAX_NEW)
        assert cell.decode_steps == len(cell.answer.token_ids) - (0 if cell.answer.stopped else 1)


def contexts_for(ctx, row_sets):
    """Per row set, a context mask: the prefix, the rows themselves and every fourth handed-off row."""
    out = []
    for rows in row_sets:
        keep = torch.zeros(ctx.layout.suffix_start, dtype=torch.bool)
        keep[: ctx.layout.prefix.end] = True
        keep[::4] = True
        keep[rows] = True
        out.append(keep)
    return out


def test_restricted_cells_equal_the_serial_restricted_repair(setup):
    """Batched = serial with context masks too; an all-True mask is today's cell bit for bit."""
    model, ctx, row_sets, _ = setup
    contexts = contexts_for(ctx, row_sets)
    cells = run_cells(model, ctx.spliced, [Cell(s, ctx.layout.ids[s], context=c) for s, c in zip(row_sets, contexts)])
    for rows, context, cell in zip(row_sets, contexts, cells):
        want = repair(model, ctx.spliced, ctx.layout.ids, rows, context=context)
        got = materialize(ctx.spliced, cell)
        assert rel(got.keys, want.keys) < 1e-5 and rel(got.values, want.values) < 1e-5, len(rows)
    restricted = materialize(ctx.spliced, cells[2])
    assert not torch.allclose(restricted.values, ctx.repair(row_sets[2]).values)  # the mask changed the repair
    everything = torch.ones(ctx.layout.suffix_start, dtype=torch.bool)
    plain, full = run_cells(model, ctx.spliced, [Cell(row_sets[2], ctx.layout.ids[row_sets[2]]),
                                                 Cell(row_sets[2], ctx.layout.ids[row_sets[2]], context=everything)])
    assert torch.equal(plain.keys, full.keys) and torch.equal(plain.values, full.values)
    assert torch.equal(plain.hidden, full.hidden)


def test_answers_of_restricted_cells_equal_the_serial_path(setup):
    """The suffix and the answer see every key; only the repaired rows are restricted."""
    model, ctx, row_sets, reference = setup
    contexts = contexts_for(ctx, row_sets[1:4])
    got = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets[1:4], ctx.suffix_ids, reference, MAX_NEW,
                       contexts=contexts)
    for rows, context, cell in zip(row_sets[1:4], contexts, got):
        cache = repair(model, ctx.spliced, ctx.layout.ids, rows, context=context)
        assert cell.answer == ctx.generate(cache, MAX_NEW)
        assert abs(cell.reference_logprob - ctx.teacher_forced(cache, reference).logprob) < 1e-4


def test_bad_row_sets_fail_before_any_work(setup, monkeypatch):
    model, ctx, row_sets, reference = setup
    monkeypatch.setattr("workbench.engine.answers.run_cells", lambda *a, **k: pytest.fail("work started"))
    n = ctx.spliced.n_positions
    for bad, match in ((torch.tensor([3, 3]), "duplicates"), (torch.tensor([n + 5]), "out of range"),
                       (torch.tensor([1.5]), "integers")):
        with pytest.raises(wb.WorkbenchError, match=match):
            answer_cells(model, ctx.spliced, ctx.layout.ids, [row_sets[1], bad], ctx.suffix_ids, reference)
    for contexts, match in (([None], "one per row set"), ([None, torch.ones(n + 1, dtype=torch.bool)], "pass the base"),
                            ([None, torch.ones(4)], "bool")):
        with pytest.raises(wb.WorkbenchError, match=match):
            answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets[1:3], ctx.suffix_ids, reference,
                         contexts=contexts)


def test_the_layer_loops_make_no_host_syncs(setup):
    """From the first layer's projections to the last layer's output, neither the batched repair
    nor the batched decode reads a value back to the host (on a GPU each would stall the stream)."""
    model, ctx, row_sets, reference = setup
    wrong = [(t + 1) % 256 for t in reference] or [1]  # every cell decodes on, through Decoder.step
    got = host_syncs(ctx, row_sets, wrong, MAX_NEW)
    assert got["decode_steps"] > 0  # the decode loop ran
    assert got["calls"] == [] and got["cuda_syncs"] == [], f"host syncs inside the layer loop: {got}"


def test_the_host_sync_check_sees_a_sync_in_the_layer_loop(setup, monkeypatch):
    model, ctx, row_sets, reference = setup
    adapter = type(model.adapter)
    finish = adapter.finish_layer

    def reading(self, l, h, attn):
        float(h.sum())  # a value read back to the host
        return finish(self, l, h, attn)

    monkeypatch.setattr(adapter, "finish_layer", reading)
    got = host_syncs(ctx, row_sets[:2], [1], MAX_NEW)
    assert got["calls"] == ["__float__"]
    assert adapter.finish_layer is reading  # the check put back what it found
