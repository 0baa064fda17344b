"""The fidelity probe on the embedded SmolLM2-135M (slow tier): small n, every condition."""

import json

import pytest

from workbench.experiments import fidelity as fid
from workbench.runstore import load_fidelity

pytestmark = pytest.mark.slow


def test_reference_beats_the_floor_and_every_condition_is_tabled(smol, tmp_path):
    out = fid.run_fidelity(
        smol, tmp_path / "fid", n=6, cosines=(0.99, 0.8), alphas=(0, 0.5, 1), layers=(0, 1, smol.adapter.n_layers),
        bank_ranks=(1,), bank_alphas=(1,), bank_size=8, pool_sizes=(1, 2), proj_cos=(0.95,), progress=False)
    tables = load_fidelity(out).tables
    cond = tables["conditions"].set_index(["condition", "variant"])
    assert set(tables["conditions"]["condition"]) == {
        "floor", "reference", "noise", "floor_noise", "genuine", "layers", "bank", "subspace_noise", "augment"}
    assert set(tables["conditions"].query("condition == 'subspace_noise'")["variant"]) == {"wk_colspace", "bank_span"}
    assert set(tables["conditions"].query("condition == 'genuine'")["variant"]) == {"kv", "k", "v", "fact"}
    assert set(tables["conditions"].query("condition == 'bank'")["variant"]) == {"floor", "native"}
    assert set(tables["conditions"].query("condition == 'augment'")["variant"]) == {
        "sender", "masked_sender", "distractors_only"}
    assert (tables["conditions"]["n"] == 6).all()
    reference = int(cond.loc[("reference", ""), "correct"])
    floor = int(cond.loc[("floor", ""), "correct"])
    assert reference > floor, (reference, floor)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["model"]["n_layers"] == smol.adapter.n_layers
    # SmolLM2's W_K maps 576 -> 3 x 64: full row rank, so its column space is the whole key space
    assert manifest["details"]["subspace_ranks"]["wk_colspace"]["keys"] == 192
