"""The second embedded model, Gemma 3 270M (sliding-window layers, a RoPE base per layer type):
the exact operations, a short diagnosis and `kvwb answer` on it (slow tier)."""

import pytest

import workbench as wb
from workbench import cli
from workbench.diagnosis import diagnose
from workbench.kv import relative_error
from workbench.selectors.budget import budget_rows
from workbench.tasks import Example

pytestmark = pytest.mark.slow

FILLER = " ".join(f"Mira Tessk walked to market number {i} and bought bread and milk for the family."
                  for i in range(40))


@pytest.fixture(scope="module")
def long_ctx(gemma3) -> wb.Context:
    """Two passages, the second longer than the 512-token window."""
    example = Example("long", ("Varek Olundi is coached by Mira Tessk.", "Mira Tessk was born in Tressamor. " + FILLER),
                      "In which city was the coach of Varek Olundi born?", ("Tressamor",))
    return wb.build_context(gemma3, example)


def test_the_model_has_both_layer_types(gemma3):
    ad = gemma3.adapter
    assert ad.family == "gemma3_text" and ad.windows.count(None) == 3 and set(ad.windows) == {512, None}
    assert ad.rope_kinds[5] == "full_attention" and ad.rope_kinds[0] == "sliding_attention"


def test_splice_is_exact_at_layer0_and_full_repair_is_dense(long_ctx):
    long_ctx.check_splice()
    assert float(long_ctx.rope_floor.max()) < 1e-4
    fixed = long_ctx.repair(long_ctx.reused_positions)
    rel = relative_error(fixed, long_ctx.dense)
    assert rel["k"].max() <= 1e-4 and rel["v"].max() <= 1e-4, (rel["k"].max(), rel["v"].max())
    assert long_ctx.generate(fixed).token_ids == long_ctx.generate(long_ctx.dense).token_ids


def test_the_first_local_layers_confine_the_splice_error_to_the_window(long_ctx):
    """Layer 1's K/V of a row 511+ tokens into its passage come from a layer-0 window that holds
    the same tokens spliced or dense: exact up to rounding. Rows nearer the start saw other tokens."""
    window = long_ctx.model.adapter.windows[0]
    seg = long_ctx.layout.passages[1]
    assert len(seg) > window + 100

    def dev(layer, rows):  # [row] relative L2 of values
        s, d = long_ctx.spliced.values[layer][:, rows], long_ctx.dense.values[layer][:, rows]
        return (s - d).norm(dim=(0, 2)) / d.norm(dim=(0, 2))
    shallow, deep = slice(seg.start, seg.start + window - 1), slice(seg.start + window - 1, seg.end)
    assert float(dev(1, deep).max()) < 1e-4
    assert float(dev(1, shallow).max()) > 1e-2
    assert float(dev(2, deep).max()) > 1e-3  # two local layers reach twice as far back


def test_a_short_diagnosis(gemma3):
    selectors = ("none", "full", "random", "cacheblend", "cadence-grad", "bcr")
    d = diagnose(gemma3, wb.load_example("synthetic#3"), selectors=selectors, budgets=(0.2,),
                 attribution=False, progress=False)
    outcomes = d.tables["outcomes"]
    assert set(outcomes["selector"]) == set(selectors)
    full = outcomes[outcomes["selector"] == "full"].iloc[0]
    assert full["answer"] == d.answers.dense.text
    chosen = outcomes[outcomes["selector"] == "cadence-grad"].iloc[0]
    assert chosen["n_recomputed"] == budget_rows(0.2, int(chosen["n_pool"])), chosen.to_dict()
    assert d.model["family"] == "gemma3_text"
    deviation = d.tables["deviation"]
    assert deviation["layer"].nunique() == gemma3.adapter.n_layers


def test_kvwb_answer_on_gemma(capsys, gemma3, monkeypatch):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: gemma3)
    assert cli.main(["answer", "--model", "gemma3-270m", "--example", "synthetic#3"]) == 0
    out = capsys.readouterr().out
    assert "Sarestead" in out and "layer-0 splice vs dense" in out
