"""Answering from a cache: greedy decoding and a teacher-forced agreement check.

Both prefill the receiver's suffix (question, generation prompt, answer lead-in) over the
handed-off cache through the HF model, then decode. The cache passed in is never changed:
it is wrapped in a fresh DynamicCache that grows by concatenation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.kv import KVCache
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
    """End-of-turn ids: the tokenizer's eos, the generation config's eos and <|im_end|>/<|eot_id|>."""
    tok = model.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    eos = getattr(model.hf.generation_config, "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    for name in ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"):
        tid = tok.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tok.unk_token_id and tid >= 0:
            ids.add(tid)
    return ids


@torch.inference_mode()
def greedy_answer(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                  max_new_tokens: int = 24, stop_at_newline: bool = True) -> Answer:
    """Prefill `suffix_ids` ([pos]) over `cache`, then decode greedily until end of turn."""
    stops = stop_token_ids(model)
    out = model.hf(input_ids=suffix_ids.to(model.device)[None], cache=cache.to_hf(model.config), use_cache=True)
    generated: list[int] = []
    stopped = False
    for _ in range(max_new_tokens):
        next_id = int(out.logits[0, -1].argmax())
        if next_id in stops:
            stopped = True
            break
        generated.append(next_id)
        if stop_at_newline and "\n" in model.tokenizer.decode(generated).lstrip():
            break
        out = model.hf(input_ids=torch.tensor([[next_id]], device=model.device), cache=out.cache, use_cache=True)
    raw = model.tokenizer.decode(generated)
    text = raw.strip().split("\n")[0].strip()
    return Answer(text=text, raw=raw, token_ids=tuple(generated), stopped=stopped)


def teacher_forced(model: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor,
                   answer_ids) -> TeacherForced:
    """One forward of suffix + answer over `cache`: the answer's log-probability and agreement."""
    answer = torch.as_tensor(list(answer_ids), dtype=torch.long)
    if answer.numel() == 0:
        return TeacherForced(0.0, (), 0, True)
    inputs = torch.cat([suffix_ids.cpu(), answer[:-1]]).to(model.device)
    with torch.inference_mode():
        out = model.hf(input_ids=inputs[None], cache=cache.to_hf(model.config), use_cache=True)
    logits = out.logits[0, len(suffix_ids) - 1:].float()  # [answer, vocab]: predicts each answer token
    logp = torch.log_softmax(logits, dim=-1).gather(1, answer[:, None].to(logits.device))[:, 0]
    agree = (logits.argmax(-1).cpu() == answer).long()
    n_agree = int(agree.cumprod(0).sum())
    return TeacherForced(float(logp.sum()), tuple(logp.tolist()), n_agree, n_agree == len(answer))
