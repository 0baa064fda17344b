"""The multi-agent scenario on a tiny model: the pipeline spec, KVComm's anchor pool and gate,
and the exactness each reuse path owes the dense reference."""

import json
import math

import pandas as pd
import pytest
import torch

from conftest import tiny_model
from workbench.errors import WorkbenchError
from workbench.decode import greedy_answer
from workbench.kv import KVCache, relative_error
from workbench.pipeline import AnchorPool, PipelineSpec, agent_layout, base_cache, dense_call, kvcomm_call, run_request
from workbench.pipeline.calls import agent_example, tail_base
from workbench.pipeline.methods import CallContext, MethodState, get_method
from workbench.pipeline.request import call_seed, task_text
from workbench.pipeline.spec import Agent
from workbench.repair import repair
from workbench.splice import prefill
from workbench.tasks import synthetic_examples

AGENT = Agent("reader", "You read.", "Say what you read.")
TASK_CUT = 400  # characters (= tokens, byte tokenizer) of a new task no longer than the anchors' tasks


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def spec():
    return PipelineSpec.fully_connected(3)


def call_layout(model, spec, agent=2, seed=0, cut=None):
    """Agent `agent`'s call on synthetic example `seed`; `cut` shortens every slot's text."""
    task = task_text(synthetic_examples(1, seed=seed)[0])
    outputs = {0: f"Mira Tessk coaches him (source {seed}).", 1: f"She was born in Tressamor (source {seed})."}
    if cut:
        task, outputs = task[:cut], {j: text[:20] for j, text in outputs.items()}
    return agent_layout(model.tokenizer, spec, agent, task, outputs)


# ------------------------------------------------------------------ the spec

def test_a_generated_pipeline_is_ordered_and_fully_connected(spec):
    assert spec.order == (0, 1, 2) and spec.final == 2
    assert spec.predecessors(2) == (0, 1) and spec.depth(2) == 2 and spec.depth(0) == 0
    assert [a.role for a in spec.agents] == ["reader", "reasoner", "answerer"]
    assert PipelineSpec.chain(4).predecessors(3) == (2,)


@pytest.mark.parametrize("agents, edges, match", [
    ((), (), "at least one agent"),
    ((AGENT, Agent("b", " ", "x")), ((0, 1),), "agent 1: its system is empty"),
    ((AGENT, AGENT, AGENT), ((0, 1), (1, 2), (2, 1)), r"cycle through agents \[1, 2\]"),
    ((AGENT, AGENT), ((0, 0),), "self-loop"),
    ((AGENT, AGENT), ((0, 5),), "outside 0..1"),
])
def test_bad_pipelines_are_refused_before_any_model_work(agents, edges, match):
    with pytest.raises(WorkbenchError, match=match):
        PipelineSpec(agents, edges)


def test_generated_pipelines_have_one_to_five_agents():
    with pytest.raises(WorkbenchError, match="1 to 5 agents"):
        PipelineSpec.fully_connected(0)


def test_an_agent_prompt_lays_out_its_slots(model, spec):
    layout, slots = call_layout(model, spec)
    assert [s.name for s in slots] == ["task", "agent0", "agent1"]
    assert [seg.text.strip() for seg in layout.passages] == [s.message for s in slots]
    assert "Say which answer" not in layout.segments[-1].text and "final answer" in layout.segments[-1].text


# ------------------------------------------------------------------ exactness

def test_a_base_cache_is_exact_at_layer0(model, spec):
    """C(x | ∅) moved to its position: layer 0 depends on the token and its position only."""
    layout, _ = call_layout(model, spec)
    dense = dense_call(model, layout)
    for seg in layout.passages:
        base = base_cache(model, layout.ids[seg.start:seg.end], seg.start)
        real = dense.slice(seg.start, seg.end)
        assert float((base.keys[0] - real.keys[0]).abs().max()) < 1e-4
        assert torch.equal(base.values[0], real.values[0])
        assert float(relative_error(base, real)["v"][-1]) > 1e-3  # above layer 0 the prefix matters


def test_a_memoized_base_is_the_same_base_moved(model, spec):
    layout, _ = call_layout(model, spec)
    seg = layout.passages[0]
    ids, memo = layout.ids[seg.start:seg.end], {}
    for start in (seg.start, seg.start + 37):
        fresh, kept = base_cache(model, ids, start), base_cache(model, ids, start, memo)
        assert torch.equal(fresh.keys, kept.keys) and torch.equal(fresh.values, kept.values)
    assert len(memo) == 1  # prefilled once, moved twice


