"""HF's modules load the model and are the tests' oracle; nothing a user runs calls their forward:
a whole `build_context` and `diagnose` (every built-in selector, the attribution check, the per-layer
effects) and `run_with_cache` record no forward call on the HF model, its layers or their attention
modules (tiny Llama and Gemma 3; the engine reads their weights and calls their MLPs and norms as
leaf modules, which is not a second forward path)."""

import pytest

import workbench as wb
from conftest import small_example, tiny_model
from workbench.selectors import selector_names


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_a_whole_diagnosis_never_calls_hf_s_forward(family):
    model, calls = tiny_model(family), []
    modules = [model.hf, model.hf.model, *model.adapter.layers, *(layer.self_attn for layer in model.adapter.layers)]
    handles = [m.register_forward_pre_hook(lambda module, args: calls.append(type(module).__name__)) for m in modules]
    try:
        ctx = wb.build_context(model, small_example())
        d = wb.diagnose(model, small_example(), ctx=ctx, selectors=tuple(n if n != "coin" else "coin:bcr" for n in selector_names()), budgets=(0.3,),
                        attribution=True, layer_effects=True, progress=False, max_new_tokens=4)
        ctx.run_with_cache(ctx.reused_positions[:4])
    finally:
        for handle in handles:
            handle.remove()
    assert calls == [], sorted(set(calls))
    assert set(d.outcomes["selector"]) >= {"cadence-grad", "bcr", "cacheblend"}
