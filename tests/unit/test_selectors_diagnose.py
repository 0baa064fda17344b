"""Each selector's definition, the registry's errors, and a Diagnosis end to end (tiny model)."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.diagnosis import Diagnosis, diagnose
from workbench.selectors.budget import budget_rows
from workbench.selectors import (
    comparison_reference, default_selectors, parse_selector, parse_selectors, reference_selectors,
    register_selector, selector_names,
)
from workbench.signals import SignalOptions, SignalSet

BUDGETS = (0.1, 0.3)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def ctx(model):
    return wb.build_context(model, small_example())


@pytest.fixture(scope="module")
def signals(ctx):
    return SignalSet(ctx)


@pytest.fixture(scope="module")
def diagnosis(model, ctx):
    torch.set_num_threads(1)
    return diagnose(model, ctx.example, budgets=BUDGETS, progress=False, ctx=ctx)


def scores(name, signals):
    return parse_selector(name).info.score(signals)


def test_densedev_is_the_exact_squared_deviation_summed_over_layers(ctx, signals):
    pos = ctx.reused_positions
    dk = (ctx.spliced.keys - ctx.dense.keys)[:, :, pos].square().sum((1, 3))  # [layer, n]
    dv = (ctx.spliced.values - ctx.dense.values)[:, :, pos].square().sum((1, 3))
    assert torch.allclose(scores("densedev", signals), (dk + dv).sum(0), rtol=1e-4)


def test_cacheblend_is_the_check_layer_value_deviation_without_dense(ctx, signals):
    """Recomputing every token through layers 0..1 is dense there, so the score equals
    ||V_dense^1 - V_splice^1||^2 although it never reads the dense cache."""
    pos = ctx.reused_positions
    expected = (ctx.dense.values[1] - ctx.spliced.values[1])[:, pos].square().sum((0, 2))
    assert torch.allclose(scores("cacheblend", signals), expected, rtol=1e-3, atol=1e-6)
    assert not parse_selector("cacheblend").info.needs_dense


def test_relay_influence_is_the_attention_later_tokens_pay_at_the_check_layer(ctx):
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_config(ctx.model.config, attn_implementation="eager")
    eager.load_state_dict(ctx.model.hf.state_dict())
    n = ctx.layout.suffix_start
    with torch.no_grad():
        attn = eager(ctx.layout.ids[None, :n], output_attentions=True).attentions[1][0]  # [head, q, k]
    expected = attn.mean(0).tril(-1).sum(0)[ctx.reused_positions]
    sig = SignalSet(ctx)["check_layer"]
    assert torch.allclose(sig.influence, expected, atol=1e-5)
    assert torch.allclose(sig.relay, sig.value_deviation * sig.influence)


def test_random_is_a_coin_drawn_per_example_and_draw(ctx, model):
    coin = parse_selector("random").info
    assert coin.drawn
    a, b, c = (coin.score(SignalSet(ctx, SignalOptions(seed=s)), 0) for s in (3, 3, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    draws = [coin.score(SignalSet(ctx, SignalOptions(seed=3)), d) for d in range(3)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    other = wb.build_context(model, small_example(example_id="t1"))  # same length, another example
    assert not torch.equal(coin.score(SignalSet(other, SignalOptions(seed=3)), 0), a)


def test_bcr_and_qattn_read_their_attention_signals(ctx, signals):
    pos = ctx.reused_positions
    assert torch.equal(scores("bcr", signals), signals["draft"].scores(pos))
    assert torch.equal(scores("qattn", signals), signals["question"].scores(pos))
    assert parse_selector("bcr").unit == "chunk"


def test_cadence_scores_come_from_one_backward(ctx, signals):
    assert torch.equal(scores("cadence", signals), signals["saliency"].cadence)
    assert torch.equal(scores("cadence-grad", signals), signals["saliency"].cadence_grad)
    assert signals.costs["saliency"].backward_passes == 1


def test_oracle_patch_ranks_by_the_actual_patch_effect(ctx, signals):
    oracle = scores("oracle-patch", signals)
    top = int(oracle.argmax())
    position = int(ctx.reused_positions[top])
    patched = wb.KVCache(ctx.spliced.keys.clone(), ctx.spliced.values.clone())
    patched.keys[:, :, position] = ctx.dense.keys[:, :, position]
    patched.values[:, :, position] = ctx.dense.values[:, :, position]
    answer = signals["saliency"].answer_ids
    delta = ctx.teacher_forced(ctx.spliced, answer).logprob - ctx.teacher_forced(patched, answer).logprob
    assert abs(abs(delta) - float(oracle[top])) < 1e-3 * max(1.0, abs(delta))
    assert parse_selector("oracle-patch").info.expensive


def test_selectors_spend_a_budget_of_the_changed_rows_in_their_unit(diagnosis, ctx):
    out = diagnosis.outcomes.set_index(["selector", "budget"])
    changed = ctx.layout.changed_positions
    n = len(changed)
    assert (out["pool"] == "changed").all() and (out["n_pool"] == n).all() and n < ctx.n_reused
    assert (out["n_spent_exact"] == 0).all()  # no budget goes to the first passage, exact by construction
    for b in BUDGETS:
        assert out.loc[("none", b), "n_recomputed"] == 0
        assert out.loc[("full", b), "n_recomputed"] == n
        for label in ("densedev", "cadence", "bcr:single", "bcr:grow", "qattn"):
            assert out.loc[(label, b), "n_recomputed"] == budget_rows(b, n), label
        coin = out.loc[("random", b)]
        assert len(coin) == 5 and sorted(coin["draw"]) == list(range(5))
        assert (coin["n_recomputed"] == budget_rows(b, n)).all()
    for label in diagnosis.selections["selector"].unique():
        for b in BUDGETS:
            assert set(diagnosis.picks(label, b)) <= set(changed.tolist()), label
    chunk = diagnosis.selections.set_index(["selector", "budget"]).loc[("bcr", 0.1)]
    assert chunk["skipped"]  # BCR's skip rule: 9 rows (b = 0.1 of 88) buy less than one 64-row chunk


def test_the_all_pool_counts_exact_rows_spent(model, ctx):
    d = diagnose(model, ctx.example, ctx=ctx, selectors=("random", "full"), budgets=(0.5,), pool="all",
                 attribution=False, progress=False)
    out = d.outcomes
    assert (out["n_pool"] == ctx.n_reused).all()
    first = set(range(ctx.layout.passages[0].start, ctx.layout.passages[0].end))
    for _, row in d.selections.iterrows():
        assert row["n_spent_exact"] == len(first & set(row["positions"]))
    assert out[out["selector"] == "random"]["n_spent_exact"].gt(0).all()  # a coin over all rows wastes some


def test_full_repair_matches_dense_and_reuse_all_matches_the_splice(diagnosis):
    out = diagnosis.outcomes.set_index(["selector", "budget"])
    dense, spliced = diagnosis.answers.dense, diagnosis.answers.spliced
    assert not out.loc[("full", 0.1), "flip_strict"] and out.loc[("full", 0.1), "answer"] == dense.text
    assert out.loc[("none", 0.1), "answer"] == spliced.text
    residual = diagnosis.residual.set_index(["selector", "budget", "kind", "layer"])["value"].sort_index()
    assert residual.loc[("full", 0.1, "v")].max() < 1e-4
    assert residual.loc[("none", 0.1, "v")].iloc[1:].min() > 1e-3


def test_diagnosis_holds_every_signal_and_saves_without_pickle(diagnosis, tmp_path):
    signals = set(diagnosis.token_signals["signal"])
    assert {"densedev", "cadence_grad", "cadence", "draft_attention", "question_attention", "cacheblend",
            "relay", "patch_effect"} <= signals
    assert {"grad_sq_k", "gated_v", "draft_attention"} <= set(diagnosis.layer_signals["signal"])
    folder = diagnosis.save(tmp_path / "d")
    assert not list(folder.glob("*.pkl"))
    loaded = Diagnosis.load(folder)
    for name, table in diagnosis.tables.items():
        assert loaded.tables[name].shape == table.shape, name
    assert loaded.picks("densedev", 0.3) == diagnosis.picks("densedev", 0.3)
    assert loaded.example == diagnosis.example
    assert loaded.answers == diagnosis.answers and loaded.config == diagnosis.config
    assert loaded.context == diagnosis.context and loaded.ctx is None
    with pytest.raises(wb.WorkbenchError, match="exists"):
        diagnosis.save(folder)
    with pytest.raises(wb.WorkbenchError, match="no diagnosis.json"):
        Diagnosis.load(tmp_path)


def test_bad_selector_specs_fail_before_any_work(model, monkeypatch):
    import workbench.diagnosis.run as d

    monkeypatch.setattr(d, "build_context", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(wb.WorkbenchError, match="valid: none, full"):
        diagnose(model, small_example(), selectors=["nope"])
    with pytest.raises(wb.WorkbenchError, match="cannot use unit 'chunk'"):
        diagnose(model, small_example(), selectors=["none:chunk"])
    with pytest.raises(wb.WorkbenchError, match="budget"):
        diagnose(model, small_example(), selectors=["random"], budgets=[1.5])
    with pytest.raises(wb.WorkbenchError, match="no selectors"):
        parse_selectors("")


def test_a_registered_selector_is_usable_by_name(ctx, monkeypatch):
    from workbench.selectors import registry

    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())  # leave the real one untouched

    @register_selector("test-last-rows", default_unit="single")
    def last_rows(signals):
        return torch.arange(signals.ctx.n_reused, dtype=torch.float32)

    assert "test-last-rows" in selector_names()
    assert torch.equal(parse_selector("test-last-rows").info.score(SignalSet(ctx)),
                       torch.arange(ctx.n_reused, dtype=torch.float32))


def test_the_registry_answers_references_defaults_and_the_comparison():
    assert reference_selectors() == ("none", "full")
    # written out: a newly registered selector (epic, prophetkv, relaxkv, a user's) joins the choices
    # but not the default run, whose identity a resume checks
    assert default_selectors() == ("none", "full", "random", "cacheblend", "relay", "densedev", "cadence",
                                   "cadence-grad", "bcr", "bcr:grow", "bcr:single", "qattn")
    assert default_selectors(expensive=True) == default_selectors() + ("oracle-patch",)
    from workbench.selectors.registry import registered_specs
    assert {"epic", "prophetkv", "relaxkv", "oracle-patch"} <= set(registered_specs())
    assert not any(spec.startswith("coin") for spec in registered_specs())
    assert comparison_reference(["cadence-grad", "random", "cacheblend"]) == "cacheblend"
    assert comparison_reference(["cadence-grad", "random"]) == "random"
    assert comparison_reference(["cadence-grad"]) is None


def test_a_matched_coin_is_named_for_its_selector_and_refuses_controls():
    spec = parse_selector("coin:bcr:grow")
    assert spec.label == "coin:bcr:grow" and spec.unit == "grow" and spec.matches.label == "bcr:grow"
    assert parse_selector("coin:bcr").label == "coin:bcr" and parse_selector("coin:bcr").unit == "chunk"
    assert "coin" not in " ".join(default_selectors(expensive=True))
    for bad in ("coin", "coin:random", "coin:none", "coin:coin:bcr", "coin:bcr:nope"):
        with pytest.raises(wb.WorkbenchError):
            parse_selector(bad)


def test_a_matched_coin_recomputes_its_selectors_row_count_on_every_example_and_budget(model):
    from workbench.diagnosis import DiagnoseConfig

    specs = ("bcr:single", "coin:bcr:single", "cacheblend:chunk", "coin:cacheblend:chunk", "bcr:grow",
             "coin:bcr:grow")
    for example in (small_example(3, "m0"), small_example(4, "m1")):
        d = diagnose(model, example, DiagnoseConfig.of(selectors=specs, budgets=(0.2, 0.5), coin_draws=3,
                                                        chunk_size=4),
                     progress=False)
        out = d.tables["outcomes"]
        for spec in specs[1::2]:
            coin, base = out[out["selector"] == spec], out[out["selector"] == spec[5:]]
            assert len(coin) == 3 * 2 and set(coin["unit"]) == set(base["unit"])
            for budget in (0.2, 0.5):
                want = base.loc[base["budget"] == budget, "n_recomputed"].item()
                assert set(coin.loc[coin["budget"] == budget, "n_recomputed"]) == {want}
        sel = d.tables["selections"]
        positions = sel[sel["selector"] == "coin:bcr:single"]["positions"].map(tuple)
        assert positions.nunique() > 1  # the draws differ


def test_graded_outcomes_are_recorded_bounded_and_exact_at_full_recompute(diagnosis):
    out = diagnosis.tables["outcomes"]
    dense = diagnosis.answers.dense
    n_dense = len(dense.token_ids) + int(dense.stopped)
    assert out["first_kl"].ge(0).all() and out["f1_to_dense"].between(0, 1).all()
    assert out["agree_prefix"].between(0, len(dense.token_ids)).all()
    assert out["first_token_agree"].isin([True, False]).all()
    assert (out["dense_logprob_mean"] * n_dense - out["dense_logprob"]).abs().max() < 1e-4
    same = out[~out["flip"]]  # an unchanged answer agrees on every graded measure's discrete part
    assert same["f1_to_dense"].eq(1.0).all() and same["first_token_agree"].all()
    full = out[out["selector"] == "full"]
    assert full["first_kl"].max() < 1e-4 and full["agree_prefix"].eq(len(dense.token_ids)).all()
    flipped = out[out["flip"]]
    assert (flipped["agree_prefix"] < len(dense.token_ids)).all() or flipped.empty


def test_graded_helpers_on_hand_values():
    from workbench.diagnosis.graded import common_prefix, first_token_kl

    p = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    q = torch.log(torch.tensor([0.25, 0.25, 0.5]))
    assert first_token_kl(p, p) == 0.0
    assert abs(first_token_kl(p, q) - (0.5 * torch.log(torch.tensor(2.0)) - 0.25 * torch.log(torch.tensor(2.0)))) < 1e-9
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2 and common_prefix([], [1]) == 0
