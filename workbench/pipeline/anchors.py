"""KVComm's online anchor pool (Eq. 1 and 2 of BCR; `HankYe/KVCOMM`, `llm/kvcomm_engine.py`).

A placeholder (the task, or an agent's output) is prefilled once on its own: its *base* cache.
In an agent's prompt it sits after another prefix, so its real cache differs from the base by
Δ = C(x | P) − C(x | ∅). A dense pass of an agent's prompt stores that Δ as an *anchor*. A later
occurrence of the same placeholder slot under the same agent is predicted as

    base (moved to its position)  +  Σ_a w_a Δ_a          (layer 0 keeps the base)

with weights from how close the new base is to each anchor's base, and a gate decides whether
to trust the prediction at all:

    s = softmax(−d),  d_a = ||V_new − V_a||₂ over the first len(new) rows of every layer
    reuse iff n ≥ 2 and H(s) ≤ γ · log2 n         (n: anchors at least as long as the new base)

What the code does and the paper does not say, followed here:
- weights for the prediction are per token, from the mean |K_new − K_a| (resp. V) over
  layers, heads and channels; keys and values are weighted apart; anchors align on their first
  rows; layer 0 is never adjusted; stored ΔK is not re-rotated (it was taken at the anchor's
  own positions);
- a reuse activates the anchors inside the top-p 0.9 mass (counts); when a slot holds more than
  20 anchors (strictly), the least-activated of the 5 oldest is evicted;
- each anchor holds one Δ per agent (a Δ is specific to the agent's prefix); only anchors with a
  Δ for the asking agent take part (the code's per-slot pool holds them in one entry);
- the gate decides once per (slot, message) and the decision is kept (`decide`; the code's
  `anchor_dict[ph][message]`), so activations count once however many agents read the message;
- the text after a slot (the prompt's tail) is predicted too (`predict_tail`, the code's "pf"
  segment): its base + Σ_a w_a ΔT_a, weights per (layer, kv_head, channel) from the L2 distance
  over rows between the slot's new base and each anchor's last rows.
Differences from the code are listed in docs/PROTOCOLS.md (multi-agent reuse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

MAX_ANCHORS = 20
EVICTION_WINDOW = 5
TOP_P = 0.9


@dataclass
class Anchor:
    """One message seen in one slot: its base cache there and a Δ per agent that read it densely."""

    base_keys: torch.Tensor  # [layer, kv_head, len, d_head], post-RoPE at the anchor's positions
    base_values: torch.Tensor  # [layer, kv_head, len, d_head]
    deltas: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # agent -> (dK, dV)
    tail_deltas: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # agent -> Δ of the
    # text after the slot in that agent's prompt, [layer, kv_head, tail, d_head] at the anchor's positions
    activations: int = 0

    @property
    def length(self) -> int:
        return self.base_keys.shape[2]


@dataclass(frozen=True)
class GateDecision:
    """What the entropy gate saw for one placeholder of one call."""

    reuse: bool
    n_anchors: int  # anchors that could take part (long enough, with a Δ for this agent)
    entropy: float  # H(s) in bits (nan when n < 2)
    threshold: float  # γ · log2 n (nan when n < 2)


KVCOMM_GAMMA = 0.3  # KVComm's entropy threshold γ (its default; BCR Table 2's KVComm row)


class AnchorPool:
    """Anchors per slot (`"task"`, `"agent3"`, ...), keyed by the message text that filled it."""

    def __init__(self, gamma: float = KVCOMM_GAMMA, max_anchors: int = MAX_ANCHORS, window: int = EVICTION_WINDOW):
        self.gamma, self.max_anchors, self.window = float(gamma), max_anchors, window
        self.slots: dict[str, dict[str, Anchor]] = {}
        self.decisions: dict[str, dict[str, GateDecision]] = {}  # slot -> message -> the kept decision

    def size(self, slot: str) -> int:
        return len(self.slots.get(slot, {}))

    def candidates(self, slot: str, agent: int, length: int) -> list[Anchor]:
        """Anchors of `slot` at least `length` rows long that hold a Δ for `agent` (oldest first)."""
        return [a for a in self.slots.get(slot, {}).values() if a.length >= length and agent in a.deltas]

    def gate(self, slot: str, agent: int, base_values: torch.Tensor) -> GateDecision:
        """Eq. 2 on values: reuse iff at least 2 anchors and H(softmax(−d)) ≤ γ · log2 n.
        base_values: [layer, kv_head, len, d_head] of the new occurrence at its position."""
        anchors = self.candidates(slot, agent, base_values.shape[2])
        n = len(anchors)
        if n < 2:
            return GateDecision(False, n, math.nan, math.nan)
        rows = base_values.shape[2]
        dist = torch.stack([(base_values.float() - a.base_values[:, :, :rows].float()).norm() for a in anchors])  # [n]
        s = torch.softmax(-dist, dim=0)
        entropy = float(-(s * torch.log2(s + 1e-40)).sum())
        threshold = self.gamma * math.log2(n)
        reuse = entropy <= threshold
        if reuse:
            for i in _top_p(s, TOP_P):
                anchors[i].activations += 1
        return GateDecision(reuse, n, entropy, threshold)

    def decide(self, slot: str, message: str, agent: int, base_values: torch.Tensor) -> GateDecision:
        """The gate once per (slot, message), kept: every later reader of `message` gets the first
        decision (KVComm's code, `anchor_dict[ph][message]`), so activations count once."""
        kept = self.decisions.setdefault(slot, {})
        if message not in kept:
            kept[message] = self.gate(slot, agent, base_values)
        return kept[message]

    def holds(self, slot: str, message: str, agent: int) -> bool:
        """Whether `message`'s anchor in `slot` holds a Δ for `agent`: a kept "no reuse" decision
        asks an agent for a dense pass only until it has stored its Δ (the code's `has_active_anchor`)."""
        anchor = self.slots.get(slot, {}).get(message)
        return anchor is not None and agent in anchor.deltas

    def predict(self, slot: str, agent: int, base_keys: torch.Tensor,
                base_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """base + Σ w Δ with per-token weights (keys and values apart); layer 0 keeps the base.
        base_keys/values: [layer, kv_head, len, d_head] at the new position -> the same shapes."""
        anchors = self.candidates(slot, agent, base_keys.shape[2])
        if not anchors:
            return base_keys, base_values
        rows = base_keys.shape[2]
        out = []
        for which, base in enumerate((base_keys, base_values)):
            diffs = torch.stack([(base.float() - _base(a, which)[:, :, :rows].float()).abs().mean(dim=(0, 1, 3))
                                 for a in anchors])  # [anchor, len]
            w = torch.softmax(-diffs, dim=0)  # [anchor, len]
            delta = torch.stack([a.deltas[agent][which][:, :, :rows].float() for a in anchors])  # [anchor, L, H, len, D]
            out.append(_shifted(base, w[:, None, None, :, None], delta))
        return out[0], out[1]

    def predict_tail(self, slot: str, agent: int, base_keys: torch.Tensor, base_values: torch.Tensor,
                     tail_keys: torch.Tensor, tail_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The text after `slot` (the code's "pf" rule): its base + Σ_a w_a ΔT_a, w per (layer,
        kv_head, channel) = softmax over anchors of −||new slot base − the anchor's last len(new) base
        rows||₂ over rows; layer 0 keeps the base. Anchors: the slot's candidates whose tail Δ for
        `agent` covers the tail (aligned on its first rows); none: the base unchanged.
        base_*: [layer, kv_head, len, d_head], the slot's new base; tail_*: [layer, kv_head, tail, d_head]."""
        rows, tail = base_keys.shape[2], tail_keys.shape[2]
        anchors = [a for a in self.candidates(slot, agent, rows)
                   if agent in a.tail_deltas and a.tail_deltas[agent][0].shape[2] >= tail]
        if not anchors:
            return tail_keys, tail_values
        out = []
        for which, (base, tail_base) in enumerate(((base_keys, tail_keys), (base_values, tail_values))):
            dist = torch.stack([(base.float() - _base(a, which)[:, :, -rows:].float()).norm(dim=2)
                                for a in anchors])  # [anchor, layer, kv_head, d_head]
            w = torch.softmax(-dist, dim=0)
            delta = torch.stack([a.tail_deltas[agent][which][:, :, :tail].float()
                                 for a in anchors])  # [anchor, layer, kv_head, tail, d_head]
            out.append(_shifted(tail_base, w[:, :, :, None, :], delta))
        return out[0], out[1]

    def store(self, slot: str, message: str, agent: int, base_keys: torch.Tensor, base_values: torch.Tensor,
              real_keys: torch.Tensor, real_values: torch.Tensor) -> None:
        """After a dense pass: remember Δ = real − base of `message` in `slot` for `agent`.
        All tensors [layer, kv_head, len, d_head] at the same positions."""
        pool = self.slots.setdefault(slot, {})
        # As KVComm's code does (kvcomm_engine.py, the anchor update): evict when the pool holds
        # more than max_anchors, before and whether or not `message` is already in it.
        if len(pool) > self.max_anchors:
            self._evict(pool)
        anchor = pool.get(message)
        if anchor is None:
            anchor = pool[message] = Anchor(base_keys.clone(), base_values.clone())
        else:  # the code lets the last writer's base stand
            anchor.base_keys, anchor.base_values = base_keys.clone(), base_values.clone()
        anchor.deltas[agent] = _delta(real_keys, base_keys), _delta(real_values, base_values)

    def store_tail(self, slot: str, message: str, agent: int, base_keys: torch.Tensor, base_values: torch.Tensor,
                   real_keys: torch.Tensor, real_values: torch.Tensor) -> None:
        """After `store` of `message` in `slot`: remember Δ = real − base of the text after the slot in
        `agent`'s prompt. All tensors [layer, kv_head, tail, d_head] at the same positions."""
        self.slots[slot][message].tail_deltas[agent] = _delta(real_keys, base_keys), _delta(real_values, base_values)

    def _evict(self, pool: dict[str, Anchor]) -> None:
        """Drop the least-activated of the `window` oldest anchors (the oldest on a tie)."""
        oldest = list(pool)[: self.window]
        del pool[min(oldest, key=lambda m: pool[m].activations)]


def _base(anchor: Anchor, which: int) -> torch.Tensor:
    """The anchor's base keys (0) or values (1), [layer, kv_head, len, d_head]."""
    return anchor.base_keys if which == 0 else anchor.base_values


def _delta(real: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    return (real.float() - base.float()).to(base.dtype)


def _shifted(base: torch.Tensor, w: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """base + Σ_a w_a Δ_a (w broadcast against Δ [anchor, layer, kv_head, len, d_head]); layer 0 keeps the base."""
    shift = (w * delta).sum(0)  # [layer, kv_head, len, d_head]
    shift[0] = 0
    return (base.float() + shift).to(base.dtype)


def _top_p(s: torch.Tensor, p: float) -> list[int]:
    """Anchors the code activates: in descending order of s, those whose running sum stays below
    p; when even the first reaches p, all of them (as `predict_as_anchor` does)."""
    order = torch.argsort(s, descending=True)
    below = (torch.cumsum(s[order], 0) < p).nonzero()
    return order.tolist() if below.numel() == 0 else order[: int(below.max()) + 1].tolist()