def test_the_gate_sweep_is_registered_with_its_thresholds():
    from workbench.pipeline.methods import get_method

    sweep = {name: get_method(name).make_state().pool.gamma
             for name in ("kvcomm", "kvcomm-0.5", "kvcomm-0.7", "kvcomm-always")}
    assert sweep == {"kvcomm": 0.3, "kvcomm-0.5": 0.5, "kvcomm-0.7": 0.7, "kvcomm-always": 1.0}
    assert get_method("kvcomm-0.5").fn is get_method("kvcomm").fn  # one method, another threshold


def test_with_gamma_zero_kvcomm_is_dense_exactly(model, spec):
    pool = AnchorPool(gamma=0.0)
    for seed in range(4):
        layout, slots = call_layout(model, spec, seed=seed)
        served = kvcomm_call(model, pool, 2, layout, slots)
        assert not served.reused
        dense = dense_call(model, layout)
        assert torch.equal(served.cache.keys, dense.keys) and torch.equal(served.cache.values, dense.values)
    examples = synthetic_examples(3, seed=1)
    state, dense_state = MethodState(AnchorPool(gamma=0.0)), MethodState()
    for example in examples:
        got = run_request(model, spec, example, "kvcomm", state, max_new_tokens=4)
        want = run_request(model, spec, example, "token-matched", dense_state, max_new_tokens=4)
        assert [c.output for c in got.calls] == [c.output for c in want.calls]
        assert not any(c.reused for c in got.calls)


def test_an_anchor_served_back_under_the_same_prefix_reproduces_the_segment(model, spec):
    layout, slots = call_layout(model, spec)
    dense = dense_call(model, layout)
    pool = AnchorPool()
    for slot, seg in zip(slots, layout.passages):
        base = base_cache(model, layout.ids[seg.start:seg.end], seg.start)
        real = dense.slice(seg.start, seg.end)
        pool.store(slot.name, slot.message, 2, base.keys, base.values, real.keys, real.values)
        keys, values = pool.predict(slot.name, 2, base.keys, base.values)
        torch.testing.assert_close(keys[1:], real.keys[1:], atol=1e-5, rtol=0)  # layer 0 keeps the base
        torch.testing.assert_close(values, real.values, atol=1e-5, rtol=0)


def test_repairing_every_row_of_a_predicted_cache_gives_dense(model, spec):
    pool = AnchorPool(gamma=1.0)
    for seed in range(3):  # anchors from other requests
        layout, slots = call_layout(model, spec, seed=seed)
        kvcomm_call(model, pool, 2, layout, slots)
    layout, slots = call_layout(model, spec, seed=7, cut=200)  # new messages, no longer than the anchors
    served = kvcomm_call(model, pool, 2, layout, slots)
    assert served.reused  # γ = 1 trusts the prediction once two anchors exist
    span = served.cache.slice(0, layout.suffix_start)  # the served tail left out
    dense = dense_call(model, layout)
    assert float(relative_error(span, dense)["v"].max()) > 1e-3  # a prediction, not the truth
    fixed = repair(model, span, layout.ids, layout.reused_positions)
    err = relative_error(fixed, dense)
    assert float(err["k"].max()) < 1e-5 and float(err["v"].max()) < 1e-5


# ------------------------------------------------------------------ the prompt's tail (--kvcomm code)

def last_logits(model, cache, suffix):
    """The next-token logits after prefilling `suffix` ([pos]) over `cache`: [vocab]."""
    return model.hf(input_ids=suffix[None], cache=cache.to_hf(), use_cache=True).logits[0, -1].float()


def test_a_tail_anchor_served_back_under_the_same_prefix_reproduces_the_tail(model, spec):
    layout, slots = call_layout(model, spec)
    s, n = layout.suffix_start, layout.n_tokens
    real = prefill(model, layout.ids).slice(s, n)  # the dense tail
    seg = layout.passages[-1]
    base = base_cache(model, layout.ids[seg.start:seg.end], seg.start)
    tail = tail_base(model, 2, layout, slots)
    torch.testing.assert_close(tail.values[0], real.values[0], atol=1e-5, rtol=0)  # layer 0: token and position
    assert float(relative_error(tail, real)["v"][-1]) > 1e-3  # the template is not the prompt
    pool = AnchorPool()
    pool.store(slots[-1].name, slots[-1].message, 2, base.keys, base.values, base.keys, base.values)
    pool.store_tail(slots[-1].name, slots[-1].message, 2, tail.keys, tail.values, real.keys, real.values)
    keys, values = pool.predict_tail(slots[-1].name, 2, base.keys, base.values, tail.keys, tail.values)
    torch.testing.assert_close(keys[1:], real.keys[1:], atol=1e-5, rtol=0)  # layer 0 keeps the base
    torch.testing.assert_close(values, real.values, atol=1e-5, rtol=0)
    assert pool.predict_tail(slots[-1].name, 1, base.keys, base.values, tail.keys, tail.values)[0] is tail.keys


