"""DenseDev: its top rows are the rows of largest exact deviation, and its per-layer normalisation
(`signals.deviation.densedev_scores`) on tiny models (issue 43, item 4)."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.diagnosis import diagnose
from workbench.kv import KVCache
from workbench.selectors.budget import budget_rows
from workbench.selectors import parse_selector
from workbench.signals import SignalSet
from workbench.signals.deviation import DENSEDEV_NORMS, densedev_scores, kv_deviation, mean_row_norms


@pytest.fixture(scope="module", params=["llama", "gemma3_text"])
def ctx(request):
    return wb.build_context(tiny_model(request.param), small_example())


def stated_deviation(spliced: KVCache, dense: KVCache, pos: torch.Tensor) -> torch.Tensor:
    """The docstring's definition, written out: sum over layers of ||dK||^2 + ||dV||^2. [n]"""
    dk = (spliced.keys - dense.keys)[:, :, pos].float().square().sum((1, 3))  # [layer, n]
    dv = (spliced.values - dense.values)[:, :, pos].float().square().sum((1, 3))  # [layer, n]
    return (dk + dv).sum(0)


def order(scores: torch.Tensor) -> list[int]:
    return torch.sort(scores, descending=True, stable=True).indices.tolist()


def test_densedev_ranks_rows_by_their_exact_deviation(ctx):
    expected = stated_deviation(ctx.spliced, ctx.dense, ctx.reused_positions)  # [n_reused]
    got = parse_selector("densedev").info.score(SignalSet(ctx))
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-9)
    assert order(got) == order(expected)


def test_densedev_picks_the_pool_rows_of_largest_deviation(ctx):
    torch.set_num_threads(1)
    d = diagnose(ctx.model, ctx.example, selectors=("densedev",), budgets=(0.1, 0.3), ctx=ctx, progress=False,
                 attribution=False)
    pool = ctx.layout.changed_positions
    deviation = stated_deviation(ctx.spliced, ctx.dense, pool)  # [n_pool]
    for b in (0.1, 0.3):
        top = pool[order(deviation)[:budget_rows(b, len(pool))]]
        assert sorted(d.picks("densedev", b)) == sorted(top.tolist())


def scaled(cache: KVCache, layer: int, factor: float) -> KVCache:
    """`cache` with one layer's values multiplied by `factor` (a power of two: exact)."""
    values = cache.values.clone()
    values[layer] *= factor
    return KVCache(cache.keys, values)


def scores(spliced: KVCache, dense: KVCache, pos: torch.Tensor, norm: str) -> torch.Tensor:
    return densedev_scores(kv_deviation(spliced, dense, pos), norm, mean_row_norms(dense, pos))


def deciding_layers(spliced: KVCache, dense: KVCache, pos: torch.Tensor, norm: str) -> torch.Tensor:
    """Per row, the layer that contributes most to its score. [n]"""
    dev, norms = kv_deviation(spliced, dense, pos), mean_row_norms(dense, pos)
    k2, v2 = dev[("k", "l2")].square(), dev[("v", "l2")].square()  # [layer, n]
    if norm == "layer":
        k2, v2 = k2 / norms["k"].square()[:, None], v2 / norms["v"].square()[:, None]
    return (k2 + v2).argmax(0)


def test_none_is_todays_densedev_bit_for_bit(ctx):
    signals = SignalSet(ctx)
    assert torch.equal(densedev_scores(signals["deviation"]), signals.token("densedev"))
    assert torch.equal(densedev_scores(signals["deviation"], "none"), parse_selector("densedev").info.score(signals))


def test_the_layer_norm_divides_each_layer_by_its_mean_dense_row_norm(ctx):
    pos = ctx.reused_positions
    rows = ctx.dense.values[:, :, pos].transpose(1, 2).flatten(2)  # [layer, n, kv_head * d_head]
    torch.testing.assert_close(mean_row_norms(ctx.dense, pos)["v"], rows.norm(dim=-1).mean(1))
    dk = (ctx.spliced.keys - ctx.dense.keys)[:, :, pos].square().sum((1, 3))  # [layer, n]
    dv = (ctx.spliced.values - ctx.dense.values)[:, :, pos].square().sum((1, 3))
    nk = ctx.dense.keys[:, :, pos].transpose(1, 2).flatten(2).norm(dim=-1).mean(1)  # [layer]
    expected = (dk / nk[:, None] ** 2 + dv / rows.norm(dim=-1).mean(1)[:, None] ** 2).sum(0)
    torch.testing.assert_close(scores(ctx.spliced, ctx.dense, pos, "layer"), expected, rtol=1e-4, atol=1e-9)


