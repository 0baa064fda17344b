"""The field's methods beside the seeds' selectors: EPIC, ProphetKV and RelaxKV pick what their
definitions say, their budgets are matched, and their coins recompute as many rows (tiny model)."""

import pytest
import torch

import workbench as wb
from conftest import small_example, tiny_model
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.repair import repair
from workbench.selectors.budget import attention_pairs, budget_rows
from workbench.selectors import parse_selector
from workbench.signals import SignalSet

FIELD = ("epic", "prophetkv", "relaxkv")


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return tiny_model("llama")


@pytest.fixture(scope="module")
def ctx(model):
    return wb.build_context(model, small_example(4))


def run(model, ctx, selectors, budgets=(0.2,), **settings):
    config = DiagnoseConfig.of(selectors=selectors, budgets=budgets, attribution=False, coin_draws=2, **settings)
    return diagnose(model, ctx.example, config, ctx=ctx, progress=False)


def picked(d, selector, budget=0.2, draw=None):
    sel = d.tables["selections"]
    row = sel[(sel["selector"] == selector) & (sel["budget"] == budget)]
    row = row[row["draw"] == draw] if draw is not None else row
    return row.iloc[0]


@pytest.mark.parametrize("pool", ["changed", "all"])
def test_epic_spends_the_budget_on_the_first_rows_of_every_passage_in_the_pool(model, ctx, pool):
    d = run(model, ctx, ("epic",), budgets=(0.1, 0.3), pool=pool)
    passages = ctx.layout.passages[1:] if pool == "changed" else ctx.layout.passages
    n_pool = sum(len(p) for p in passages)
    for budget in (0.1, 0.3):
        rows = set(picked(d, "epic", budget)["positions"])
        taken = []
        for p in passages:
            mine = sorted(r for r in rows if p.start <= r < p.end)
            assert mine == list(range(p.start, p.start + len(mine)))  # a prefix of the passage
            taken.append(len(mine))
        assert sum(taken) == len(rows) == budget_rows(budget, n_pool)  # every row in a pool passage
        assert max(taken) - min(taken) <= 1 and taken == sorted(taken, reverse=True)  # spread; extras go first
        if pool == "changed":
            assert not rows & set(range(ctx.layout.passages[0].start, ctx.layout.passages[0].end))
        assert bool(picked(d, "epic", budget)["budget_matched"])


def test_epic_with_a_fixed_k_takes_k_rows_of_every_passage_whatever_the_budget(model, ctx):
    d = run(model, ctx, ("epic", "coin:epic"), budgets=(0.1, 0.5), epic_k=3)
    want = [p.start + j for p in ctx.layout.passages[1:] for j in range(3)]
    for budget in (0.1, 0.5):
        row = picked(d, "epic", budget)
        assert list(row["positions"]) == want
        assert row["n_requested"] == budget_rows(budget, len(ctx.layout.changed_positions))
        assert not row["budget_matched"]  # a fixed k spends its own rows, recorded against the budget
        for draw in (0, 1):  # the matched coin recomputes as many rows, placed by coin
            assert picked(d, "coin:epic", budget, draw)["n_recomputed"] == len(want)


def test_epic_at_the_passage_length_equals_full(model, ctx):
    longest = max(len(p) for p in ctx.layout.passages)
    d = run(model, ctx, ("epic", "full"), epic_k=longest)
    assert list(picked(d, "epic")["positions"]) == list(picked(d, "full")["positions"])
    out = d.tables["outcomes"].set_index("selector")
    assert out.loc["epic", "answer"] == out.loc["full", "answer"]
    assert out.loc["epic", "dense_logprob"] == out.loc["full", "dense_logprob"]  # the same cell


def test_prophetkv_takes_the_pools_rows_the_query_attends_most(model, ctx):
    d = run(model, ctx, ("prophetkv", "qattn"))
    relevance = SignalSet(ctx).token("query_relevance")  # [n_reused], checked against HF in test_signals_attention
    pool = ctx.layout.changed_positions
    in_pool = relevance[torch.searchsorted(ctx.reused_positions, pool)]
    n_rows = budget_rows(0.2, len(pool))
    want = sorted(pool[torch.sort(in_pool, descending=True, stable=True).indices[:n_rows]].tolist())
    assert list(picked(d, "prophetkv")["positions"]) == want
    assert parse_selector("prophetkv").info.uses == ("relevance",)