def test_the_served_tail_is_the_prefilled_suffix_when_the_pool_holds_it(model, spec):
    """With zero slot Δs both variants serve the slot bases; "code" then serves the template's tail
    (zero tail Δs), or, when the pool's tail Δ is the exact suffix over that span minus the template,
    the suffix the "legacy" path prefills: the same next-token logits and answer."""
    layout, slots = call_layout(model, spec)
    s, n = layout.suffix_start, layout.n_tokens
    bases = [base_cache(model, layout.ids[seg.start:seg.end], seg.start) for seg in layout.passages]
    span = KVCache.cat([prefill(model, layout.ids[: layout.prefix.end]), *bases])
    exact = prefill(model, layout.ids[s:], span).slice(s, n)  # the suffix prefilled over the span
    template = tail_base(model, 2, layout, slots)
    served = {}
    for name, tail in (("zero", template), ("exact", exact)):
        pool = AnchorPool(gamma=1.0)
        for message in ("a", "b"):  # two anchors at distance 0: the gate reuses at γ = 1
            for slot, base in zip(slots, bases):
                pool.store(slot.name, message, 2, base.keys, base.values, base.keys, base.values)
            pool.store_tail(slots[-1].name, message, 2, template.keys, template.values, tail.keys, tail.values)
        served[name] = kvcomm_call(model, pool, 2, layout, slots)
    legacy = kvcomm_call(model, pool, 2, layout, slots, variant="legacy")
    assert legacy.reused and legacy.suffix_ids is None and legacy.cache.n_positions == s
    for got in served.values():
        assert got.reused and got.cache.n_positions == n - 1 and torch.equal(got.suffix_ids, layout.ids[-1:])
        assert torch.equal(got.cache.keys[:, :, :s], legacy.cache.keys)  # the span: only the tail differs
        assert torch.equal(got.cache.values[:, :, :s], legacy.cache.values)
    zero, rows = served["zero"].cache.slice(s, n - 1), template.slice(0, n - 1 - s)
    assert torch.equal(zero.keys, rows.keys) and torch.equal(zero.values, rows.values)
    torch.testing.assert_close(served["exact"].cache.values[:, :, s:], exact.values[:, :, :-1], atol=1e-5, rtol=0)
    want = last_logits(model, legacy.cache, layout.ids[s:])
    torch.testing.assert_close(last_logits(model, served["exact"].cache, layout.ids[-1:]), want, atol=1e-4, rtol=0)
    assert (last_logits(model, served["zero"].cache, layout.ids[-1:]) - want).abs().max() > 1e-3
    assert (greedy_answer(model, served["exact"].cache, layout.ids[-1:], 8).token_ids
            == greedy_answer(model, legacy.cache, layout.ids[s:], 8).token_ids)


def counting_gate(monkeypatch):
    """Record every (slot, message) the entropy gate runs on."""
    seen, real = [], AnchorPool.gate

    def gate(self, slot, agent, base_values):
        seen.append(slot)
        return real(self, slot, agent, base_values)

    monkeypatch.setattr(AnchorPool, "gate", gate)
    return seen


def test_the_gate_decides_once_per_slot_and_message_and_keeps_it(model, spec, monkeypatch):
    seen = counting_gate(monkeypatch)
    examples = synthetic_examples(4, seed=2)
    state = MethodState(AnchorPool(gamma=1.0))  # "code": KVComm as its code runs
    results = [run_request(model, spec, ex, "kvcomm", state, max_new_tokens=3) for ex in examples]
    slot_reads = {"task": 3, "agent0": 2, "agent1": 1}  # readers of each slot in a 3-agent full pipeline
    assert len(seen) == len(examples) * len(slot_reads)  # one gate per (slot, message), not one per reader
    assert {k: len(v) for k, v in state.pool.decisions.items()} == {k: len(examples) for k in slot_reads}
    first = results[0]  # an empty pool: every reader pays one dense pass and stores its Δ
    assert not any(c.reused for c in first.calls)
    first_task = next(iter(state.pool.slots["task"]))
    task = state.pool.slots["task"][first_task]
    assert set(task.deltas) == {0, 1, 2} and set(task.tail_deltas) == {0}  # the task is agent 0's last slot
    assert set(state.pool.slots["agent0"][next(iter(state.pool.slots["agent0"]))].tail_deltas) == {1}
    for result in results:  # every reader of the task sees the one decision
        assert len({repr((c.gate_entropy[0], c.n_anchors[0])) for c in result.calls}) == 1
    assert any(c.reused for r in results[2:] for c in r.calls)
    assert any(d.reuse for d in state.pool.decisions["task"].values())

    seen.clear()  # a task seen before: its kept "no" stands, and its readers hold their Δs, so reuse
    assert not state.pool.decisions["task"][first_task].reuse
    again = run_request(model, spec, examples[0], "kvcomm", state, max_new_tokens=3)
    assert "task" not in seen and again.calls[0].reused

    seen.clear()  # "legacy": the gate runs on every call, once per slot the agent reads
    legacy = MethodState(AnchorPool(gamma=1.0), kvcomm="legacy")
    for ex in examples:
        run_request(model, spec, ex, "kvcomm", legacy, max_new_tokens=3)
    assert len(seen) == len(examples) * sum(slot_reads.values()) and legacy.pool.decisions == {}


