"""Per-layer recompute effects (diagnosis.layer_effects) and their figure, on tiny models."""

import pytest
import torch

import workbench as wb
from tests.conftest import same_layer_effects, small_example
from workbench import plots
from workbench.diagnosis import diagnose
from workbench.diagnosis.layer_effects import (
    COLUMNS, SuffixCapture, layer_effects, layer_effects_table, selected_rows, suffix_residuals,
)
from workbench.engine.answers import answer_cells
from workbench.batching import DEFAULT_MAX_BYTES


@pytest.fixture(scope="module")
def ctx(tiny):
    return wb.build_context(tiny, small_example())


def test_dense_is_its_own_reference_and_a_full_repair_reaches_it(ctx):
    n_layers = ctx.model.adapter.n_layers
    full = layer_effects(ctx, ctx.layout.changed_positions)  # every row computed under another prefix
    assert list(full.columns) == list(COLUMNS) and len(full) == 3 * n_layers
    by = {cache: t.sort_values("layer") for cache, t in full.groupby("cache")}
    assert (by["dense"]["residual_distance"] == 0).all() and (by["dense"]["rank"] >= 0).all()
    assert float(by["dense"]["rank"].iloc[-1]) == 0  # the lens at the last layer is the model: its top token
    assert by["repaired"]["residual_distance"].max() < 1e-4  # the full repair is dense, at every layer
    assert by["splice"]["residual_distance"].iloc[-1] > 1e-3  # the splice is not


def test_the_last_layers_lens_is_the_answers_first_token_distribution(ctx):
    rows = ctx.layout.changed_positions[::2]
    table = layer_effects(ctx, rows)
    last = table[table["layer"] == ctx.model.adapter.n_layers - 1].set_index("cache")
    cells = answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [torch.empty(0, dtype=torch.long), rows],
                         ctx.suffix_ids, [0])
    (dense_cell,) = answer_cells(ctx.model, ctx.dense, ctx.layout.ids, [torch.empty(0, dtype=torch.long)],
                                 ctx.suffix_ids, [0])
    token = int(dense_cell.first_logp.argmax())  # dense's first answer token
    for cache, cell in (("splice", cells[0]), ("repaired", cells[1]), ("dense", dense_cell)):
        assert last.loc[cache, "logprob"] == pytest.approx(float(cell.first_logp[token]), abs=1e-4)


def test_rows_come_from_a_diagnosis_and_the_figure_shows_every_cache(tiny_llama):
    d = diagnose(tiny_llama, small_example(), selectors=("bcr",), budgets=(0.5,), progress=False)
    rows = selected_rows(d, "bcr", 0.5)
    assert len(rows) == int(d.tables["selections"]["n_recomputed"].iloc[0])
    with pytest.raises(wb.WorkbenchError, match="no selection"):
        selected_rows(d, "bcr", 0.25)
    fig = plots.layer_effects_figure(layer_effects(d.ctx, rows))
    assert sorted({t.name for t in fig.data}) == ["dense", "repaired", "splice"] and len(fig.data) == 6
    assert plots.figure_problems(fig) == []


def test_diagnose_keeps_the_table_and_the_views_draw_it(tiny_llama):
    from workbench.report import diagnosis_to_html

    plain = diagnose(tiny_llama, small_example(), selectors=("bcr", "random"), budgets=(0.5,), progress=False)
    assert "layer_effects" not in plain.tables and "layer_effects" not in plots.diagnosis_figures(plain)
    d = diagnose(tiny_llama, small_example(), selectors=("bcr", "random"), budgets=(0.5,), progress=False,
                 layer_effects=True)
    effects = d.tables["layer_effects"]
    assert set(effects["selector"]) == {"bcr", "random"}  # a drawn selector: its first draw
    bcr = effects[effects["selector"] == "bcr"].drop(columns=["selector", "budget"]).reset_index(drop=True)
    alone = layer_effects(d.ctx, selected_rows(d, "bcr", 0.5))  # the serial path
    same_layer_effects(bcr, alone)
    assert "layer_effects" in plots.diagnosis_figures(d, selectors=["bcr"])
    assert "layer by layer" in diagnosis_to_html(d) and "layer by layer" not in diagnosis_to_html(plain)


