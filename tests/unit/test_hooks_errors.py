"""Issue 47 items 4, 15 and 16 on the hooks API: bad hooks are refused in one line naming the hook
point, before any model work; a hook that leaves NaN or inf is an error naming its point."""

import pytest
import torch

import workbench as wb
from tests.conftest import small_example
from workbench.diagnosis import diagnose, run as diagnosis_run
from workbench.engine.answers import answer_cells
from workbench.engine.hooks import Hooks

POINT = "blocks.1.attn.hook_z"


@pytest.fixture(scope="module")
def ctx(tiny_llama):
    return wb.build_context(tiny_llama, small_example())


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 600, text
    return text


@pytest.mark.parametrize("hooks, says", [
    ({POINT: 3}, f"hook on {POINT}: expected a function"),
    ({POINT: None}, f"hook on {POINT}: expected a function"),
    ({POINT: "zero"}, f"hook on {POINT}: expected a function"),
    ({POINT: [lambda x, hook: None, 4]}, f"hook on {POINT}: expected a function"),
    ("blocks.1.attn.hook_z", "hooks: expected {name: fn}"),
    (3, "hooks: expected {name: fn}"),
    ([POINT], "fwd_hooks: expected (name or filter, fn) pairs"),
    ([(5, lambda x, hook: None)], "fwd_hooks: expected a hook point name"),
    ({"blocks.9.attn.hook_z": lambda x, hook: None}, "unknown hook points ['blocks.9.attn.hook_z']"),
    ([("blocks.0.hook_nothing", lambda x, hook: None)], "unknown hook point 'blocks.0.hook_nothing'"),
    ({("hook_embed",): lambda x, hook: None}, "a hook point name must be a string"),
])
def test_bad_hooks_are_refused_in_one_line_before_any_model_work(ctx, monkeypatch, hooks, says):
    def no_model_work(*args, **kwargs):
        raise AssertionError("the model ran before the hooks were checked")

    monkeypatch.setattr(ctx.model.adapter.layers[0].input_layernorm, "forward", no_model_work)
    rows = ctx.reused_positions[:3]
    for call in (lambda: ctx.repair(rows, hooks=hooks),
                 lambda: ctx.run_with_hooks(rows, fwd_hooks=hooks),
                 lambda: answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [rows], ctx.suffix_ids, [1], 2,
                                      hooks=hooks)):
        with pytest.raises(wb.WorkbenchError) as err:
            call()
        assert says in _one_line(err)


def test_diagnose_checks_hooks_before_building_the_context(ctx, monkeypatch):
    """Issue 47.16: an unknown name was refused after 5.5 s of model work."""
    def no_context(*args, **kwargs):
        raise AssertionError("diagnose built the context before checking its hooks")

    monkeypatch.setattr(diagnosis_run, "build_context", no_context)
    with pytest.raises(wb.WorkbenchError) as err:
        diagnose(ctx.model, ctx.example, selectors=("random",), budgets=(0.5,), progress=False,
                 hooks={"blocks.0.attn.hook_zz": lambda x, hook: None})
    assert "unknown hook points ['blocks.0.attn.hook_zz']" in _one_line(err)


@pytest.mark.parametrize("returned, says", [
    (lambda x: x.numpy(), "returned ndarray; expected None or a torch.Tensor"),
    (lambda x: x.tolist(), "returned list; expected None or a torch.Tensor"),
    (lambda x: 0, "returned int; expected None or a torch.Tensor"),
    (lambda x: x[:, :1], "returned a tensor (1, 1, 4, 16) torch.float32 on cpu; expected (1, 3, 4, 16)"),
    (lambda x: x.double(), "torch.float64 on cpu; expected (1, 3, 4, 16) torch.float32 on cpu"),
    (lambda x: torch.empty(x.shape, device="meta"), "on meta; expected (1, 3, 4, 16) torch.float32 on cpu"),
])
def test_a_hook_returning_the_wrong_thing_is_one_line_naming_its_point(ctx, returned, says):
    with pytest.raises(wb.WorkbenchError) as err:
        ctx.repair(ctx.reused_positions[:3], hooks={POINT: lambda x, hook: returned(x)})
    text = _one_line(err)
    assert text.startswith(f"hook on {POINT} ") and says in text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_hook_that_writes_nan_or_inf_is_an_error_naming_its_point(ctx, value):
    """Issue 47.4: the repair returned a cache with non-finite values, and diagnose recorded flips."""
    def poison(x, hook):
        x[0, 0, 0, 0] = value

    rows = ctx.reused_positions[:3]
    with pytest.raises(wb.WorkbenchError) as err:
        ctx.repair(rows, hooks={POINT: poison})
    assert _one_line(err).startswith(f"hook on {POINT} left 1 non-finite values")
    with pytest.raises(wb.WorkbenchError, match=f"hook on {POINT} left"):
        diagnose(ctx.model, ctx.example, ctx=ctx, selectors=("random",), budgets=(0.5,), progress=False,
                 hooks={POINT: poison})
    with pytest.raises(wb.WorkbenchError, match="hook on hook_unembed left"):
        ctx.run_with_hooks(rows, fwd_hooks={"hook_unembed": lambda x, hook: x * value})


def test_masking_scores_with_minus_inf_is_allowed_and_plus_inf_is_not(ctx):
    rows = ctx.reused_positions[:6]
    name = "blocks.1.attn.hook_attn_scores"

    def mask_key_0(scores, hook):  # [cell, head, row, key]: no row attends to position 0
        scores[..., 0] = float("-inf")

    pattern = {}
    ctx.repair(rows, hooks={name: mask_key_0,
                            "blocks.1.attn.hook_pattern": lambda p, hook: pattern.setdefault("p", p.clone())})
    assert float(pattern["p"][..., 0].abs().max()) == 0 and float(pattern["p"][..., 1:].sum(-1).min()) > 0.99
    with pytest.raises(wb.WorkbenchError, match=f"hook on {name} left"):
        ctx.repair(rows, hooks={name: lambda s, hook: s.masked_fill(s.isfinite(), float("inf"))})


def test_the_finite_check_costs_nothing_without_a_hook(ctx, monkeypatch):
    """Only a hooked point is checked: a pass without hooks never calls the check."""
    from workbench.engine import hooks as engine_hooks

    calls = []
    monkeypatch.setattr(engine_hooks, "_check_finite", lambda name, x: calls.append(name))
    ctx.repair(ctx.reused_positions[:3])
    assert calls == []
    ctx.repair(ctx.reused_positions[:3], hooks={POINT: lambda x, hook: None})
    assert calls == [POINT]


def test_a_hooks_object_is_taken_wherever_hooks_are(ctx):
    """Issue 47.15: `run_with_cache(hooks=Hooks(...))` said "not iterable"."""
    seen = []
    hooks = Hooks({POINT: lambda x, hook: seen.append(hook.name)}, ctx.model.adapter)
    rows = ctx.reused_positions[:3]
    ctx.run_with_cache(rows, fwd_hooks=hooks)
    ctx.run_with_hooks(rows, fwd_hooks=hooks)
    ctx.repair(rows, hooks=hooks)
    assert seen == [POINT] * 3