# ------------------------------------------------------------------ the gate and the pool

def anchor_tensors(value: float, rows: int = 4):
    t = torch.full((2, 1, rows, 3), value)  # [layer, kv_head, len, d_head]
    return t, t.clone()


def test_the_gate_needs_two_anchors_and_low_entropy():
    pool = AnchorPool(gamma=1.0)
    k, v = anchor_tensors(0.0)
    assert not pool.gate("task", 0, v).reuse and math.isnan(pool.gate("task", 0, v).entropy)
    pool.store("task", "a", 0, k, v, k + 1, v + 1)
    pool.store("task", "b", 0, k + 5, v + 5, k + 6, v + 6)
    decision = pool.gate("task", 0, v)  # one anchor at distance 0, one far: s ~ (1, 0)
    assert decision.reuse and decision.n_anchors == 2 and decision.entropy < 1e-3
    assert decision.threshold == pytest.approx(1.0)
    assert not AnchorPool(gamma=0.0).gate("task", 0, v).reuse
    assert pool.gate("task", 1, v).n_anchors == 0  # Δs are per agent
    assert pool.gate("task", 0, torch.zeros(2, 1, 9, 3)).n_anchors == 0  # anchors shorter than the new base


def test_equidistant_anchors_have_maximal_entropy():
    pool = AnchorPool(gamma=0.99)
    k, v = anchor_tensors(0.0)
    for name, shift in (("a", 1.0), ("b", -1.0)):
        pool.store("task", name, 0, k + shift, v + shift, k, v)
    decision = pool.gate("task", 0, v)
    assert decision.entropy == pytest.approx(1.0) and not decision.reuse


def test_eviction_drops_the_least_activated_of_the_five_oldest():
    pool = AnchorPool(gamma=1.0)
    k, v = anchor_tensors(0.0)
    for i in range(21):
        pool.store("task", f"m{i}", 0, k, v, k, v)
    for name in ("m0", "m1", "m3", "m4"):
        pool.slots["task"][name].activations = 3
    pool.store("task", "new", 0, k, v, k, v)  # 21 > 20: evict before adding
    assert "m2" not in pool.slots["task"] and "new" in pool.slots["task"] and pool.size("task") == 21


# ------------------------------------------------------------------ methods

def test_token_matched_equals_the_chat_template_when_the_ids_are_equal(model, spec):
    """The byte tokenizer splits nowhere differently: both Dense paths give the same answers."""
    for example in synthetic_examples(2, seed=3):
        matched = run_request(model, spec, example, "token-matched", MethodState(), max_new_tokens=4)
        template = run_request(model, spec, example, "chat-template", MethodState(), max_new_tokens=4)
        assert not any(c.template_differs for c in matched.calls)
        assert [c.output for c in matched.calls] == [c.output for c in template.calls]


def test_call_level_policies_force_the_calls_they_name(model):
    spec = PipelineSpec.fully_connected(3)
    examples = synthetic_examples(6, seed=0)
    for method, forced in (("protect-root", 0), ("protect-leaf", 2)):
        state = get_method(method).make_state()
        state.pool.gamma = 1.0  # reuse whatever it can, so only the policy forces dense calls
        calls = [c for ex in examples for c in run_request(model, spec, ex, method, state, max_new_tokens=3).calls]
        assert not any(c.reused for c in calls if c.agent == forced)
        assert any(c.reused for c in calls if c.agent != forced)


