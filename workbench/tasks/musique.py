"""MuSiQue in CacheBlend's retrieval setting: a question, its retrieved passages, accepted answers.

The file is a JSON list of {id, question, answers: [str], ctxs: [{title, text}]} (the set
CacheBlend's authors evaluate with; see ../shared/data/README.md). Options for the retrieval
setting, recorded in a run's manifest:

    max_passages        keep the first K passages, in retrieval order
    max_passage_tokens  cut each passage to at most N tokens of the model, at a word boundary
                        (needs the model's tokenizer)
    instruction         the receiver's instruction, written as the system prompt (the shared
                        prefix every sender sees); CacheBlend asks to "answer within 5 words"

Every problem with the file raises a WorkbenchError naming the file and the entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.tasks.example import Example, check_text

INSTRUCTION = ("Read the passages, then answer the question with a short phrase taken from them "
               "(a few words, no sentence).")
OPTIONS = ("max_passages", "max_passage_tokens", "instruction")


def load_musique(path: str | Path, max_passages: int | None = None, max_passage_tokens: int | None = None,
                 instruction: str = INSTRUCTION, tokenizer=None, max_positions: int | None = None) -> list[Example]:
    """Examples of a MuSiQue file (see the module docstring). With a tokenizer, a passage longer
    than `max_positions` tokens is refused by entry."""
    path = Path(path).expanduser()
    _check_options(max_passages, max_passage_tokens, instruction, tokenizer)
    if not path.is_file():
        raise WorkbenchError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WorkbenchError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, list) or not data:
        raise WorkbenchError(f"{path}: expected a non-empty JSON list of entries, got {type(data).__name__}")
    examples, seen = [], set()
    for index, entry in enumerate(data):
        where = f"{path}: entry {index}"
        if not isinstance(entry, dict):
            raise WorkbenchError(f"{where}: expected an object, got {type(entry).__name__}")
        missing = [k for k in ("id", "question", "answers", "ctxs") if k not in entry]
        if missing:
            raise WorkbenchError(f"{where}: missing field(s) {missing}")
        example_id = str(entry["id"])
        where = f"{where} (id {example_id!r})"
        if example_id in seen:
            raise WorkbenchError(f"{where}: duplicate id")
        seen.add(example_id)
        passages = _passages(entry["ctxs"], where)[:max_passages]
        if max_passage_tokens is not None:
            passages = [_cut(p, max_passage_tokens, tokenizer) for p in passages]
        if tokenizer is not None and max_positions is not None:
            for i, p in enumerate(passages):
                n = len(tokenizer(p, add_special_tokens=False)["input_ids"])
                if n >= max_positions:
                    raise WorkbenchError(f"{where}: passage {i} is {n} tokens, longer than the model's context of "
                                         f"{max_positions}; cut it with max_passage_tokens")
        answers = entry["answers"]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise WorkbenchError(f"{where}: field 'answers' must be a list of strings")
        question = entry["question"]
        if not isinstance(question, str):
            raise WorkbenchError(f"{where}: field 'question' must be a string")
        try:
            examples.append(Example(example_id, tuple(passages), question, tuple(a for a in answers if a.strip()),
                                    system=instruction or None, meta={"source": "musique",
                                                                      "n_passages": len(passages)}))
        except WorkbenchError as err:
            raise WorkbenchError(f"{where}: {err}") from None
    return examples


def _check_options(max_passages, max_passage_tokens, instruction, tokenizer) -> None:
    for name, value in (("max_passages", max_passages), ("max_passage_tokens", max_passage_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise WorkbenchError(f"{name} must be an integer >= 1, got {value!r}")
    if max_passage_tokens is not None and tokenizer is None:
        raise WorkbenchError("max_passage_tokens counts the model's tokens: it needs the model's tokenizer")
    if not isinstance(instruction, str):
        raise WorkbenchError(f"instruction must be a string, got {type(instruction).__name__}")


def _passages(ctxs: Any, where: str) -> list[str]:
    if not isinstance(ctxs, list) or not ctxs:
        raise WorkbenchError(f"{where}: field 'ctxs' must be a non-empty list of passages")
    out = []
    for i, ctx in enumerate(ctxs):
        text = ctx.get("text") if isinstance(ctx, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise WorkbenchError(f"{where}: ctxs[{i}] must be an object with a non-empty 'text'")
        title = ctx.get("title") or ""
        out.append(f"{title.strip()}: {text.strip()}" if isinstance(title, str) and title.strip() else text.strip())
        check_text(out[-1], f"{where}: ctxs[{i}]")  # before a tokenizer cuts or counts it
    return out


def _cut(text: str, max_tokens: int, tokenizer) -> str:
    """`text` cut to at most `max_tokens` tokens, at the last word boundary inside them."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return text
    head = tokenizer.decode(ids[:max_tokens])
    cut = head.rsplit(None, 1)[0] if " " in head.strip() else head
    return cut.rstrip()
