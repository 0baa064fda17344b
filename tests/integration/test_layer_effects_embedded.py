"""diagnose's layer-effects table, read from its batched pass, against the serial path on the
embedded SmolLM2-135M (slow tier)."""

import pytest

import workbench as wb
from tests.conftest import same_layer_effects
from workbench.diagnosis import diagnose
from workbench.diagnosis.layer_effects import layer_effects_table, selected_rows

pytestmark = pytest.mark.slow


def test_the_batched_table_is_the_serial_one_on_smollm2(smol):
    selectors = ("cacheblend", "bcr:grow", "random")  # a few of Live's quick selectors
    # no attribution check: no part of the table, and 5/6 of the diagnosis's time on two cores
    d = diagnose(smol, wb.load_example("synthetic#5"), selectors=selectors, budgets=(0.1, 0.3), coin_draws=1,
                 max_new_tokens=16, attribution=False, progress=False, layer_effects=True)
    effects = d.tables["layer_effects"]
    keys = list(dict.fromkeys(zip(effects["selector"], effects["budget"])))
    assert len(keys) == len(selectors) * 2 and len(effects) == len(keys) * 3 * smol.adapter.n_layers
    serial = layer_effects_table(d.ctx, {(s, b): selected_rows(d, s, b, 0 if s == "random" else None)
                                         for s, b in keys})
    same_layer_effects(effects, serial)