def test_relaxkv_repairs_prophetkvs_rows_over_the_query_relevant_context_only(model, ctx):
    d = run(model, ctx, ("prophetkv", "relaxkv"))
    rows = torch.tensor(list(picked(d, "relaxkv")["positions"]))
    assert rows.tolist() == list(picked(d, "prophetkv")["positions"])  # the same targets
    relevance = SignalSet(ctx).token("query_relevance")
    context = torch.zeros(ctx.layout.suffix_start, dtype=torch.bool)
    context[: ctx.layout.prefix.end] = True
    context[rows] = True
    context[ctx.reused_positions[torch.sort(relevance, descending=True, stable=True).indices[
        :budget_rows(0.2, ctx.n_reused)]]] = True
    n = ctx.layout.suffix_start
    saved = attention_pairs(model, rows, n) - attention_pairs(model, rows, n, context)
    relax = picked(d, "relaxkv")
    assert saved > 0 and relax["attention_saved"] == saved
    assert relax["attention_pairs"] == attention_pairs(model, rows, n, context)
    assert picked(d, "prophetkv")["attention_saved"] == 0
    out = d.tables["outcomes"].set_index("selector")
    cache = repair(model, ctx.spliced, ctx.layout.ids, rows, context=context)
    assert out.loc["relaxkv", "answer"] == ctx.generate(cache, 24).text
    assert abs(out.loc["relaxkv", "dense_logprob"] - out.loc["prophetkv", "dense_logprob"]) > 1e-6


def test_relaxkv_with_the_whole_context_is_its_full_context_twin(model, ctx):
    d = run(model, ctx, ("prophetkv", "relaxkv"), relaxkv_context=1.0)
    out = d.tables["outcomes"].set_index("selector")
    assert out.loc["relaxkv", "attention_saved"] == 0
    assert out.loc["relaxkv", "answer"] == out.loc["prophetkv", "answer"]
    assert out.loc["relaxkv", "dense_logprob"] == out.loc["prophetkv", "dense_logprob"]  # bit-identical


def test_each_methods_matched_coin_recomputes_as_many_rows(model, ctx):
    d = run(model, ctx, FIELD + tuple(f"coin:{name}" for name in FIELD), budgets=(0.2, 0.4))
    for name in FIELD:
        for budget in (0.2, 0.4):
            own = picked(d, name, budget)
            for draw in (0, 1):
                coin = picked(d, f"coin:{name}", budget, draw)
                assert coin["n_recomputed"] == own["n_recomputed"]
                assert list(coin["positions"]) != list(own["positions"])
                assert (coin["attention_saved"] > 0) == (name == "relaxkv")  # the coin's context is restricted too


def test_epic_has_no_other_unit_and_bad_settings_are_refused(model, ctx):
    with pytest.raises(wb.WorkbenchError, match="cannot use unit"):
        parse_selector("epic:chunk")
    for bad in ({"epic_k": 0}, {"epic_k": 2.5}, {"relaxkv_context": 1.5}, {"relaxkv_context": True}):
        with pytest.raises(wb.WorkbenchError, match=next(iter(bad))):
            DiagnoseConfig.of(selectors=("epic",), **bad).checked()


def test_the_methods_and_the_attention_relaxkv_saved_reach_the_report(model, ctx):
    from workbench import report

    d = run(model, ctx, FIELD)
    doc = report.diagnosis_to_json(d)
    assert {r["selector"] for r in doc["answers"]["repairs"]} == set(FIELD)
    saved = {p["selector"]: p["attention_saved"] for p in doc["picks"]}
    assert saved["relaxkv"] > 0 and saved["epic"] == saved["prophetkv"] == 0
    assert "query_relevance" in doc["token_signals"] and "query_relevance" in doc["layer_signals"]
    page = report.diagnosis_to_html(d)
    for name in FIELD:
        assert f"<td>{name}</td>" in page
    assert f"<td>{saved['relaxkv']}</td>" in page
