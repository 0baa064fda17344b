"""The unit-of-choice curve on the embedded SmolLM2-135M, small setting (slow tier)."""

import pytest

from workbench.experiments.unit_curve import run_curve
from workbench.runstore import load_curve

pytestmark = pytest.mark.slow


def test_small_curve_on_the_embedded_model(smol, tmp_path):
    out = run_curve(smol, tmp_path / "curve", tokens=256, prompts=2, units=(1, 16), seeds=2, progress=False)
    run = load_curve(out)
    manifest, curve, summary = run.manifest, run.curve, run.summary
    assert manifest.kind == "curve" and manifest.model_name == "smollm2-135m"
    assert len(curve) == 2 * 2 * 3
    assert curve["full_restore_error"].max() < 1e-4  # restoring every row reproduces dense
    unrepaired = curve["unrepaired_error"]
    assert unrepaired.min() > 1e-3  # the splice carries real cross-passage error
    # restoring 20% of the rows, informed or not, removes part of it and never makes it worse
    assert (curve["error"] < curve["unrepaired_error"]).all()
    assert summary["unit"].tolist() == [1, 16]
    single = curve[curve["unit"] == 1]
    assert (single["n_rows_restored"] == (0.2 * single["n_segment"]).round()).all()
    assert bool(summary.set_index("unit").loc[1, "budget_matched"])
    # unit 16 keeps max(1, round(0.2 * n_chunks)) whole chunks: the share drifts from 20%
    sixteen = curve[curve["unit"] == 16]
    assert (sixteen["n_kept"] == (0.2 * sixteen["n_chunks"]).round().clip(lower=1)).all()
    # single rows: attention-informed restoration beats the coin on average
    assert summary.set_index("unit").loc[1, "gap"] > 0
