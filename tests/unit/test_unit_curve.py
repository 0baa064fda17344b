"""The unit-of-choice curve (BCR Table 8) on a tiny random Llama: probe, units, run folder, figure."""

import json

import pandas as pd
import pytest
import torch

from conftest import FAMILIES, tiny_model
from hf_oracle import record_attention_inputs
from workbench.context import context_of_length
from workbench.engine.layers import rotated_qkv
from workbench.errors import WorkbenchError
from workbench.experiments.unit_curve import attention_probe, random_seed_for, run_curve
from workbench.runstore import load_curve, new_manifest
from workbench.selectors import random_scores, select_rows
from workbench.signals.attention import draft_attention


def table8(scores, unit, budget):
    """The unit curve's choice: Table 8's chunk count."""
    return select_rows(scores, 0, "chunk", chunk_size=unit, chunk_counting="table8", share=budget)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def ctx(model):
    return context_of_length(model, 256, seed=0)


@pytest.fixture(scope="module")
def probe(ctx):
    return attention_probe(ctx)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_probe_reads_the_suffix_queries_at_hook_points_equal_to_the_rebuilt_ones(family):
    """The former probe: an HF prefill of the suffix over the dense cache records each layer's
    attention input, whose queries the family adapter projects and rotates; keys and values
    come from the HF cache."""
    ctx = context_of_length(tiny_model(family), 96, seed=0)
    ad, n = ctx.model.adapter, ctx.layout.suffix_start
    got = attention_probe(ctx)
    with torch.inference_mode(), record_attention_inputs(ad) as hidden:  # per layer [[row, hidden]]
        out = ctx.model.hf(input_ids=ctx.suffix_ids[None], cache=ctx.dense.to_hf(), use_cache=True)
        positions = torch.arange(n, n + len(ctx.suffix_ids))
        queries = [rotated_qkv(ad, l, hidden[l][0], positions)[0].float() for l in range(ad.n_layers)]
    layers = out.cache.layers
    assert torch.equal(got.query_positions, positions)
    assert all(torch.equal(a, b) for a, b in zip(got.queries, queries, strict=True))
    assert all(torch.equal(a, l.keys[0, :, n:].float()) for a, l in zip(got.suffix_keys, layers, strict=True))
    assert all(torch.equal(a, l.values[0, :, n:].float()) for a, l in zip(got.suffix_values, layers, strict=True))


