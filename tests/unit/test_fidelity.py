"""The fidelity probe on tiny random models: calibration, masking, exact endpoints, bank and
subspace geometry, batched reading, bad input, and the run folder with its figures."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from conftest import tiny_model
from workbench.decode import greedy_answer, greedy_answers
from workbench.errors import WorkbenchError
from workbench.experiments import fidelity as fid
from workbench.experiments import fidelity_probe as probe_module
from workbench.experiments import fidelity_conditions as fc
from workbench.kv import KVCache
from workbench.layout import chat_frame
from workbench.runstore import load_fidelity
from workbench.splice import prefill, prefill_many, sender_cache

SMALL = dict(cosines=(0.99, 0.9), alphas=(0, 0.5, 1), layers=(0, 1, 3), bank_ranks=(1, 2), bank_alphas=(0.5, 1),
             bank_size=4, pool_sizes=(1, 2), proj_cos=(0.95,), max_new_tokens=4, progress=False)


@pytest.fixture(scope="module")
def probe(tiny_llama):
    items, skipped = fid.prepare_items(tiny_llama, fid.fidelity_examples(3, seed=0), fid.PROBE_FORMAT)
    assert not skipped
    item = items[0]
    ss = item.suffix_start
    native = prefill(tiny_llama, item.layout.ids[:ss])
    floor = prefill(tiny_llama, item.masked_ids[:ss])
    return tiny_llama, items, item, native, floor


def _prefix(model) -> KVCache:
    before, _ = chat_frame(model.tokenizer, None)
    return prefill(model, torch.tensor(model.tokenizer(before, add_special_tokens=False)["input_ids"]))


# --------------------------------------------------------------------------- conditions


@pytest.mark.parametrize("target", [0.9999, 0.999, 0.99, 0.95, 0.8, 0.5])
def test_noise_calibration_hits_the_target_key_cosine(probe, target):
    model, _, item, native, floor = probe
    sub = fc.noisy_cache(native, item.start, target, probe_module._generator(0, "t", target))
    got = fc.fidelity(sub, native, floor, item.start, item.fact_rows)
    assert abs(got.key - target) < 1e-3 and abs(got.value - target) < 1e-3, got
    for layer in range(native.n_layers):  # calibrated per layer, not just on average
        cos = fc.row_cosines(sub.keys[layer, :, item.start:], native.keys[layer, :, item.start:]).mean()
        assert abs(float(cos) - target) < 1e-3
    assert torch.equal(sub.keys[:, :, :item.start], native.keys[:, :, :item.start])  # prefix untouched
    assert sub.keys.shape == native.keys.shape


def test_masking_keeps_the_length_and_removes_the_fact(probe):
    model, items, *_ = probe
    for item in items:
        assert item.masked_ids.shape == item.layout.ids.shape
        changed = torch.nonzero(item.masked_ids != item.layout.ids)[:, 0]
        assert len(changed) and torch.equal(changed, item.fact_rows)
        assert item.start <= int(changed.min()) and int(changed.max()) < item.fact_end
        seg = slice(item.start, item.fact_end)
        gold = fc.normalize_answer(item.example.gold[0])
        assert gold in fc.normalize_answer(model.tokenizer.decode(item.layout.ids[seg]))
        assert gold not in fc.normalize_answer(model.tokenizer.decode(item.masked_ids[seg]))


def test_alpha_one_reproduces_the_native_cache_exactly_and_zero_the_floor(probe):
    _, _, item, native, floor = probe
    for one in (1, 1.0):
        got = fc.interpolate(floor, native, one)
        assert torch.equal(got.keys, native.keys) and torch.equal(got.values, native.values)
    got = fc.interpolate(floor, native, 0.0)
    assert torch.equal(got.keys, floor.keys) and torch.equal(got.values, floor.values)
    # lerp itself is exact at the endpoint too (no special case needed for the arithmetic)
    assert torch.equal(torch.lerp(floor.keys, native.keys, 1.0), native.keys)


def test_matched_interpolation_and_layer_replacement(probe):
    _, _, item, native, floor = probe
    target = 0.999
    sub, weights = fc.matched_interpolation(floor, native, item.start, target)
    per_layer = fc.row_cosines(sub.keys[:, :, item.start:], native.keys[:, :, item.start:]).mean((1, 2))
    floor_cos = fc.row_cosines(floor.keys[:, :, item.start:], native.keys[:, :, item.start:]).mean((1, 2))
    for layer in range(native.n_layers):
        if floor_cos[layer] < target:
            assert abs(float(per_layer[layer]) - target) < 1e-3 and 0 < weights[layer] < 1
        else:
            assert weights[layer] == 0
    mixed = fc.replace_layers(native, sub, 1)
    assert torch.equal(mixed.keys[0], sub.keys[0]) and torch.equal(mixed.keys[1:], native.keys[1:])
    assert fc.fidelity(mixed, native, floor, item.start, item.fact_rows, layers=0).key == 1.0


def test_bank_retrieval_finds_a_key_and_puts_it_back_at_the_right_position(probe):
    model, _, item, native, _ = probe
    prefix = _prefix(model)
    assert item.start == prefix.n_positions
    ids = item.layout.ids[item.start:item.suffix_start]
    other = fid.fidelity_examples(1, seed=0, offset=fid.BANK_OFFSET)[0].passages[0] + "\n\n"
    bank = fc.build_bank(model, prefix, [torch.tensor(model.tokenizer(other)["input_ids"]), ids])
    # the bank holds the example's own passage (second, at later bank rows): each key's rank-1
    # neighbour is itself (or an identical key: layer 0 keys depend on the token alone), and
    # alpha = 1 rebuilds the native cache after undoing and redoing RoPE
    nb = fc.bank_neighbours(bank, model.adapter, native, item.start, 2)
    own = bank.spans[1][0] + torch.arange(len(ids))
    assert torch.equal(nb[1:, ..., 0], own.expand_as(nb[1:, ..., 0]))
    back = fc.bank_substitute(native, bank, model.adapter, nb, item.start, 1, 1.0)
    assert torch.allclose(back.keys, native.keys, atol=1e-5) and torch.allclose(back.values, native.values, atol=1e-6)
    with pytest.raises(WorkbenchError, match="exceeds the bank"):
        fc.bank_neighbours(bank, model.adapter, native, item.start, bank.n_rows + 1)


def test_column_space_projection_stays_in_the_key_space():
    model = tiny_model("llama", num_key_value_heads=4, head_dim=32)  # kv_head * d_head = 128 > hidden 64
    items, _ = fid.prepare_items(model, fid.fidelity_examples(1, seed=0), fid.PROBE_FORMAT)
    item = items[0]
    native = prefill(model, item.layout.ids[:item.suffix_start])
    space = fc.wk_colspace(model.adapter)
    assert space.ranks() == (64, 64)
    sub = fc.subspace_noisy_cache(native, item.start, 0.95, space, model.adapter, probe_module._generator(0, "p"))
    assert abs(float(fc.row_cosines(sub.keys[:, :, item.start:], native.keys[:, :, item.start:]).mean()) - 0.95) < 1e-3
    end = native.n_positions
    delta = model.adapter.rotate_keys(sub.keys[:, :, item.start:] - native.keys[:, :, item.start:],
                           -torch.arange(item.start, end))
    for layer, u in enumerate(space.keys):
        flat = delta[layer].permute(1, 0, 2).reshape(end - item.start, -1)
        outside = flat - (flat @ u) @ u.T
        assert outside.norm() < 1e-4 * flat.norm()
    full = fc.wk_colspace(tiny_model("llama").adapter)  # 2 * 16 = 32 <= 64: the whole key space
    assert full.ranks() == (32, 32)


def test_augmented_sender_lands_at_the_readers_positions(probe):
    model, _, item, native, _ = probe
    prefix = _prefix(model)
    sender = sender_cache(model, prefix, item.layout.ids[item.start:item.suffix_start])
    rebuilt = fc.augmented_cache(model.adapter, prefix, [sender], prefix.n_positions)
    assert torch.allclose(rebuilt.keys, native.keys, atol=1e-5)
    twice = fc.augmented_cache(model.adapter, native, [sender], prefix.n_positions)
    assert twice.n_positions == native.n_positions + sender.n_positions
    moved = model.adapter.rerotate(sender.keys, native.n_positions - prefix.n_positions)
    assert torch.allclose(twice.keys[:, :, native.n_positions:], moved)


def test_batched_reading_matches_greedy_answer_one_by_one(probe):
    model, _, item, native, floor = probe
    suffix = item.layout.ids[item.suffix_start:]
    noisy = fc.noisy_cache(native, item.start, 0.9, probe_module._generator(0, "r"))
    longer = fc.augmented_cache(model.adapter, floor, [native.slice(item.start, item.suffix_start)], item.start)
    caches = [native, floor, noisy, longer]  # two lengths: each cache's suffix at its own positions
    got = greedy_answers(model, caches, suffix, max_new_tokens=6)
    want = [greedy_answer(model, c, suffix, max_new_tokens=6) for c in caches]
    assert got == want  # text, token ids and the stop flag
    assert greedy_answers(model, caches, suffix, max_new_tokens=6, max_bytes=1) == want  # a cache a group


@pytest.mark.parametrize("max_bytes", [1, None])  # a group per passage; all in one group
def test_prefill_many_matches_prefill(probe, max_bytes):
    model, items, *_ = probe
    prefix = _prefix(model)
    ids = [it.layout.ids[it.start:it.fact_end] for it in items][::-1]  # not in order of length
    assert len({len(x) for x in ids}) > 1
    kw = {} if max_bytes is None else {"max_bytes": max_bytes}
    for got, x in zip(prefill_many(model, ids, past=prefix, **kw), ids, strict=True):
        want = prefill(model, x, past=prefix)
        assert got.n_positions == want.n_positions
        assert torch.allclose(got.keys, want.keys, atol=1e-5) and torch.allclose(got.values, want.values, atol=1e-5)


def test_metric_is_gold_contained_after_normalization():
    assert fc.is_correct("The Ambraspire.", ["Ambraspire"])
    assert fc.is_correct("ambraspire, a city", ["Ambraspire"])
    assert not fc.is_correct("unknown unknown.", ["Ambraspire"])


# --------------------------------------------------------------------------- bad input


@pytest.fixture
def no_work(monkeypatch):
    """Fail loudly if any model computation starts."""
    def boom(*args, **kwargs):
        raise AssertionError("work started before the input was checked")
    monkeypatch.setattr(fid, "prefill", boom)
    monkeypatch.setattr(fc, "prefill_many", boom)
    monkeypatch.setattr(probe_module, "greedy_answers", boom)


@pytest.mark.parametrize("bad, match", [
    (dict(cosines=(0.99, 0.0)), "cosine target must lie in"),
    (dict(cosines=(1.5,)), "cosine target must lie in"),
    (dict(layer_cos=-0.2), "cosine target must lie in"),
    (dict(proj_cos=(2.0,)), "cosine target must lie in"),
    (dict(layers=(0, 4)), "out of range"),
    (dict(layers=(-1,)), "out of range"),
    (dict(bank_ranks=(1, 10_000), bank_size=2), "exceeds the bank"),
    (dict(pool_sizes=(0, 2)), "N >= 1 senders"),
    (dict(pool_sizes=(8,), bank_size=4), "raise bank_size"),
    (dict(alphas=(1.2,)), "mixing weight"),
    (dict(n=0), "n must be"),
    (dict(subspaces=("nope",)), "unknown subspace"),
])
def test_bad_input_errors_before_any_work(tiny_llama, tmp_path, no_work, bad, match):
    kwargs = {**SMALL, "n": 2, **bad}
    n = kwargs.pop("n")
    with pytest.raises(WorkbenchError, match=match):
        fid.run_fidelity(tiny_llama, tmp_path / "out", n=n, **kwargs)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_a_folder_of_other_files_is_never_replaced(tiny_llama, tmp_path, no_work):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(WorkbenchError, match="did not write"):
            fid.run_fidelity(tiny_llama, out, n=2, force=force, **SMALL)
    assert (out / "keep.txt").read_text() == "mine"


# --------------------------------------------------------------------------- the run folder


@pytest.fixture(scope="module")
def run(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "fid"
    fid.run_fidelity(tiny_llama, out, n=4, **SMALL)
    return out


def test_run_writes_tables_and_manifest_atomically(run):
    names = sorted(p.name for p in run.iterdir())
    assert names == sorted(["manifest.json", *(f"{t}.parquet" for t in fid.TABLES)])
    assert not [p for p in run.parent.iterdir() if p.name.startswith(".")]  # no temp folder left
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "fidelity" and manifest["status"] == "complete"
    assert manifest["model"]["name"] == "tiny-llama" and manifest["details"]["n_examples"] == 4
    assert manifest["args"]["cosines"] == [0.99, 0.9] and manifest["start"] <= manifest["end"]
    tables = load_fidelity(run).tables
    cond = tables["conditions"]
    assert set(cond["condition"]) == {"floor", "reference", "noise", "floor_noise", "genuine", "layers", "bank",
                                      "subspace_noise", "augment"}
    assert set(cond.loc[cond["condition"] == "genuine", "variant"]) == {"kv", "k", "v", "fact"}
    assert set(cond.loc[cond["condition"] == "bank", "variant"]) == {"floor", "native"}
    assert (cond["n"] == 4).all() and cond["transfer"].between(0, 1).all()
    assert ((cond["low"] <= cond["transfer"]) & (cond["transfer"] <= cond["high"])).all()
    noise = cond[cond["condition"] == "noise"]
    assert ((noise["key_cos"] - noise["target_cos"]).abs() < 1e-3).all()
    assert len(tables["answers"]) == 4 * len(cond)
    assert list(tables["anchors"]["condition"]) == ["floor", "reference"]
    assert list(tables["augmentation"]["pool"]) == [1, 2]
    ref = cond[cond["condition"] == "reference"].iloc[0]
    g1 = cond[(cond["condition"] == "genuine") & (cond["alpha"] == 1) & (cond["variant"] == "kv")].iloc[0]
    assert g1["correct"] == ref["correct"] and g1["key_cos"] == 1.0


def test_force_replaces_a_run_and_a_failed_run_leaves_nothing(tiny_llama, tmp_path, monkeypatch):
    out = tmp_path / "fid"
    fid.run_fidelity(tiny_llama, out, n=1, **SMALL)
    (out / "old.txt").write_text("old")
    fid.run_fidelity(tiny_llama, out, n=1, force=True, **SMALL)
    assert not (out / "old.txt").exists() and (out / "manifest.json").is_file()

    def broken(*args, **kwargs):
        raise RuntimeError("killed")
    monkeypatch.setattr(fid, "probe_example", broken)
    with pytest.raises(RuntimeError):
        fid.run_fidelity(tiny_llama, tmp_path / "other", n=1, **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fid"]


def test_figures_build_from_the_tables(run):
    from workbench import plots
    from workbench.plots.fidelity import bank_heatmap, fidelity_figures, layer_sweep, pool_scaling, transfer_vs_cosine
    from workbench.selectors.registry import default_selectors

    cond = load_fidelity(run).tables["conditions"]
    figs = fidelity_figures(cond)
    assert set(figs) == {"cosine", "alpha", "layers", "bank", "pool"}
    assert len(figs["alpha"].data) == 4  # keys and values, keys only, values only, the fact's rows
    assert {t.name for t in transfer_vs_cosine(cond).data} >= {"isotropic noise on the native cache"}
    assert len(layer_sweep(cond).data) == 2
    heat = bank_heatmap(cond).data[0]
    assert heat.z.shape == (2, 2)
    pool = pool_scaling(cond)
    assert len(pool.data) == 4 and pool.data[-1].yaxis == "y2"  # the lift in its own panel, under the sender
    for fig in figs.values():  # no text on the plotting area; floor and reference are legend lines
        assert plots.figure_problems(fig) == [] and not fig.layout.annotations
    floor = [s for s in figs["alpha"].layout.shapes if (s.name or "").startswith("floor (fact masked)")]
    assert len(floor) == 1 and floor[0].showlegend and floor[0].layer == "above"  # over the grid
    assert figs["cosine"].layout.xaxis.exponentformat == "power"  # 10⁻⁵, never "10µ"
    palette = {plots.selector_color(s) for s in default_selectors(expensive=True)}
    assert not {t.line.color for fig in figs.values() for t in fig.data if t.type == "scatter" and t.line.color} & palette
    assert isinstance(pd.DataFrame(cond), pd.DataFrame)


def test_genuine_variants_mix_keys_values_or_the_fact_rows_only(probe):
    model, _, item, native, floor = probe
    keys_only = fc.interpolate(floor, native, 0.0, values=False)
    assert torch.equal(keys_only.keys, floor.keys) and torch.equal(keys_only.values, native.values)
    values_only = fc.interpolate(floor, native, 0.0, keys=False)
    assert torch.equal(values_only.keys, native.keys) and torch.equal(values_only.values, floor.values)
    fact = fc.interpolate(floor, native, 0.0, rows=item.fact_rows)
    others = torch.ones(native.n_positions, dtype=torch.bool)
    others[item.fact_rows] = False
    assert torch.equal(fact.keys[:, :, item.fact_rows], floor.keys[:, :, item.fact_rows])
    assert torch.equal(fact.keys[:, :, others], native.keys[:, :, others])
    assert torch.equal(fc.interpolate(floor, native, 1.0, rows=item.fact_rows).keys, native.keys)


def test_the_papers_arms_start_from_the_floor(probe):
    """Table 2 adds noise to the reader's uninformative (floor) cache; Table 4's alpha = 0 is the floor."""
    model, items, item, native, floor = probe
    noisy = fc.noisy_cache(floor, item.start, 0.99, probe_module._generator(0, "floor"))
    got = fc.row_cosines(noisy.keys[:, :, item.start:], floor.keys[:, :, item.start:]).mean()
    assert abs(float(got) - 0.99) < 1e-3
    prefix = _prefix(model)
    bank = fc.build_bank(model, prefix, [it.layout.ids[it.start:it.fact_end] for it in items[1:]])
    nb = fc.bank_neighbours(bank, model.adapter, native, item.start, 1)
    assert torch.equal(fc.bank_substitute(floor, bank, model.adapter, nb, item.start, 1, 0.0).keys, floor.keys)


def test_the_threshold_is_a_number_with_an_interval():
    """Transfer steps from 0 to the reference between alpha 0.85 and 0.9: half is crossed at 0.875."""
    from workbench.experiments.fidelity_tables import thresholds

    rows = []
    for e in range(10):
        rows.append({"example": f"e{e}", "condition": "reference", "variant": "", "alpha": float("nan"),
                     "correct": True, "key_cos": 1.0, "key_cos_fact": 1.0})
        for alpha in (0.8, 0.85, 0.9, 0.95):
            rows.append({"example": f"e{e}", "condition": "genuine", "variant": "kv", "alpha": alpha,
                         "correct": alpha >= 0.9, "key_cos": alpha, "key_cos_fact": alpha ** 2})
    table = thresholds(pd.DataFrame(rows), resamples=200).set_index("variant")
    kv = table.loc["kv"]
    assert kv["alpha"] == pytest.approx(0.875) and kv["alpha_low"] == pytest.approx(0.875)
    assert kv["key_cos"] == pytest.approx(0.875)
    assert kv["key_cos_fact"] == pytest.approx((0.85 ** 2 + 0.9 ** 2) / 2)
    assert kv["never_crossed"] == 0.0 and kv["half_reference"] == 0.5