def test_a_layer_with_large_values_decides_raw_densedev_but_not_the_normalised_one():
    # Llama: every layer after the first deviates (a tiny Gemma's window leaves layer 1 exact past 16 rows)
    ctx = wb.build_context(tiny_model("llama"), small_example())
    pos, big = ctx.layout.changed_positions, 1  # layer 0's rows are exact in a splice
    spliced, dense = scaled(ctx.spliced, big, 1024.0), scaled(ctx.dense, big, 1024.0)
    before = deciding_layers(ctx.spliced, ctx.dense, pos, "layer")
    assert not bool((before == big).all())
    assert bool((deciding_layers(spliced, dense, pos, "none") == big).all())  # the large layer decides every row
    assert torch.equal(deciding_layers(spliced, dense, pos, "layer"), before)  # normalised: as before the scaling
    torch.testing.assert_close(scores(spliced, dense, pos, "layer"), scores(ctx.spliced, ctx.dense, pos, "layer"))
    assert order(scores(spliced, dense, pos, "layer")) != order(scores(spliced, dense, pos, "none"))
    # "none" stays the raw sum, over whatever caches it is given
    torch.testing.assert_close(scores(spliced, dense, pos, "none"), stated_deviation(spliced, dense, pos), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.parametrize("norm", ["Layer", "", None, "rms"])
def test_a_bad_norm_is_a_one_line_error(ctx, norm):
    dev = SignalSet(ctx)["deviation"]
    with pytest.raises(wb.WorkbenchError) as err:
        densedev_scores(dev, norm)
    assert str(err.value) == f"densedev_norm must be one of {', '.join(DENSEDEV_NORMS)}, got {norm!r}"
    assert "\n" not in str(err.value)
    with pytest.raises(wb.WorkbenchError, match="needs the reference's mean row norms"):
        densedev_scores(dev, "layer")


# ----------------------------------------------------------------------------- the option (densedev_norm)


def test_the_option_reaches_the_selector_and_none_is_unchanged(ctx):
    from workbench.signals import SignalOptions

    pos, plain = ctx.reused_positions, SignalSet(ctx)
    named_none = parse_selector("densedev").info.score(SignalSet(ctx, SignalOptions(densedev_norm="none")))
    assert torch.equal(named_none, parse_selector("densedev").info.score(plain))
    layer = parse_selector("densedev").info.score(SignalSet(ctx, SignalOptions(densedev_norm="layer")))
    assert torch.equal(layer, densedev_scores(plain["deviation"], "layer", mean_row_norms(ctx.dense, pos)))


def test_the_option_is_recorded_by_to_dict_and_read_back():
    from workbench.diagnosis import DiagnoseConfig

    config = DiagnoseConfig.of(selectors=("densedev",), densedev_norm="layer").checked()
    assert config.signal_options.densedev_norm == "layer" and config.to_dict()["densedev_norm"] == "layer"
    assert DiagnoseConfig.from_dict(config.to_dict()) == config
    assert "densedev_norm" not in DiagnoseConfig.of(selectors=("densedev",)).to_dict()  # earlier manifests as written
    with pytest.raises(wb.WorkbenchError) as err:
        DiagnoseConfig.of(densedev_norm="layers").checked()
    assert str(err.value) == "densedev_norm must be one of none, layer, got 'layers'"


def test_the_cli_sets_the_option():
    from workbench.cli.main import build_parser
    from workbench.cli.run import sweep_config

    base = ["run", "--dataset", "synthetic", "--out", "unused"]
    assert sweep_config(build_parser().parse_args(base)).diagnose.signal_options.densedev_norm == "none"
    args = build_parser().parse_args([*base, "--densedev-norm", "layer"])
    assert sweep_config(args).diagnose.to_dict()["densedev_norm"] == "layer"
