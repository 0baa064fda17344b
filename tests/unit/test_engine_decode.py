"""The one greedy loop and its stopping rule, and the one batcher (no model: scripted logits)."""

import torch

from workbench.byte_tokenizer import byte_tokenizer
from workbench.batching import pack, pack_sizes
from workbench.engine.decode import StopRule, Walk, decode_greedy

STOP = 0


def scripted(tokens: list[list[int]], vocab: int = 260):
    """An `advance` that plays each walk's script, one token per step: (first logits, advance, calls)."""
    def logits_for(picks):
        out = torch.zeros(len(picks), vocab)
        out[torch.arange(len(picks)), torch.tensor(picks)] = 1.0
        return out

    calls, alive = [], list(range(len(tokens)))
    step = {w: 0 for w in alive}

    def advance(keep, fed):
        nonlocal alive
        alive = [alive[k] for k in keep]
        calls.append((list(alive), list(fed)))
        for w in alive:
            step[w] += 1
        return logits_for([tokens[w][step[w]] for w in alive])

    return logits_for([t[0] for t in tokens]), advance, calls


def test_each_walk_ends_on_its_own_rule():
    rule = StopRule(byte_tokenizer(), frozenset({STOP}), max_new_tokens=4)
    (nl,) = byte_tokenizer()("\n", add_special_tokens=False)["input_ids"]  # a newline
    scripts = [[70, 71, STOP, 72], [70, nl, 73, 74], [70, 71, 72, 73, 74], [STOP]]
    first, advance, calls = scripted(scripts)
    walks = decode_greedy(rule, [Walk() for _ in scripts], advance, first)
    assert [w.generated for w in walks] == [[70, 71], [70, nl], [70, 71, 72, 73], []]
    assert [w.stopped for w in walks] == [True, False, False, True]  # an end of turn, not a newline or the cap
    assert [rule.answer(w).text for w in walks][3] == ""
    assert calls[0][0] == [0, 1, 2] and calls[-1][0] == [2]  # stopped walks leave the batch
    assert [w.steps for w in walks] == [2, 1, 3, 0]  # forwards run for each beyond its first logits


def test_a_walk_in_progress_starts_by_running_its_last_token():
    rule = StopRule(byte_tokenizer(), frozenset({STOP}), max_new_tokens=3, stop_at_newline=False)
    walk = Walk(generated=[80])
    seen = []

    def advance(keep, fed):
        seen.append(fed)
        return torch.nn.functional.one_hot(torch.tensor([81 if len(seen) == 1 else STOP]), 260).float()

    decode_greedy(rule, [walk], advance)
    assert seen == [[80], [81]] and walk.generated == [80, 81] and walk.stopped


def test_the_batcher_packs_in_order_under_its_budget():
    sizes = [5, 1, 4, 2, 3]
    assert pack_sizes(sizes, lambda members: sum(sizes[i] for i in members) <= 6) == [[1, 3, 4], [2], [0]]
    assert pack(5, lambda members: len(members) <= 2) == [[0, 1], [2, 3], [4]]  # as given without a key
    assert pack(3, lambda members: False) == [[0], [1], [2]]  # a lone item always forms a group
