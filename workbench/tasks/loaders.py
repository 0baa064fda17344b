"""Readers for HotpotQA, 2WikiMultihopQA and the workbench's own JSONL format.

Every problem with a file raises ``WorkbenchError`` naming the file, the record (index or
line, and id once known) and the field.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.tasks.example import Example, check_data_seed

_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer"}


HOTPOTQA_OPTIONS = ("passages", "data_seed")
_PASSAGES = re.compile(r"all|gold(?:\+(\d+))?")


def load_hotpotqa(path: str | Path, passages: str = "all", data_seed: int = 0) -> list[Example]:
    """HotpotQA (distractor setting): a JSON list of {_id, question, answer, context}.

    A passage is "title: sentence sentence ...". ``meta`` carries ``source``, ``titles``
    and, where the record has them, ``type``, ``level``, ``supporting_facts`` and
    ``support_passages`` (indices of the passages that supporting_facts name). A record whose
    supporting_facts name a title its context lacks is refused.

    ``passages``: "all" paragraphs (default), "gold" (those supporting_facts name) or "gold+K"
    (the gold ones and K distractors drawn by `data_seed` and the record's id), kept in the
    record's order; ``meta["passage_setting"]`` records a setting other than "all". A record with
    fewer than K distractors keeps those it has: ``meta["n_distractors"]`` (beside
    ``meta["distractors_asked"]``, K) says how many, and `kvwb summary` counts such examples.
    """
    keep = _passage_setting(passages, data_seed)
    return _load_multihop(path, "hotpotqa", extra_fields=("type", "level"), keep=keep)


def load_2wiki(path: str | Path) -> list[Example]:
    """2WikiMultihopQA: HotpotQA's shape; gold is the answer followed by ``answer_aliases``.

    ``meta`` is as for HotpotQA, with ``evidences`` (the evidence triples) when present.
    """
    return _load_multihop(path, "2wiki", extra_fields=("type", "evidences"), aliases=True)


def load_jsonl(path: str | Path) -> list[Example]:
    """One JSON object per line: id, passages, question, answers; optional system, meta, evidence.

    ``evidence``, where given, lists the gold evidence as [passage, start, end] character spans of
    the passages (end exclusive); it becomes ``meta["evidence"]``.

    Blank lines are skipped; ``answers`` may be empty (answer unknown). Lines end at ``\n`` only:
    U+2028, U+0085 and the like are text inside a JSON string (``json.dumps(...,
    ensure_ascii=False)`` writes them raw), not line breaks.
    """
    path, text = _read(path)
    examples, seen = [], {}
    for line_number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        label = f"line {line_number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkbenchError(f"{path}: {label}: invalid JSON ({exc.msg} at column "
                                 f"{exc.colno})") from None
        record = _Record(data, path, label)
        example_id = record.id("id")
        system = record.get("system", (str, type(None)), required=False)
        meta = record.get("meta", (dict, type(None)), required=False) or {}
        evidence = record.get("evidence", list, required=False)
        if evidence is not None:
            meta = {**meta, "evidence": evidence}
        example = record.build(
            id=example_id,
            passages=record.strings("passages"),
            question=record.get("question", str),
            gold=record.strings("answers", allow_empty=True),
            system=system,
            meta=meta,
        )
        _add_unique(examples, seen, example, record)
    return _non_empty(examples, path)


def _passage_setting(passages, data_seed):
    """The distractors a `passages` setting keeps: None (all paragraphs) or K (gold + K drawn)."""
    match = _PASSAGES.fullmatch(passages) if isinstance(passages, str) else None
    if match is None:
        raise WorkbenchError(f"passages must be 'all', 'gold' or 'gold+K' (K distractors, e.g. 'gold+2') for "
                             f"hotpotqa data, got {passages!r}")
    check_data_seed(data_seed)
    if passages == "all":
        return None
    return (passages, int(match.group(1) or 0), data_seed)


def _load_multihop(path: str | Path, source: str, extra_fields: tuple[str, ...],
                   aliases: bool = False, keep: tuple[str, int, int] | None = None) -> list[Example]:
    path, text = _read(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno} "
                             f"({exc.msg})") from None
    if not isinstance(data, list):
        raise WorkbenchError(f"{path}: expected a JSON list of records, got {_type_name(data)}")
    examples, seen = [], {}
    for index, item in enumerate(data):
        record = _Record(item, path, f"record {index}")
        example_id = record.id("_id")
        titles, passages, sentence_spans = record.context()
        gold = [record.get("answer", str)]
        if aliases:
            gold += [a for a in record.strings("answer_aliases", required=False, allow_empty=True)
                     if a.strip() and a not in gold]
        meta: dict[str, Any] = {"source": source, "titles": titles}
        for key in extra_fields:
            if key in record.data:
                meta[key] = record.data[key]
        facts = record.supporting_facts()
        if facts is not None:
            missing = next((title for title, _ in facts if title not in titles), None)
            if missing is not None:
                raise WorkbenchError(f"{record.where}: supporting_facts name the title {missing!r}, which no "
                                     f"paragraph of its context has")
            named = {title for title, _ in facts}
            meta["supporting_facts"] = facts
            meta["support_passages"] = [i for i, title in enumerate(titles) if title in named]
            meta["evidence"] = _supporting_spans(facts, titles, sentence_spans)
        if keep is not None:
            passages = _keep_passages(record, example_id, passages, meta, keep)
        example = record.build(id=example_id, passages=passages,
                               question=record.get("question", str), gold=gold, meta=meta)
        _add_unique(examples, seen, example, record)
    return _non_empty(examples, path)


def _supporting_spans(facts, titles: list[str], sentence_spans: list[dict]) -> list[list[int]]:
    """The supporting facts' sentences as [passage, start, end] spans, in passage order. A fact whose
    sentence index the paragraph lacks (HotpotQA has a few) or whose sentence is blank names no span;
    a title held by several paragraphs names its sentence in each."""
    spans = {(i, *sentence_spans[i][number]) for title, number in facts for i, t in enumerate(titles)
             if t == title and isinstance(number, int) and number in sentence_spans[i]}
    return [list(span) for span in sorted(spans)]


def _keep_passages(record, example_id: str, passages: list[str], meta: dict, keep) -> list[str]:
    """The gold paragraphs and K distractors drawn by the seed, in the record's order; `meta` updated."""
    setting, k, seed = keep
    gold = meta.get("support_passages")
    if gold is None:
        raise WorkbenchError(f"{record.where}: passages {setting!r} needs supporting_facts, which the record lacks")
    others = [i for i in range(len(passages)) if i not in gold]
    # a record with fewer than K distractors (HotpotQA's dev set holds some with only their gold
    # paragraphs) keeps those it has; `n_distractors` records how many, beside the K asked
    drawn = random.Random(f"workbench-hotpotqa:{seed}:{example_id}").sample(others, min(k, len(others)))
    kept = sorted([*gold, *drawn])
    meta.update(titles=[meta["titles"][i] for i in kept], support_passages=[kept.index(i) for i in gold],
                passage_setting=setting, data_seed=seed, n_distractors=len(drawn), distractors_asked=k,
                evidence=[[kept.index(p), start, end] for p, start, end in meta.get("evidence", []) if p in kept])
    return [passages[i] for i in kept]


class _Record:
    """One parsed JSON record and where it came from, for typed access with clear errors."""

    def __init__(self, data: Any, path: Path, label: str) -> None:
        self.path = path
        self.label = label  # "record 3" or "line 4"
        self.where = f"{path}: {label}"
        if not isinstance(data, dict):
            raise WorkbenchError(f"{self.where}: expected a JSON object, got {_type_name(data)}")
        self.data = data

    def get(self, key: str, kind: type | tuple[type, ...], required: bool = True) -> Any:
        if key not in self.data:
            if required:
                raise WorkbenchError(f"{self.where}: missing field {key!r}")
            return None
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or isinstance(value, bool):
            wanted = " or ".join(_TYPE_NAMES.get(k, "null") for k in kinds)
            raise WorkbenchError(f"{self.where}: field {key!r} must be {wanted}, "
                                 f"got {_type_name(value)}")
        return value

    def id(self, key: str) -> str:
        """The record's id (a string, or an integer taken as its decimal string)."""
        value = str(self.get(key, (str, int)))
        if not value.strip():
            raise WorkbenchError(f"{self.where}: field {key!r} is empty")
        self.where += f" (id {value!r})"
        return value

    def strings(self, key: str, required: bool = True, allow_empty: bool = False) -> list[str]:
        values = self.get(key, list, required=required)
        if values is None:
            return []
        if not values and not allow_empty:
            raise WorkbenchError(f"{self.where}: field {key!r} is an empty list")
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise WorkbenchError(f"{self.where}: field {key!r}[{index}] must be a string, "
                                     f"got {_type_name(value)}")
        return values

    def context(self) -> tuple[list[str], list[str], list[dict[int, tuple[int, int]]]]:
        """Titles, passage texts ("title: s1 s2 ...") from [[title, [sentences]], ...], and per
        passage each kept sentence's character span in its text ({sentence index: (start, end)})."""
        titles, passages, spans = [], [], []
        for index, item in enumerate(self.get("context", list)):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], list) and all(isinstance(s, str) for s in item[1])):
                raise WorkbenchError(f"{self.where}: field 'context'[{index}] must be "
                                     f"[title, [sentence, ...]]")
            title, sentences = item
            text, where = title.strip(), {}
            for number, sentence in enumerate(sentences):
                if sentence.strip():
                    text += (": " if text and not where and title.strip() else " " if text else "")
                    where[number] = (len(text), len(text) + len(sentence.strip()))
                    text += sentence.strip()
            titles.append(title)
            passages.append(text)
            spans.append(where)
        return titles, passages, spans

    def supporting_facts(self) -> list[list] | None:
        """[[title, sentence_index], ...], or None when the record has none."""
        facts = self.get("supporting_facts", list, required=False)
        if facts is None:
            return None
        for index, fact in enumerate(facts):
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise WorkbenchError(f"{self.where}: field 'supporting_facts'[{index}] must be "
                                     f"[title, sentence_index]")
        return facts

    def build(self, **fields: Any) -> Example:
        try:
            return Example(**fields)
        except WorkbenchError as exc:
            raise WorkbenchError(f"{self.where}: {exc}") from None


def _read(path: str | Path) -> tuple[Path, str]:
    path = Path(path).expanduser()
    if not path.exists():
        raise WorkbenchError(f"{path}: no such file")
    if not path.is_file():
        raise WorkbenchError(f"{path}: not a file")
    try:
        return path, path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _add_unique(examples: list[Example], seen: dict[str, str], example: Example,
                record: _Record) -> None:
    if example.id in seen:
        raise WorkbenchError(f"{record.path}: duplicate id {example.id!r} "
                             f"({seen[example.id]} and {record.label})")
    seen[example.id] = record.label
    examples.append(example)


def _non_empty(examples: list[Example], path: Path) -> list[Example]:
    if not examples:
        raise WorkbenchError(f"{path}: no records")
    return examples


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)
