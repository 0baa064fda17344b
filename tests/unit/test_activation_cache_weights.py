"""`Context.run_with_cache`'s ActivationCache reads the weights as TransformerLens 4's
`TransformerBridge` does: `stack_head_results` and `logit_attrs` on the question's rows equal the
bridge's own cache of a full dense pass of the same tokens (tiny Llama and Gemma 3 with a head
width other than d_model / heads, their norm weights drawn away from 1 so that a folded or a
missing weight would show); what it lacks is refused by name."""

import pytest
import torch

import workbench as wb
from tests.conftest import small_example, tiny_model, transformer_bridge
from workbench.errors import WorkbenchError


@pytest.fixture(scope="module", params=[("llama", {}), ("gemma3_text", {"head_dim": 32})])  # Gemma: d_head != d_model / heads
def pair(request, tmp_path_factory):
    family, overrides = request.param
    model = tiny_model(family, **overrides)
    with torch.no_grad():
        for module in model.hf.modules():
            if "Norm" in type(module).__name__ and getattr(module, "weight", None) is not None:
                module.weight.uniform_(0.5, 1.5)
    ctx = wb.build_context(model, small_example())
    bridge = transformer_bridge(model, tmp_path_factory.mktemp("bridge"))
    with torch.no_grad():
        _, tl = bridge.run_with_cache(ctx.layout.ids[None])
    logits, ours = ctx.run_with_cache(over="dense")  # the question's rows over dense's cache: dense's rows
    question = slice(ctx.layout.suffix_start, len(ctx.layout.ids))
    return ctx, bridge, tl, ours, logits, question


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach(), b.detach()
    return torch.allclose(a, b, atol=1e-4 * float(b.abs().max().clamp(min=1)), rtol=1e-4)


def test_stack_head_results_are_the_bridges(pair):
    _, _, tl, ours, _, question = pair
    mine, labels = ours.stack_head_results(layer=-1, return_labels=True)
    theirs, their_labels = tl.stack_head_results(layer=-1, return_labels=True)
    assert labels == their_labels
    assert mine.shape == theirs[:, :, question].shape
    assert close(mine, theirs[:, :, question])


def test_logit_attrs_are_the_bridges_for_a_token_id_and_a_string(pair):
    ctx, bridge, tl, ours, logits, question = pair
    top = int(logits[0, -1].argmax())
    mine = ours.logit_attrs(ours.decompose_resid(), tokens=torch.tensor([top]))
    theirs = tl.logit_attrs(tl.decompose_resid(), tokens=torch.tensor([top]))
    assert close(mine, theirs[:, :, question])
    assert torch.equal(ours.model.tokens_to_residual_directions(top), bridge.tokens_to_residual_directions(top))
    word = next(w for w in (" the", " a", "e", "a") if len(ctx.model.tokenizer(w, add_special_tokens=False)["input_ids"]) == 1)
    assert ours.model.to_single_token(word) == bridge.to_single_token(word)
    with pytest.raises(WorkbenchError, match="not a single token"):
        ours.model.to_single_token("Tressamor Tressamor")


def test_what_the_cache_model_lacks_is_refused_by_name(pair):
    _, _, _, ours, _, _ = pair
    with pytest.raises(AttributeError, match="no blocks\\[l\\].mlp"):
        ours.stack_neuron_results(layer=1)
    with pytest.raises(WorkbenchError, match="empty tensor"):
        ours.model.tokens_to_residual_directions(torch.tensor([], dtype=torch.long))
