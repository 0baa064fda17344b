"""The captured decode (`engine.decode`: `StaticStep`, `CapturedSteps`): on a CPU nothing is captured, but everything around the
capture runs: the engine's decode of a prefilled cache against HF's, and the static step that
keeps every cell against the eager one that drops ended cells. The capture itself is checked on
a GPU by `bench/gpu_probe.py --graphs` (docs/BENCHMARKS.md)."""

import pytest
import torch

import workbench as wb
from conftest import FAMILIES, small_example, tiny_model
from tests.hf_oracle import hf_continue_greedy
from workbench.decode import continue_greedy
from workbench.engine.answers import answer_cells
from workbench.engine.cells import Cell
from workbench.engine.decode import GRAPHS_ENV, Decoder, StaticStep, graphs_wanted
from workbench.kv import KVCache
from workbench.signals.attention import suffix_pass

MAX_NEW = 12


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request):
    torch.set_num_threads(1)
    model = tiny_model(request.param)
    return model, wb.build_context(model, small_example())


@pytest.mark.parametrize("stop_at_newline", [True, False])
def test_the_engine_decode_of_a_prefilled_cache_gives_hf_s_answer(setup, stop_at_newline):
    model, ctx = setup
    for cache in (ctx.spliced, ctx.dense, ctx.repair(ctx.reused_positions[::3])):
        out = model.hf(input_ids=ctx.suffix_ids[None], cache=cache.to_hf(), use_cache=True, logits_to_keep=1)
        logits = out.logits[0, -1]
        prefilled = KVCache.from_hf(out.cache)
        hf = hf_continue_greedy(model, logits, out.cache, MAX_NEW, stop_at_newline)  # the oracle
        ours = continue_greedy(model, logits, prefilled, MAX_NEW, stop_at_newline)
        assert ours == hf and len(hf.token_ids) > 0  # text, token ids, the stop flag
        assert ours == ctx.generate(cache, MAX_NEW) or not stop_at_newline


def test_the_suffix_pass_answer_is_the_engine_s(setup):
    """The Diagnosis's ŷ (the suffix record's answer) decodes on from the suffix pass's KVCache."""
    model, ctx = setup
    record = suffix_pass(ctx, ctx.spliced, k=2)
    assert record.answer(model, MAX_NEW) == ctx.generate(ctx.spliced, MAX_NEW)
    assert continue_greedy(model, record.last_logits, record.prefilled, MAX_NEW) == \
        ctx.generate(ctx.spliced, MAX_NEW)
    assert record.prefilled.n_positions == ctx.spliced.n_positions + len(ctx.suffix_ids)  # never grown


def _decoder(model, ctx, n_cells: int = 3) -> Decoder:
    """`n_cells` cells over the splice, each knowing the suffix rows of its own repair."""
    cells = []
    for c in range(n_cells):
        rows = ctx.reused_positions[c::n_cells + 1]
        cache = ctx.repair(rows)
        out = model.hf(input_ids=ctx.suffix_ids[None], cache=cache.to_hf(), use_cache=True)
        full = KVCache.from_hf(out.cache)
        known = torch.cat([rows, torch.arange(ctx.spliced.n_positions, full.n_positions)])
        cells.append(Cell(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), known,
                          full.keys[:, :, known], full.values[:, :, known]))
    return Decoder(model, ctx.spliced, cells, MAX_NEW)


def test_a_static_step_that_keeps_every_cell_equals_the_eager_one_that_drops_them(setup):
    """Cells end at steps 2, 5 and never; the static step keeps stepping the ended ones on their
    last token, and the cells still decoding get the eager decoder's logits."""
    model, ctx = setup
    eager, static = _decoder(model, ctx), StaticStep(_decoder(model, ctx), capture=False)
    buffers = {name: getattr(static.decoder, name).data_ptr() for name in ("keys", "values", "kpos", "length")}
    first = ctx.spliced.n_positions + len(ctx.suffix_ids)
    ends, alive = [2, 5, MAX_NEW], [0, 1, 2]
    tokens = torch.tensor([65, 66, 67])
    for step in range(MAX_NEW):
        keep = [c for c in alive if ends[c] > step]
        if keep != alive:
            eager.keep([alive.index(c) for c in keep])
            alive = keep
        positions = torch.full((3,), first + step)
        want = model.adapter.logits(eager.step(positions[alive], tokens[alive])).float()  # [alive, vocab]
        got = static(positions.where(torch.tensor([ends[c] > step for c in range(3)]), first + ends[0] - 1),
                     tokens)  # ended cells: a repeated position, the same token
        torch.testing.assert_close(got[alive], want, atol=1e-5, rtol=1e-4)
        tokens = got.argmax(-1).where(torch.tensor([ends[c] > step + 1 for c in range(3)]), tokens)
    assert static.calls == MAX_NEW and static.graph is None and static.replays == 0  # never captured on a CPU
    assert int(static.decoder.length.max()) <= static.decoder.keys.shape[3]  # within the buffers
    # a captured step reads and writes fixed addresses: no step may rebind the decoder's state
    assert {name: getattr(static.decoder, name).data_ptr() for name in buffers} == buffers


