"""Greedy decoding, written once: one stopping rule (`StopRule`) and one loop (`decode_greedy`)
that every greedy decoder runs (the HF answers in `workbench.decode`, the cells' answers, the
draft of the attention signals, OpenGate's confidence).

The rule: an end-of-turn token stops (and is not kept); a newline in the answer ends it (when
`stop_at_newline`); `max_new_tokens` tokens end it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Answer:
    """A greedy answer. `text` is the first line, stripped; `raw` all that was decoded."""

    text: str
    raw: str
    token_ids: tuple[int, ...]  # generated ids, stop token excluded
    stopped: bool  # ended on an end-of-turn token (not on max_new_tokens or a newline)


def stop_token_ids(model) -> set[int]:
    """End-of-turn ids: the tokenizer's eos, the generation config's eos and the chat formats' end-of-turn tokens."""
    tok = model.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    eos = getattr(model.hf.generation_config, "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    for name in ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>"):
        tid = tok.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tok.unk_token_id and tid >= 0:
            ids.add(tid)
    return ids


@dataclass(frozen=True)
class StopRule:
    """When a greedy decode ends (see the module docstring)."""

    tokenizer: object
    stops: frozenset[int]
    max_new_tokens: int = 24
    stop_at_newline: bool = True

    @classmethod
    def of(cls, model, max_new_tokens: int = 24, stop_at_newline: bool = True) -> StopRule:
        return cls(model.tokenizer, frozenset(stop_token_ids(model)), max_new_tokens, stop_at_newline)

    def push(self, walk: Walk, token: int) -> bool:
        """Apply one greedy token to `walk`; True while the decode goes on."""
        if token in self.stops:
            walk.done = walk.stopped = True
        else:
            walk.generated.append(token)
            walk.done = len(walk.generated) >= self.max_new_tokens or (
                self.stop_at_newline and "\n" in self.tokenizer.decode(walk.generated).lstrip())
        return not walk.done

    def answer(self, walk: Walk) -> Answer:
        raw = self.tokenizer.decode(walk.generated)
        return Answer(text=raw.strip().split("\n")[0].strip(), raw=raw, token_ids=tuple(walk.generated),
                      stopped=walk.stopped)


@dataclass
class Walk:
    """One greedy decode in progress."""

    generated: list[int] = field(default_factory=list)
    done: bool = False
    stopped: bool = False  # ended on an end-of-turn token
    steps: int = 0  # forwards run for it beyond its first logits


# advance(keep, tokens): the rows of the last batch that go on (indices into it) and each one's
# new token -> the next logits [len(keep), vocab]
Advance = Callable[[list[int], list[int]], torch.Tensor]


def decode_greedy(rule: StopRule, walks: list[Walk], advance: Advance, logits: torch.Tensor | None = None,
                  observe: Callable[[torch.Tensor], None] | None = None) -> list[Walk]:
    """Decode every unfinished walk greedily under `rule`, batched: `logits` ([walk, vocab]) of
    the first step, or None to start by running each walk's last token. `observe(logits)` sees
    every step's logits before its tokens are picked."""
    alive = [i for i, w in enumerate(walks) if not w.done]
    if logits is None and alive:
        logits = _advance(walks, alive, list(range(len(alive))), advance)
    while alive:
        if observe is not None:
            observe(logits)
        picks = logits.argmax(-1).tolist()
        keep = [slot for slot, (i, token) in enumerate(zip(alive, picks)) if rule.push(walks[i], token)]
        if not keep:
            break
        alive = [alive[slot] for slot in keep]
        logits = _advance(walks, alive, keep, advance)
    return walks


def _advance(walks: list[Walk], alive: list[int], keep: list[int], advance: Advance) -> torch.Tensor:
    for i in alive:
        walks[i].steps += 1
    return advance(keep, [walks[i].generated[-1] for i in alive])
