"""One question over several passages: the unit every data set yields."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import WorkbenchError
from workbench.tasks.metrics import RETRIEVAL_RULES, SCORINGS, retrieved_score, score_answer


@dataclass(frozen=True)
class Example:
    """A receiver context's content: passages in order, the question, accepted answers.

    ``gold`` lists accepted answers, the first being canonical; it may be empty when the
    answer is unknown. ``meta["scoring"]`` says how gold scores an answer (`metrics.SCORINGS`):
    "any" accepted answer (the default), or "all" listed values (every one must be named).
    ``meta["retrieval"]`` names the retrieval rule (`metrics.RETRIEVAL_RULES`; by default RULER's
    string_match_all for RULER data, else contains, or contains_all under "all" scoring).
    ``meta["evidence"]``, where the data defines it, lists the gold evidence as character spans
    ``[passage, start, end]`` (end exclusive) of the passages' texts: RULER's queried needles,
    HotpotQA's supporting sentences, the synthetic generator's bridge facts. ``meta`` is JSON-safe (it is stored as its JSON round trip, so tuples become lists and
    non-string keys become strings).
    """

    id: str
    passages: tuple[str, ...]
    question: str
    gold: tuple[str, ...]
    system: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise WorkbenchError(f"example id must be a non-empty string, got {self.id!r}")
        where = f"example {self.id!r}"
        check_text(self.id, f"{where}: id")
        passages = _string_tuple(self.passages, f"{where}: passages")
        if not passages:
            raise WorkbenchError(f"{where}: needs at least one passage")
        for index, text in enumerate(passages):
            if not text.strip():
                raise WorkbenchError(f"{where}: passage {index} is empty")
        if not isinstance(self.question, str) or not self.question.strip():
            raise WorkbenchError(f"{where}: question must be a non-empty string")
        gold = _string_tuple(self.gold, f"{where}: gold")
        for index, answer in enumerate(gold):
            if not answer.strip():
                raise WorkbenchError(f"{where}: gold answer {index} is empty")
        if self.system is not None and not isinstance(self.system, str):
            raise WorkbenchError(f"{where}: system must be a string or None")
        texts = {**{f"passages[{i}]": p for i, p in enumerate(passages)}, "question": self.question,
                 **{f"gold[{i}]": g for i, g in enumerate(gold)}, "system": self.system or ""}
        for field_name, text in texts.items():
            check_text(text, f"{where}: {field_name}")
        if not isinstance(self.meta, Mapping):
            raise WorkbenchError(f"{where}: meta must be a mapping, got {type(self.meta).__name__}")
        try:
            meta = json.loads(json.dumps(dict(self.meta)))
        except (TypeError, ValueError) as exc:
            raise WorkbenchError(f"{where}: meta is not JSON-serialisable ({exc})") from None
        if meta.get("scoring", "any") not in SCORINGS:
            raise WorkbenchError(f"{where}: meta['scoring'] must be one of {', '.join(SCORINGS)}, got "
                                 f"{meta['scoring']!r}")
        if meta.get("retrieval", RETRIEVAL_RULES[0]) not in RETRIEVAL_RULES:
            raise WorkbenchError(f"{where}: meta['retrieval'] must be one of {', '.join(RETRIEVAL_RULES)}, got "
                                 f"{meta['retrieval']!r}")
        if "evidence" in meta:
            check_evidence(meta["evidence"], passages, f"{where}: meta['evidence']")
        object.__setattr__(self, "passages", passages)
        object.__setattr__(self, "gold", gold)
        object.__setattr__(self, "meta", meta)

    @property
    def scoring(self) -> str:
        """How gold scores an answer: "any" accepted answer or "all" listed values."""
        return self.meta.get("scoring", "any")

    @property
    def retrieval(self) -> str:
        """The rule `retrieved` reads (`metrics.RETRIEVAL_RULES`): the one meta names, else RULER's
        string_match_all for RULER data, contains_all under "all" scoring, contains otherwise."""
        if "retrieval" in self.meta:
            return self.meta["retrieval"]
        if self.meta.get("source") == "ruler":
            return "string_match_all"
        return "contains_all" if self.scoring == "all" else "contains"

    def retrieved(self, answer: str) -> float:
        """Whether `answer` names the gold evidence, however it ends (`retrieval`'s rule), in [0, 1]."""
        return retrieved_score(answer, self.gold, self.retrieval)

    @property
    def evidence(self) -> tuple[tuple[int, int, int], ...] | None:
        """The gold evidence as (passage, start, end) character spans; None where the data defines none."""
        spans = self.meta.get("evidence")
        return None if spans is None else tuple(tuple(span) for span in spans)

    def score(self, answer: str) -> tuple[float, float, float]:
        """(em, f1, contains) of `answer` against gold, as `scoring` reads it."""
        return score_answer(answer, self.gold, self.scoring)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; ``Example.from_dict`` reverses it."""
        return {
            "id": self.id,
            "passages": list(self.passages),
            "question": self.question,
            "gold": list(self.gold),
            "system": self.system,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Example:
        """Build from ``to_dict`` output; ``system``, ``gold`` and ``meta`` are optional."""
        if not isinstance(data, Mapping):
            raise WorkbenchError(f"example must be a mapping, got {type(data).__name__}")
        missing = [key for key in ("id", "passages", "question") if key not in data]
        if missing:
            raise WorkbenchError(f"example {data.get('id')!r}: missing field(s) {missing}")
        return cls(
            id=data["id"],
            passages=data["passages"],
            question=data["question"],
            gold=data.get("gold", ()),
            system=data.get("system"),
            meta=data.get("meta") or {},
        )


MAX_DATA_SEED = 2**32 - 1  # a run seed's range (`workbench.seeds`): a data seed is recorded beside it


def check_data_seed(value) -> int:
    """A data seed (RULER's examples, HotpotQA's gold+K draw): an integer from 0 to MAX_DATA_SEED, else a
    one-line error, given with the data set's options before any run folder is written."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DATA_SEED:
        raise WorkbenchError(f"data_seed must be an integer >= 0 and at most {MAX_DATA_SEED} (2**32 - 1), "
                             f"got {value!r}")
    return value


def check_text(text: str, what: str) -> None:
    """Raise unless `text` is UTF-8 text: a lone surrogate (JSON's escaped "\\udc80" loads as one)
    passes every type check, then every tokenizer refuses it after the model loads."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise WorkbenchError(f"{what} holds {text[err.start]!r} at character {err.start}, a lone surrogate that is "
                             f"not text (an escaped \\udXXX in the file?); fix or drop it") from None


def check_evidence(spans: Any, passages: tuple[str, ...], what: str) -> None:
    """Raise unless `spans` is a list of [passage, start, end] character spans inside the passages."""
    if not isinstance(spans, list):
        raise WorkbenchError(f"{what} must be a list of [passage, start, end] spans, got {type(spans).__name__}")
    for index, span in enumerate(spans):
        ok = (isinstance(span, list) and len(span) == 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in span))
        if not ok:
            raise WorkbenchError(f"{what}[{index}] must be [passage, start, end] (three integers), got {span!r}")
        passage, start, end = span
        if not 0 <= passage < len(passages):
            raise WorkbenchError(f"{what}[{index}]: passage {passage} does not exist (the example has "
                                 f"{len(passages)})")
        if not 0 <= start < end <= len(passages[passage]):
            raise WorkbenchError(f"{what}[{index}]: characters [{start}, {end}) are not a span of passage {passage} "
                                 f"({len(passages[passage])} characters)")


def _string_tuple(value: Any, what: str) -> tuple[str, ...]:
    """Coerce a list/tuple of strings to a tuple, rejecting a bare string or other types."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise WorkbenchError(f"{what} must be a list of strings, got {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise WorkbenchError(f"{what}[{index}] must be a string, got {type(item).__name__}")
    return tuple(value)