def test_the_coin_policy_is_seeded_per_call(model):
    spec = PipelineSpec.fully_connected(3)
    example = synthetic_examples(1, seed=0)[0]
    runs = [run_request(model, spec, example, "coin-alloc", get_method("coin-alloc").make_state(), 3, seed=s)
            for s in (0, 0)]
    assert [(c.reused, c.output) for c in runs[0].calls] == [(c.reused, c.output) for c in runs[1].calls]
    seeds = {call_seed(s, "q", agent) for s in range(3) for agent in range(3)}
    assert len(seeds) == 9  # every (run seed, agent) draws its own coin


def test_opengate_with_theta_zero_keeps_every_prediction(model, spec):
    """BCR App. I's plumbing control: θ = 0 must serve what KVComm γ = 1 serves; θ > 1 never does."""
    from workbench.pipeline.methods import opengate

    pool = AnchorPool(gamma=1.0)
    for seed in range(3):
        layout, slots = call_layout(model, spec, seed=seed)
        kvcomm_call(model, pool, 2, layout, slots)
    layout, slots = call_layout(model, spec, seed=7, cut=200)
    example, _ = agent_example(spec, 2, "x", {0: "y", 1: "z"})
    call = CallContext(model, spec, 2, layout, slots, MethodState(pool), 0, example)
    kept = opengate(call, theta=0.0)
    assert kept.reused and 0.0 < kept.confidence <= 1.0
    assert torch.equal(kept.cache.keys, kvcomm_call(model, pool, 2, layout, slots).cache.keys)
    refused = opengate(call, theta=1.01)
    assert not refused.reused and torch.equal(refused.cache.keys, dense_call(model, layout).keys)


# ------------------------------------------------------------------ repair on top

def test_repair_on_top_of_a_predicted_final_call(model):
    """The final call's Diagnosis: reusing everything answers as the pipeline did, recomputing
    every row answers as the call's token-matched Dense."""
    from workbench.pipeline.repair import REPAIR

    spec = PipelineSpec.fully_connected(2)
    state = MethodState(AnchorPool(gamma=1.0), kvcomm="legacy")  # the Diagnosis prefills the suffix exactly
    for example in synthetic_examples(8, seed=0):
        result = run_request(model, spec, example, "kvcomm-always", state, max_new_tokens=3, repair=REPAIR)
        if result.calls[-1].reused:
            break
    else:
        pytest.fail("no final call was served from a predicted cache")
    rows = pd.DataFrame(result.repair)
    assert set(rows["selector"]) == set(REPAIR.selectors) and set(rows["budget"]) == set(REPAIR.budgets)
    assert set(rows.loc[rows["selector"] == "none", "answer"]) == {result.answer}
    assert not rows.loc[rows["selector"] == "full", "flip"].any()
    assert rows.loc[rows["selector"] == "random", "draw"].nunique() == REPAIR.coin_draws
    assert json.loads(json.dumps(result.to_dict()))["repair"][0]["selector"] == "none"


def test_bcr_repairs_chunks_of_a_reused_call_and_its_coin_draws_other_chunks(model, spec):
    from workbench.pipeline.bcr import bcr, bcr_coin
    from workbench.pipeline.served_repair import UNITS

    pool = AnchorPool(gamma=1.0)
    for seed in range(3):
        layout, slots = call_layout(model, spec, seed=seed)
        kvcomm_call(model, pool, 2, layout, slots)
    layout, slots = call_layout(model, spec, seed=7, cut=TASK_CUT)  # over 320 slot rows: ρM >= B
    example, _ = agent_example(spec, 2, "x", {0: "y", 1: "z"})
    results = {}
    for name, fn in (("bcr", bcr), ("coin", bcr_coin)):
        state = MethodState(AnchorPool(gamma=1.0))
        state.pool.slots = {k: dict(v) for k, v in pool.slots.items()}
        results[name] = fn(CallContext(model, spec, 2, layout, slots, state, seed=5, example=example))
    served = kvcomm_call(model, pool, 2, layout, slots).cache
    dense = dense_call(model, layout)
    for result in results.values():
        assert result.reused and result.n_repaired >= UNITS.chunk_size  # ρM >= B here: Algorithm 1 repairs
        changed = (result.cache.values != served.values).any(dim=(0, 1, 3)).nonzero()[:, 0]  # [pos]
        assert len(changed) == result.n_repaired
        fixed = repair(model, served, layout.ids, changed)  # the serial reference over the served cache
        assert torch.equal(result.cache.keys, fixed.keys) and torch.equal(result.cache.values, fixed.values)
        torch.testing.assert_close(fixed.values[0][:, changed], dense.values[0][:, changed], atol=1e-5, rtol=0)
    picked = {name: set((r.cache.values != served.values).any(dim=(0, 1, 3)).nonzero()[:, 0].tolist())
              for name, r in results.items()}
    assert picked["bcr"] != picked["coin"]