@pytest.mark.parametrize("max_bytes", [1, DEFAULT_MAX_BYTES])  # a group per cell; every cell in one group
def test_the_capture_keeps_each_cells_suffix_as_the_serial_pass_computes_it(ctx, max_bytes):
    n, none = ctx.layout.suffix_start, torch.empty(0, dtype=torch.long)
    rows = ctx.layout.changed_positions
    context = torch.zeros(n, dtype=torch.bool)
    context[::2] = True  # a restricted recompute (RelaxKV's): cells 1 and 2 share rows, not keys
    row_sets, contexts = [none, rows[::2], rows[::2], rows, rows[:3]], [None, None, context, None, None]
    capture, dense_capture = SuffixCapture(ctx), SuffixCapture(ctx)
    wrong = [7, 8, 9]  # teacher-forced rows after the suffix, then decode steps: neither is kept
    out = answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, wrong, 3, max_bytes,
                       contexts=contexts, hooks=capture.hooks())
    assert sum(c.decode_steps for c in out) > 0
    answer_cells(ctx.model, ctx.dense, ctx.layout.ids, [none], ctx.suffix_ids, wrong, 3, hooks=dense_capture.hooks())
    cases = [(capture.residuals(i), suffix_residuals(ctx, r, ctx.spliced, c))
             for i, (r, c) in enumerate(zip(row_sets, contexts))]
    cases.append((dense_capture.residuals(0), suffix_residuals(ctx, none, ctx.dense)))
    for got, want in cases:
        assert len(got) == ctx.model.adapter.n_layers
        for g, w in zip(got, want):  # [suffix, hidden]
            assert g.shape == (len(ctx.suffix_ids), ctx.model.config.hidden_size) and g.shape == w.shape
            assert float((g - w).norm() / w.norm()) < 1e-5
    apart = float((capture.residuals(1)[-1] - capture.residuals(2)[-1]).norm() / capture.residuals(1)[-1].norm())
    assert apart > 1e-3  # the restricted cell is told apart from its unrestricted twin


def test_diagnose_reads_the_table_from_its_pass_as_the_serial_path_computes_it(tiny):
    selectors, budgets = ("bcr", "random", "cacheblend", "full", "relaxkv"), (0.25, 0.5)
    plain = diagnose(tiny, small_example(), selectors=selectors, budgets=budgets, coin_draws=2, progress=False)
    d = diagnose(tiny, small_example(), selectors=selectors, budgets=budgets, coin_draws=2, progress=False,
                 layer_effects=True, ctx=plain.ctx)
    for name in ("outcomes", "answer_tokens", "residual"):  # the capture changes no outcome
        assert d.tables[name].drop(columns="seconds", errors="ignore").equals(
            plain.tables[name].drop(columns="seconds", errors="ignore")), name
    effects = d.tables["layer_effects"]
    keys = list(dict.fromkeys(zip(effects["selector"], effects["budget"])))
    assert keys == [(s, b) for s in selectors for b in budgets]
    # relaxkv's context mask is diagnose's own: the capture test above covers restricted cells
    serial = layer_effects_table(d.ctx, {(s, b): selected_rows(d, s, b, 0 if s == "random" else None)
                                         for s, b in keys if s != "relaxkv"})
    same_layer_effects(effects[effects["selector"] != "relaxkv"].reset_index(drop=True), serial)


def test_user_hooks_run_with_the_capture_and_it_sees_what_they_left(tiny_llama):
    calls = []

    def double(x, hook):  # the residual after layer 0, doubled on every cell's pass
        calls.append(hook.positions.shape[0])
        return x * 2

    hooks = {"blocks.0.hook_resid_post": double}
    example = small_example()
    plain = diagnose(tiny_llama, example, selectors=("bcr",), budgets=(0.5,), progress=False, hooks=hooks)
    n_plain = len(calls)
    d = diagnose(tiny_llama, example, selectors=("bcr",), budgets=(0.5,), progress=False, hooks=hooks,
                 layer_effects=True, ctx=plain.ctx)
    assert len(calls) == 2 * n_plain > 0  # the user's hook ran as often with the capture as without
    assert d.tables["outcomes"].drop(columns="seconds").equals(plain.tables["outcomes"].drop(columns="seconds"))
    ctx, none = d.ctx, torch.empty(0, dtype=torch.long)
    splice, dense = suffix_residuals(ctx, none, ctx.spliced), suffix_residuals(ctx, none, ctx.dense)
    effects = d.tables["layer_effects"].set_index(["cache", "layer"])
    want = float((2 * splice[0] - dense[0]).norm() / dense[0].norm())  # the doubled splice against dense
    assert effects.loc[("splice", 0), "residual_distance"] == pytest.approx(want, rel=1e-4)
    assert effects.loc[("dense", 0), "residual_distance"] == 0  # dense's pass runs no user hook
