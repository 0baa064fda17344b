"""Answering from a cache: greedy decoding (one cache or a batch) and teacher forcing.

Each prefills the receiver's suffix (question, generation prompt, answer lead-in) over the
handed-off cache through the HF model, then decodes: through HF's modules, except that a single
cache's answer on CUDA (`greedy_answer`, `continue_greedy`) steps through the engine's
`Decoder`, whose step is captured as a CUDA graph (`engine.graphs`). The cache passed in is
never changed: it is wrapped in a fresh DynamicCache that grows by concatenation. The greedy
loop and its stopping rule are the engine's (`engine.decode`): an end-of-turn token (not kept),
a newline in the answer, or `max_new_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.batching import pack_sizes
from workbench.engine.answers import continue_answer
from workbench.engine.decode import Answer, StopRule, Walk, decode_greedy, stop_token_ids
from workbench.engine.graphs import graphs_wanted
from workbench.kv import KVCache, hf_cache
from workbench.models import LoadedModel

__all__ = ["Answer", "TeacherForced", "continue_greedy", "draft_confidence", "greedy_answer", "greedy_answers",
           "stop_token_ids", "teacher_forced"]


@dataclass(frozen=True)
class TeacherForced:
    """How a cache scores a given answer in one forward."""

    logprob: float  # sum of log p(answer token | cache, suffix, earlier answer tokens)
    token_logprobs: tuple[float, ...]
    n_agree: int  # leading answer tokens that greedy decoding would reproduce
    agrees: bool  # greedy decoding would produce exactly these tokens


@torch.inference_mode()
def greedy_answer(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                  max_new_tokens: int = 24, stop_at_newline: bool = True) -> Answer:
    """Prefill `suffix_ids` ([pos]) over `cache`, then decode greedily until end of turn
    (`continue_greedy`: on CUDA through the engine's captured step)."""
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True,
                   logits_to_keep=1)  # only the last position's logits are read
    return continue_greedy(model, out.logits[0, -1], out.cache, max_new_tokens, stop_at_newline)


@torch.inference_mode()
def continue_greedy(model: LoadedModel, logits: torch.Tensor, cache, max_new_tokens: int = 24,
                    stop_at_newline: bool = True, engine: bool | None = None) -> Answer:
    """Greedy decoding from a prefill that already ran: its last position's `logits` ([vocab]) and
    its cache (an HF cache, which HF's decoding extends, or a `KVCache`, never changed).

    `engine`: decode through the engine's `Decoder` (`engine.answers.continue_answer`), whose steps
    are captured once as a CUDA graph and replayed; the default where the capture is wanted
    (`engine.graphs.graphs_wanted`: on CUDA, unless KVWB_CUDA_GRAPHS=0), since HF's eager step is
    bound by the host's kernel launches there. Otherwise HF's modules step by step. The two give the
    same tokens up to float rounding (tests/unit/test_graphs.py)."""
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    use_engine = graphs_wanted(model, None) if engine is None else engine
    if use_engine:
        prefilled = cache if isinstance(cache, KVCache) else KVCache.from_hf(cache)
        return rule.answer(continue_answer(model, prefilled, logits, rule))
    cache = cache.to_hf() if isinstance(cache, KVCache) else cache
    walk = Walk()
    if max_new_tokens < 1:
        return rule.answer(walk)

    def advance(keep: list[int], tokens: list[int]) -> torch.Tensor:
        nonlocal cache
        out = model.hf(input_ids=torch.tensor([tokens], device=model.device), cache=cache, use_cache=True)
        cache = out.cache
        return out.logits[:, -1]  # [1, vocab]

    decode_greedy(rule, [walk], advance, logits[None])
    return rule.answer(walk)


def _groups(lengths: list[int], chunk: int, row_budget: int, same_length: bool = False) -> list[list[int]]:
    """Indices sorted by length, cut into batches of <= `chunk` caches and <= `row_budget` padded
    rows; with `same_length`, only caches of one length share a batch (no padding)."""
    def fits(members: list[int]) -> bool:
        longest = lengths[members[-1]]
        return (len(members) <= chunk and len(members) * longest <= row_budget
                and (not same_length or lengths[members[0]] == longest))
    return pack_sizes(lengths, fits)


