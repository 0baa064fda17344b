"""HF's modules load the model and are the tests' oracle; nothing a user runs calls their forward:
a whole `build_context` and `diagnose` (every built-in selector, the attribution check, the per-layer
effects) and `run_with_cache` record no forward call on the HF model, its layers or their attention
modules (tiny Llama and Gemma 3; the engine reads their weights and calls their MLPs and norms as
leaf modules, which is not a second forward path)."""

import pytest

import workbench as wb
from conftest import hf_forward_calls, small_example, tiny_model
from workbench.selectors import selector_names


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_a_whole_diagnosis_never_calls_hf_s_forward(family):
    model = tiny_model(family)
    with hf_forward_calls(model) as calls:
        ctx = wb.build_context(model, small_example())
        selectors = tuple(n if n != "coin" else "coin:bcr" for n in selector_names())  # every built-in
        d = wb.diagnose(model, small_example(), ctx=ctx, selectors=selectors, budgets=(0.3,), attribution=True,
                        layer_effects=True, progress=False, max_new_tokens=4)
        ctx.run_with_cache(ctx.reused_positions[:4])
    assert calls == [], sorted(set(calls))
    assert set(d.outcomes["selector"]) >= {"cadence-grad", "bcr", "cacheblend"}
