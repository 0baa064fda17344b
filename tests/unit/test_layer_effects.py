"""Per-layer recompute effects (diagnosis.layer_effects) and their figure, on tiny models."""

import pytest
import torch

import workbench as wb
from tests.conftest import small_example
from workbench import plots
from workbench.diagnosis import diagnose
from workbench.diagnosis.layer_effects import COLUMNS, layer_effects, selected_rows
from workbench.engine.answers import answer_cells


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
    alone = layer_effects(d.ctx, selected_rows(d, "bcr", 0.5))
    assert bcr.equals(alone)
    assert "layer_effects" in plots.diagnosis_figures(d, selectors=["bcr"])
    assert "layer by layer" in diagnosis_to_html(d) and "layer by layer" not in diagnosis_to_html(plain)
