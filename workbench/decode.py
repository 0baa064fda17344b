"""Answering from a cache: greedy decoding (one cache or a batch) and teacher forcing.

Each prefills the receiver's suffix (question, generation prompt, answer lead-in) over the
handed-off cache through the HF model, then decodes. The cache passed in is never changed:
it is wrapped in a fresh DynamicCache that grows by concatenation. One stopping rule
(`_step`) serves every greedy decoder: an end-of-turn token (not kept), a newline in the
answer, or `max_new_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.kv import KVCache, hf_cache
from workbench.models import LoadedModel


@dataclass(frozen=True)
class Answer:
    """A greedy answer. `text` is the first line, stripped; `raw` all that was decoded."""

    text: str
    raw: str
    token_ids: tuple[int, ...]  # generated ids, stop token excluded
    stopped: bool  # ended on an end-of-turn token (not on max_new_tokens or a newline)


@dataclass(frozen=True)
class TeacherForced:
    """How a cache scores a given answer in one forward."""

    logprob: float  # sum of log p(answer token | cache, suffix, earlier answer tokens)
    token_logprobs: tuple[float, ...]
    n_agree: int  # leading answer tokens that greedy decoding would reproduce
    agrees: bool  # greedy decoding would produce exactly these tokens


def stop_token_ids(model: LoadedModel) -> set[int]:
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


def _step(model: LoadedModel, generated: list[int], token: int, stops: set[int], stop_at_newline: bool) -> str:
    """Apply one greedy token to `generated`: "stop" (end of turn, not kept), "done" (kept; the
    answer now holds a newline) or "go"."""
    if token in stops:
        return "stop"
    generated.append(token)
    if stop_at_newline and "\n" in model.tokenizer.decode(generated).lstrip():
        return "done"
    return "go"


def _answer(model: LoadedModel, generated: list[int], stopped: bool) -> Answer:
    raw = model.tokenizer.decode(generated)
    return Answer(text=raw.strip().split("\n")[0].strip(), raw=raw, token_ids=tuple(generated), stopped=stopped)


@torch.inference_mode()
def greedy_answer(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                  max_new_tokens: int = 24, stop_at_newline: bool = True) -> Answer:
    """Prefill `suffix_ids` ([pos]) over `cache`, then decode greedily until end of turn."""
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True,
                   logits_to_keep=1)  # only the last position's logits are read
    return continue_greedy(model, out.logits[0, -1], out.cache, max_new_tokens, stop_at_newline)


@torch.inference_mode()
def continue_greedy(model: LoadedModel, logits: torch.Tensor, cache, max_new_tokens: int = 24,
                    stop_at_newline: bool = True) -> Answer:
    """Greedy decoding from a prefill that already ran: its last position's `logits` ([vocab]) and
    its HF `cache`, which the decoding extends."""
    stops = stop_token_ids(model)
    generated: list[int] = []
    stopped = False
    for _ in range(max_new_tokens):
        state = _step(model, generated, int(logits.argmax()), stops, stop_at_newline)
        if state != "go":
            stopped = state == "stop"
            break
        out = model.hf(input_ids=torch.tensor([[generated[-1]]], device=model.device), cache=cache,
                       use_cache=True)
        logits, cache = out.logits[0, -1], out.cache
    return _answer(model, generated, stopped)


def _groups(lengths: list[int], chunk: int, row_budget: int, same_length: bool = False) -> list[list[int]]:
    """Indices sorted by length, cut into batches of <= `chunk` caches and <= `row_budget` padded
    rows; with `same_length`, only caches of one length share a batch (no padding)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        fits = groups and len(groups[-1]) < chunk and (len(groups[-1]) + 1) * lengths[i] <= row_budget
        if fits and (not same_length or lengths[groups[-1][0]] == lengths[i]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


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
    stops = stop_token_ids(model)
    answers: list[Answer | None] = [None] * len(caches)
    lengths = [c.n_positions for c in caches]
    n_suffix = len(suffix_ids)
    for group in _groups(lengths, chunk, row_budget, same_length=model.adapter.has_windows):
        width = max(lengths[i] for i in group)
        lens = torch.tensor([lengths[i] for i in group], device=model.device)  # [B]
        padded = width != int(lens.min())

        def pad(x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (0, 0, 0, width - x.shape[2])) if x.shape[2] < width else x

        keys = torch.stack([pad(caches[i].keys) for i in group], dim=1).to(model.device)  # [layer, B, kv_head, pos, d]
        values = torch.stack([pad(caches[i].values) for i in group], dim=1).to(model.device)
        cache_in = hf_cache([(keys[l], values[l]) for l in range(keys.shape[0])])
        mask = None
        if padded:
            mask = (torch.arange(width + n_suffix, device=model.device)[None] < lens[:, None]).long()  # [B, pos]
            mask[:, width:] = 1
        positions = lens[:, None] + torch.arange(n_suffix, device=model.device)[None]  # [B, suffix]
        ids = suffix_ids.to(model.device)[None].expand(len(group), -1)
        out = model.hf(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache_in, use_cache=True,
                       logits_to_keep=1)  # only the last position's logits are read
        generated: list[list[int]] = [[] for _ in group]
        stopped = [False] * len(group)
        alive = list(range(len(group)))
        for step in range(max_new_tokens):
            picks = out.logits[:, -1].argmax(-1).tolist()
            keep = []
            for slot, (row, token) in enumerate(zip(alive, picks)):
                state = _step(model, generated[row], token, stops, stop_at_newline)
                stopped[row] = state == "stop"
                if state == "go":
                    keep.append(slot)
            if not keep or step == max_new_tokens - 1:
                break
            cache = out.cache
            if len(keep) < len(alive):
                index = torch.tensor(keep, device=model.device)
                cache.batch_select_indices(index)
                mask = None if mask is None else mask[index]
                lens = lens[index]
            alive = [alive[slot] for slot in keep]
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
            nxt = torch.tensor([[generated[row][-1]] for row in alive], device=model.device)
            positions = (lens + n_suffix + step)[:, None]
            out = model.hf(input_ids=nxt, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                           logits_to_keep=1)
        for row, i in enumerate(group):
            answers[i] = _answer(model, generated[row], stopped[row])
    return answers


@torch.inference_mode()
def draft_confidence(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor, k: int = 2) -> float:
    """OpenGate's trust in a cache: the mean top-1 probability of the first `k` greedy steps after
    prefilling `suffix_ids` over `cache` (fewer when an end-of-turn token comes first)."""
    stops = stop_token_ids(model)
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(), use_cache=True)
    top = []
    for step in range(k):
        probs = out.logits[0, -1].float().softmax(-1)
        token = int(probs.argmax())
        top.append(float(probs[token]))
        if token in stops or step == k - 1:
            break
        out = model.hf(input_ids=torch.tensor([[token]], device=model.device), cache=out.cache, use_cache=True)
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