@pytest.fixture(scope="module")
def run(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("curve") / "run"
    run_curve(model, out, tokens=256, prompts=2, units=(1, 16, 1024), seeds=2, progress=False)
    return out


def test_dense_output_matches_hf_attention(ctx, probe):
    """The probe's dense attention output equals what HF feeds o_proj for the suffix over dense."""
    model, seen = ctx.model, {}

    def hook(l):
        def pre(module, args):
            seen[l] = args[0][0]  # [row, head * d_head]
        return pre

    handles = [layer.self_attn.o_proj.register_forward_pre_hook(hook(l)) for l, layer in enumerate(model.adapter.layers)]
    try:
        with torch.inference_mode():
            model.hf(input_ids=ctx.suffix_ids[None], cache=ctx.dense.to_hf(), use_cache=True)
    finally:
        for h in handles:
            h.remove()
    for l, out in enumerate(probe.dense_outputs):  # [head, row, d_head]
        want = seen[l].view(out.shape[1], out.shape[0], out.shape[2]).transpose(0, 1)
        torch.testing.assert_close(out, want.float(), atol=1e-5, rtol=1e-4)


def test_restore_all_is_exact_and_none_is_the_unrepaired_error(ctx, probe):
    reused = ctx.reused_positions
    assert probe.error(reused) < 1e-6
    assert probe.cache_error(ctx.dense) == 0.0
    unrepaired = probe.error(reused[:0])
    assert unrepaired > 0.01
    assert probe.cache_error(ctx.spliced) == pytest.approx(unrepaired, rel=1e-9)


def test_restored_rows_copy_and_match_the_on_the_fly_mix(ctx, probe):
    keys_before = ctx.spliced.keys.clone()
    half = ctx.reused_positions[::2]
    fixed = ctx.spliced.with_rows(ctx.dense, half)
    assert torch.equal(ctx.spliced.keys, keys_before)  # never mutates the context's caches
    assert torch.equal(fixed.keys[:, :, half], ctx.dense.keys[:, :, half])
    assert probe.cache_error(fixed) == pytest.approx(probe.error(half), rel=1e-6)


def test_error_decreases_weakly_as_more_rows_are_restored(ctx, probe):
    reused = ctx.reused_positions
    order = torch.argsort(draft_attention(ctx).scores(reused), descending=True)
    errors = [probe.error(reused[order[: int(f * len(reused))]]) for f in (0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    assert all(b <= a + 1e-9 for a, b in zip(errors, errors[1:])), errors
    assert errors[0] > errors[-1]


def test_table8_chunk_count_rule():
    # Table 8's achieved budgets on a 2048-row segment: 20.0%, 20.3%, 18.8%, 25.0%, 50.0%
    scores = torch.zeros(2048)
    shares = [table8(scores, unit, 0.2).n_spent / 2048 for unit in (1, 16, 64, 256, 1024, 2048)]
    assert [round(100 * s, 1) for s in shares] == [20.0, 20.3, 18.8, 25.0, 50.0, 100.0]
    assert table8(torch.zeros(10), 4, 1.0).spans == ((0, 4), (4, 8), (8, 10))  # the last chunk is short
    assert table8(torch.zeros(12), 4, 0.01).n_units == 1  # max(1, ...): never nothing, no skip rule
    with pytest.raises(WorkbenchError, match="budget share"):
        select_rows(scores, 0, "chunk", chunk_counting="table8")


def test_table8_keeps_the_best_mean_chunks():
    scores = torch.tensor([0.0, 0.0, 5.0, 5.0, 1.0, 1.0, 9.0, 0.0])
    sel = table8(scores, 2, 0.5)  # 4 chunks, keep 2: means 0, 5, 1, 4.5
    assert sel.n_units == 2 and sel.rows.tolist() == [2, 3, 6, 7]
    assert table8(scores, 1, 0.25).rows.tolist() == [2, 6]  # 2 rows; the tie 5 = 5 goes to row 2
    assert table8(scores, 1, 0.375).rows.tolist() == [2, 3, 6]
    assert table8(scores, 1, 0.3125).n_units == 2  # round(2.5) == 2: Python's half to even
    assert table8(scores, 100, 0.2).rows.tolist() == list(range(8))


def test_random_is_seed_reproducible():
    a = table8(random_scores(300, random_seed_for(0, 1, 2)), 16, 0.2).rows
    b = table8(random_scores(300, random_seed_for(0, 1, 2)), 16, 0.2).rows
    c = table8(random_scores(300, random_seed_for(0, 1, 3)), 16, 0.2).rows
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert random_seed_for(0, 1, 2) != random_seed_for(0, 2, 1)


def test_run_folder_has_tables_and_manifest(run, model):
    loaded = load_curve(run)
    manifest, curve, summary = loaded.manifest, loaded.curve, loaded.summary
    assert manifest.kind == "curve" and manifest.status == "complete"
    assert {k: manifest.model[k] for k in model.describe()} == model.describe()
    assert manifest.args["units"] == [1, 16, 1024] and manifest.versions["torch"]
    assert len(curve) == 2 * 3 * (1 + 2)
    assert set(curve["method"]) == {"informed", "random"}
    assert {"error", "n_rows_restored", "budget_share", "unit", "prompt", "seed"} <= set(curve.columns)
    assert curve["unrepaired_error"].min() > 0 and curve["full_restore_error"].max() < 1e-6
    assert summary["unit"].tolist() == [1, 16, 1024]
    assert {"informed_error", "random_error", "gap", "gap_share", "prompts_won", "t", "p_value",
            "budget_share", "budget_matched", "unrepaired_error", "informed_budget_share",
            "random_budget_share"} <= set(summary.columns)
    assert (summary["gap"] - (summary["random_error"] - summary["informed_error"])).abs().max() < 1e-12
    whole = summary.set_index("unit").loc[1024]  # one chunk holds every row: both restore everything
    assert whole["budget_share"] == 1.0 and not whole["budget_matched"] and whole["informed_error"] < 1e-6
    assert bool(summary.set_index("unit").loc[1, "budget_matched"])
    assert not [p for p in run.parent.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_the_segment_is_the_changed_pool_by_default(model, ctx, tmp_path):
    from workbench.experiments.unit_curve import _segment

    seg = _segment(ctx, "changed")
    assert torch.equal(_segment(ctx, "all"), ctx.reused_positions)
    first = ctx.layout.passages[0]
    assert seg.numel() == ctx.n_reused - len(first) and int(seg.min()) == ctx.layout.passages[1].start
    # the first passage is exact in the splice: restoring it changes nothing
    probe = attention_probe(ctx)
    assert probe.error(torch.arange(first.start, first.end)) == pytest.approx(probe.error([]), abs=1e-6)
    out = run_curve(model, tmp_path / "skip", tokens=256, prompts=2, units=(1,), seeds=1, progress=False)
    loaded = load_curve(out)
    manifest, curve = loaded.manifest, loaded.curve
    assert manifest.args["pool"] == "changed"
    assert (curve["n_segment"] == seg.numel()).any()


def test_existing_folder_refused_and_other_kinds_rejected(run, model, tmp_path):
    with pytest.raises(WorkbenchError, match="exists"):
        run_curve(model, run, tokens=256, prompts=2, units=(1,), seeds=1, progress=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps(new_manifest("sweep", None, {})))
    with pytest.raises(WorkbenchError, match="'sweep' run, not a 'curve' run"):
        load_curve(other)
    with pytest.raises(WorkbenchError, match="no manifest"):
        load_curve(tmp_path)


class Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"the model was used ({name}) before the input was validated")


@pytest.mark.parametrize("kwargs, match", [
    (dict(units=(0, 16)), "unit"), (dict(units=()), "unit"), (dict(units=(16, 16)), "repeat"),
    (dict(budget=0.0), "budget"), (dict(budget=1.5), "budget"), (dict(budget=float("nan")), "budget"),
    (dict(prompts=1), "prompts"), (dict(seeds=0), "seeds"), (dict(tokens=8), "tokens"),
])
def test_bad_input_errors_before_work(kwargs, match, tmp_path):
    with pytest.raises(WorkbenchError, match=match):
        run_curve(Untouchable(), tmp_path / "out", **{"progress": False, **kwargs})
    assert not (tmp_path / "out").exists()


def test_figure_builds(run):
    from workbench import plots
    from workbench.plots.unit_curve import unit_curve_figure

    fig = unit_curve_figure(load_curve(run).summary)
    assert fig.layout.xaxis.type == "log"
    assert [t.name for t in fig.data] == ["informed (draft attention)", "random (mean over seeds)"]
    summary = load_curve(run).summary
    unmatched = summary.loc[~summary["budget_matched"].astype(bool), "budget_share"]
    assert sum("rows</i>" in t for t in fig.layout.xaxis.ticktext) == len(unmatched)  # under its unit's tick
    assert not fig.layout.annotations and plots.figure_problems(fig) == []
    with pytest.raises(WorkbenchError):
        unit_curve_figure(pd.DataFrame({"unit": [1]}))
