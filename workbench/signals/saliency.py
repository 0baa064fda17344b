"""Decision saliency (CADENCE): one backward of the receiver's decision loss into the cache.

The decision loss is L = -log p(y_hat | cache, suffix), the NLL (summed over tokens) of the
receiver's own greedy answer teacher-forced over the cache. The cache's K and V are leaf
tensors, so one backward gives dL/dK and dL/dV for every cached row; it flows only through
the suffix and answer positions, a fraction of a dense prefill. Forward and backward run through
the engine's layer step in grad mode (`repair.recompute_rows`), so hooks reach them. Per layer and reused token:

- ``grad_sq`` = ||dL/dK||^2, ||dL/dV||^2 over kv_head x d_head (CADENCE-Grad: no reference);
- ``gated`` = <dL/dK, dK>, <dL/dV, dV> with d = dense - cache (attribution patching: the
  first-order estimate of the change in L from patching the dense row in; signed).

Keys are post-RoPE, as cached.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from workbench.decode import question_pass, stop_token_ids
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.models import LoadedModel


@dataclass(frozen=True)
class CacheGradients:
    """The decision loss of an answer over a cache and its gradient w.r.t. every cached row."""

    answer_ids: tuple[int, ...]  # the targets, end-of-turn token included when it was chosen
    loss: float  # -log p(answer), summed over answer tokens
    keys: torch.Tensor  # [layer, kv_head, pos, d_head]: dL/dK (post-RoPE), model dtype
    values: torch.Tensor  # [layer, kv_head, pos, d_head]: dL/dV


@contextmanager
def _params_frozen(module: torch.nn.Module):
    """Parameters need no grad inside the block; their requires_grad is restored after."""
    trainable = [p for p in module.parameters() if p.requires_grad]
    for p in trainable:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def check_answer_ids(answer_ids, vocab_size: int) -> list[int]:
    """Answer token ids as a list of ints in [0, vocab_size); refuses an empty answer."""
    answer = [int(t) for t in answer_ids]
    if not answer:
        raise WorkbenchError("answer_ids is empty: the decision loss needs at least one answer token")
    bad = [t for t in answer if not 0 <= t < vocab_size]
    if bad:
        raise WorkbenchError(f"answer_ids out of the vocabulary [0, {vocab_size}): {bad[:8]}")
    return answer


def cache_gradients(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor, answer_ids,
                    end_ids: set[int] | None = None, hooks=None) -> CacheGradients:
    """Teacher-force `answer_ids` after `suffix_ids` ([pos]) over `cache`; backward into K and V.

    With `end_ids`, the answer is taken to end on whichever of these ids the model ranks
    highest after it (the end-of-turn token greedy decoding stopped on), so even an empty
    answer has a loss. Model parameters accumulate no gradients. The forward is the engine's
    question pass in grad mode (`repair.recompute_rows` over a cache that requires grad), under
    `hooks` (`engine.hooks`, one cell: the suffix and answer rows; the final points on the rows
    whose logits are read), so a hook's edit reaches the loss and its gradients.
    """
    hooks = Hooks.of(hooks, model.adapter)
    answer = [int(t) for t in answer_ids]
    if answer or not end_ids:
        check_answer_ids(answer, model.config.vocab_size)
    n_targets = len(answer) + bool(end_ids)
    inputs = torch.cat([suffix_ids.cpu(), torch.tensor(answer[:n_targets - 1], dtype=torch.long)])
    keys = cache.keys.to(model.device, model.dtype).clone().requires_grad_()  # [layer, kv_head, pos, d_head]
    values = cache.values.to(model.device, model.dtype).clone().requires_grad_()
    with _params_frozen(model.hf), torch.enable_grad():
        _, h = question_pass(model, KVCache(keys, values), inputs, hooks)  # [row, hidden], with grad
        n = cache.n_positions + len(inputs)
        rows = Rows.one_cell(torch.arange(n - n_targets, n, device=h.device)) if hooks else None
        logits = final_logits(model.adapter, h[-n_targets:], rows, hooks)  # [target, vocab]: row i predicts token i
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        if end_ids:
            last = logits[-1].detach()  # [vocab]
            answer.append(max(end_ids, key=lambda t: float(last[t])))
        targets = torch.tensor(answer, device=logits.device)
        loss = -torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).sum()
        grad_k, grad_v = torch.autograd.grad(loss, [keys, values])
    return CacheGradients(tuple(answer), float(loss.detach()), grad_k, grad_v)


@dataclass(frozen=True)
class Saliency:
    """Decision saliency of every reused token of one cache. All tensors float32 on cpu."""

    answer_ids: tuple[int, ...]  # y_hat, the teacher-forced targets
    loss: float  # L = -log p(y_hat | cache)
    positions: torch.Tensor  # [n]: the reused positions scored
    grad_sq_k: torch.Tensor  # [layer, n]: ||dL/dK||^2
    grad_sq_v: torch.Tensor  # [layer, n]: ||dL/dV||^2
    seconds: float  # wall time: decode (when y_hat was not given), forward, backward
    gated_k: torch.Tensor | None = None  # [layer, n]: <dL/dK, K_dense - K_cache>; None without dense
    gated_v: torch.Tensor | None = None  # [layer, n]: <dL/dV, V_dense - V_cache>; None without dense

    def gated(self, kind: str) -> torch.Tensor:
        """The gated saliency of `kind` ("k" or "v"), [layer, n]; refuses in one line where it was
        computed without a dense reference (serve time: only CADENCE-Grad's parts exist)."""
        value = self.gated_k if kind == "k" else self.gated_v
        if value is None:
            raise WorkbenchError("the gated CADENCE score needs a dense reference; this saliency was computed "
                                 "without one (only CADENCE-Grad's gradients exist)")
        return value

    @property
    def cadence_grad(self) -> torch.Tensor:
        """CADENCE-Grad, the reference-free score: sum over layers of ||dL/dK||^2 + ||dL/dV||^2. [n]"""
        return (self.grad_sq_k + self.grad_sq_v).sum(0)

    @property
    def first_order_k(self) -> torch.Tensor:
        """First-order change in L from patching the dense keys in (all layers). [n]"""
        return self.gated("k").sum(0)

    @property
    def first_order_v(self) -> torch.Tensor:
        """First-order change in L from patching the dense values in (all layers). [n]"""
        return self.gated("v").sum(0)

    @property
    def first_order(self) -> torch.Tensor:
        """First-order change in L from patching the token's dense K and V in (signed). [n]"""
        return self.first_order_k + self.first_order_v

    @property
    def cadence(self) -> torch.Tensor:
        """Gated CADENCE: |first-order estimate|. [n]"""
        return self.first_order.abs()


def decision_saliency(ctx, cache: KVCache | None = None, answer_ids=None, greedy=None, hooks=None) -> Saliency:
    """CADENCE saliency of `cache` (default: the splice) for the decision `answer_ids`.

    `answer_ids` defaults to the greedy answer from the splice (`greedy`, a `decode.Answer`, when
    the caller has decoded it already; else `ctx.generate` under `hooks`), ending on its end-of-turn
    token when decoding stopped on one. The deviation gate uses d = ctx.dense - cache; on a context
    without a dense reference (a served cache) only the gradients are kept: CADENCE-Grad's score,
    which needs no reference. `hooks` (`engine.hooks`) run on the teacher-forced pass the backward
    goes through (`cache_gradients`).
    """
    cache, reference = ctx.spliced if cache is None else cache, ctx.dense
    if reference is not None and cache.keys.shape != reference.keys.shape:
        raise WorkbenchError(f"cache shape {tuple(cache.keys.shape)} does not match the context's "
                             f"dense cache {tuple(reference.keys.shape)}")
    start = time.perf_counter()
    end_ids = None
    if answer_ids is None:
        greedy = ctx.generate(ctx.spliced, hooks=hooks) if greedy is None else greedy
        answer_ids, end_ids = greedy.token_ids, (stop_token_ids(ctx.model) if greedy.stopped else None)
    grads = cache_gradients(ctx.model, cache, ctx.suffix_ids, answer_ids, end_ids, hooks)
    pos = ctx.reused_positions
    parts = {}
    dense_of = {} if reference is None else {"k": reference.keys, "v": reference.values}
    for kind, g, ours in (("k", grads.keys, cache.keys), ("v", grads.values, cache.values)):
        g = g[:, :, pos.to(g.device)].float()  # [layer, kv_head, n, d_head]
        parts[f"grad_sq_{kind}"] = g.square().sum((1, 3)).cpu()  # [layer, n]
        if kind in dense_of:
            dense = dense_of[kind]  # [layer, kv_head, pos, d_head]
            delta = (dense[:, :, pos.to(dense.device)].float() - ours[:, :, pos.to(ours.device)].float()).to(g.device)
            parts[f"gated_{kind}"] = (g * delta).sum((1, 3)).cpu()  # [layer, n]
    return Saliency(answer_ids=grads.answer_ids, loss=grads.loss, positions=pos.clone(), **parts,
                    seconds=time.perf_counter() - start)