def test_answer_cells_with_the_static_step_gives_the_same_answers(setup, monkeypatch):
    """answer_cells with every cell leaving the reference at once, decoded by the static step
    (what CUDA runs, here uncaptured) and by the eager decoder."""
    model, ctx = setup
    r = ctx.reused_positions
    row_sets = [r[:0], r[::3], r[5:40], r]
    wrong = [1]  # no greedy answer starts with token 1 here: every cell decodes on
    want = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, wrong, MAX_NEW)
    assert all(cell.answer.token_ids[:1] != (1,) for cell in want)
    monkeypatch.setattr("workbench.engine.decode.graphs_wanted", lambda model, hooks: True)
    got = answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, wrong, MAX_NEW)
    assert [c.answer for c in got] == [c.answer for c in want]
    assert [c.decode_steps for c in got] == [c.decode_steps for c in want]


def test_cells_that_end_at_different_steps_get_the_same_answers_from_the_static_step(setup):
    """Walks that come to the decode with 4, 7 and 1 tokens reach the 10-token cap at different
    steps: the static step keeps stepping the ended ones and returns only the others' logits, and
    every walk gets the eager decoder's tokens (which drops ended cells)."""
    from workbench.engine.decode import CapturedSteps, EngineSteps, StopRule, Walk, decode_greedy

    model, ctx = setup
    rule = StopRule(model.tokenizer, frozenset(), max_new_tokens=10, stop_at_newline=False)
    first = ctx.spliced.n_positions + len(ctx.suffix_ids)
    answers = []
    for stepper in (EngineSteps, CapturedSteps):
        walks = [Walk(generated=[65 + i for i in range(n)]) for n in (4, 7, 1)]
        args = (_decoder(model, ctx), walks, [first] * len(walks)) + ((False,) if stepper is CapturedSteps else ())
        decode_greedy(rule, walks, stepper(*args))
        answers.append([(w.generated, w.steps) for w in walks])
    assert answers[1] == answers[0]
    assert [steps for _, steps in answers[0]] == [6, 3, 9]  # the premise: they end apart, the middle one first


def test_a_capture_that_fails_warns_once_decodes_eagerly_and_is_not_tried_again(setup, monkeypatch):
    """The capture is faked to fail as a syncing kernel makes it fail on CUDA (here, on a CPU, the
    graph API is stubbed): the step's answers are the eager ones, and the process stops asking."""
    import contextlib

    from workbench.engine import decode as graphs

    model, ctx = setup
    monkeypatch.setattr(graphs, "_capture_failed", [])
    monkeypatch.setattr(StaticStep, "_warm_up", StaticStep._run)

    @contextlib.contextmanager
    def failing_graph(graph, stream=None):  # nothing runs while capturing: fail before the body
        raise RuntimeError("operation not permitted when stream is capturing")
        yield

    for name, stub in (("device", lambda device: contextlib.nullcontext()), ("Stream", lambda: None),
                       ("stream", lambda stream: contextlib.nullcontext()), ("CUDAGraph", lambda: object()),
                       ("graph", failing_graph)):
        monkeypatch.setattr(torch.cuda, name, stub)
    eager, failing = _decoder(model, ctx), StaticStep(_decoder(model, ctx), capture=True)
    first = ctx.spliced.n_positions + len(ctx.suffix_ids)
    tokens = torch.tensor([65, 66, 67])
    with pytest.warns(RuntimeWarning, match="could not be captured.*operation not permitted") as caught:
        for step in range(4):
            want = model.adapter.logits(eager.step(torch.full((3,), first + step), tokens)).float()
            torch.testing.assert_close(failing(torch.full((3,), first + step), tokens), want, atol=1e-5, rtol=1e-4)
            tokens = want.argmax(-1)
    assert len(caught) == 1 and failing.graph is None and failing.replays == 0
    assert graphs._capture_failed and not graphs_wanted(type("Gpu", (), {"device": torch.device("cuda")}), None)


def test_graphs_are_wanted_on_cuda_only_without_hooks_unless_turned_off(monkeypatch):
    class On:
        device = torch.device("cuda")
    assert graphs_wanted(On, None) and not graphs_wanted(On, {"hook_embed": lambda x, h: None})
    assert not graphs_wanted(type("Cpu", (), {"device": torch.device("cpu")}), None)
    monkeypatch.setenv(GRAPHS_ENV, "0")
    assert not graphs_wanted(On, None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smol", "gemma3"])
def test_on_the_embedded_models_the_engine_decode_gives_hf_s_answer(name, request):
    """The embedded models' real answers: the engine's decode of the splice, dense and a repair
    (the path CUDA takes) equals HF's, token for token."""
    model = request.getfixturevalue(name)
    ctx = wb.build_context(model, small_example(4))
    for cache in (ctx.spliced, ctx.dense, ctx.repair(ctx.reused_positions[::4])):
        out = model.hf(input_ids=ctx.suffix_ids[None], cache=cache.to_hf(), use_cache=True, logits_to_keep=1)
        prefilled = KVCache.from_hf(out.cache)  # before HF's decode extends its cache
        hf = hf_continue_greedy(model, out.logits[0, -1], out.cache, 16)  # the oracle
        ours = continue_greedy(model, out.logits[0, -1], prefilled, 16)
        assert ours == hf and hf.text, (hf, ours)
