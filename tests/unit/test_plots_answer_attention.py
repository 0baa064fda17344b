"""`plots.answer_attention`: one panel per cache, a bar per answer token stacked by region, the mean over
the layers chosen, free of `figure_problems`."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from workbench.diagnosis.answer_attention import COLUMNS, REGIONS
from workbench.plots import figure_problems
from workbench.plots.answer_attention import REGION_STYLE, answer_attention_figure


def _table() -> pd.DataFrame:
    """Two caches, two layers, three answer tokens; layer 1 looks at the evidence, layer 0 at the prompt."""
    rows = []
    for cache, layer, step in itertools.product(("dense", "repaired"), (0, 1), (0, 1, 2)):
        mass = dict.fromkeys(REGIONS, 0.0)
        mass["evidence" if layer else "prompt"] = 1.0
        rows.append((cache, layer, step, f"t{step}", *(mass[r] for r in REGIONS)))
    return pd.DataFrame(rows, columns=COLUMNS)


def test_each_cache_is_a_panel_and_the_bars_are_the_mean_over_the_layers_chosen():
    assert tuple(REGION_STYLE) == REGIONS
    fig = answer_attention_figure(_table())
    assert figure_problems(fig) == [] and "layers 0-1" in fig.layout.title.text
    dense_evidence = next(t for t in fig.data if t.name == "the evidence" and t.yaxis == "y")
    assert list(dense_evidence.y) == pytest.approx([0.5, 0.5, 0.5])
    assert {t.yaxis for t in fig.data} == {"y", "y2"} and fig.layout.yaxis2.title.text == "repaired cell: attention"
    only = answer_attention_figure(_table(), (1, 1))
    assert "layer 1 " in only.layout.title.text
    assert list(next(t for t in only.data if t.name == "the evidence").y) == pytest.approx([1.0, 1.0, 1.0])