@torch.inference_mode()
def greedy_answers(model: LoadedModel, caches: list[KVCache], suffix_ids: torch.Tensor,
                   max_new_tokens: int = 24, chunk: int = 64, row_budget: int = 6144,
                   stop_at_newline: bool = True) -> list[Answer]:
    """Greedy answers of the same suffix over many caches, decoded in batches.

    Same stopping rule as `greedy_answer`; rows that stop leave the batch. Caches of different
    lengths are padded at their end with masked rows, and the suffix gets each cache's own
    positions, so padding changes nothing but float rounding: up to the rounding of batched
    matrix products each answer is the one `greedy_answer` gives for that cache alone.
    Batches hold at most `chunk` caches and `row_budget` padded rows. A model with sliding-window
    layers batches only caches of one length: transformers applies the window by index in the
    padded batch, which would narrow a shorter cache's window by its padding.
    """
    rule = StopRule.of(model, max_new_tokens, stop_at_newline)
    walks = [Walk() for _ in caches]
    lengths = [c.n_positions for c in caches]
    n_suffix = len(suffix_ids)
    for group in _groups(lengths, chunk, row_budget, same_length=model.adapter.has_windows):
        if max_new_tokens < 1:
            break
        width = max(lengths[i] for i in group)
        lens = torch.tensor([lengths[i] for i in group], device=model.device)  # [B]

        def pad(x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (0, 0, 0, width - x.shape[2])) if x.shape[2] < width else x

        keys = torch.stack([pad(caches[i].keys) for i in group], dim=1).to(model.device)  # [layer, B, kv_head, pos, d]
        values = torch.stack([pad(caches[i].values) for i in group], dim=1).to(model.device)
        cache = hf_cache([(keys[l], values[l]) for l in range(keys.shape[0])])
        mask = None
        if width != int(lens.min()):
            mask = (torch.arange(width + n_suffix, device=model.device)[None] < lens[:, None]).long()  # [B, pos]
            mask[:, width:] = 1
        positions = lens[:, None] + torch.arange(n_suffix, device=model.device)[None]  # [B, suffix]
        ids = suffix_ids.to(model.device)[None].expand(len(group), -1)
        out = model.hf(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                       logits_to_keep=1)  # only the last position's logits are read
        cache, step = out.cache, 0

        def advance(keep: list[int], tokens: list[int]) -> torch.Tensor:
            nonlocal cache, mask, lens, step
            if len(keep) < len(lens):
                index = torch.tensor(keep, device=model.device)
                cache.batch_select_indices(index)
                mask = None if mask is None else mask[index]
                lens = lens[index]
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(len(keep), 1)], dim=1)
            positions = (lens + n_suffix + step)[:, None]
            step += 1
            nxt = torch.tensor(tokens, device=model.device)[:, None]
            out = model.hf(input_ids=nxt, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                           logits_to_keep=1)
            cache = out.cache
            return out.logits[:, -1]  # [alive, vocab]

        decode_greedy(rule, [walks[i] for i in group], advance, out.logits[:, -1])
    return [rule.answer(walk) for walk in walks]


@torch.inference_mode()
def draft_confidence(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor, k: int = 2) -> float:
    """OpenGate's trust in a cache: the mean top-1 probability of the first `k` greedy steps after
    prefilling `suffix_ids` over `cache` (fewer when an end-of-turn token comes first)."""
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True)
    hf, top = out.cache, []

    def advance(keep: list[int], tokens: list[int]) -> torch.Tensor:
        nonlocal hf
        step = model.hf(input_ids=torch.tensor([tokens], device=model.device), cache=hf, use_cache=True)
        hf = step.cache
        return step.logits[:, -1]

    decode_greedy(StopRule.of(model, k, stop_at_newline=False), [Walk()], advance, out.logits[:, -1],
                  observe=lambda logits: top.append(float(logits[0].float().softmax(-1).max())))
    return sum(top) / len(top)


def teacher_forced(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                   answer_ids) -> TeacherForced:
    """One forward of suffix + answer over `cache`: the answer's log-probability and agreement."""
    answer = torch.as_tensor(list(answer_ids), dtype=torch.long)
    if answer.numel() == 0:
        return TeacherForced(0.0, (), 0, True)
    inputs = torch.cat([suffix_ids.cpu(), answer[:-1]]).to(model.device)
    with torch.inference_mode():
        out = model.hf(input_ids=inputs[None], cache=cache.to_hf(), use_cache=True)
    logits = out.logits[0, len(suffix_ids) - 1:].float()  # [answer, vocab]: predicts each answer token
    logp = torch.log_softmax(logits, dim=-1).gather(1, answer[:, None].to(logits.device))[:, 0]
    agree = (logits.argmax(-1).cpu() == answer).long()
    n_agree = int(agree.cumprod(0).sum())
    return TeacherForced(float(logp.sum()), tuple(logp.tolist()), n_agree, n_agree == len(answer))
