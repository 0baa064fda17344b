"""Data-set spec strings: ``synthetic[:SEED]``, ``ruler:TASK``, ``hotpotqa:PATH``, ``2wiki:PATH``,
``jsonl:PATH``, ``musique:PATH``, each optionally ending in ``#ID`` to pick one example.

An id may hold ``#`` itself: a file spec is split at the last ``#`` whose left part names an
existing file (``jsonl:F#q#1`` is example ``q#1`` of ``F`` when ``F`` exists and ``F#q`` does
not), else the whole spec is a file when it names one, else it is split at the last ``#``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.tasks.example import Example
from workbench.tasks import musique, ruler
from workbench.tasks.loaders import HOTPOTQA_OPTIONS, load_2wiki, load_hotpotqa, load_jsonl
from workbench.tasks.synthetic import synthetic_example, synthetic_examples

DATASET_KINDS = ("synthetic", "hotpotqa", "2wiki", "jsonl", "musique", "ruler")
GENERATED = ("synthetic", "ruler")  # made here, not read from a file
DEFAULT_SYNTHETIC_N = 100  # examples a generated data set gives when no n is asked
SYNTHETIC_OPTIONS = ("types", "distractors", "filler_sentences", "target_words")
OPTIONS = {"synthetic": SYNTHETIC_OPTIONS, "ruler": ruler.OPTIONS, "hotpotqa": HOTPOTQA_OPTIONS,
           "musique": musique.OPTIONS}  # what each kind takes
_FILE_LOADERS: dict[str, Callable[..., list[Example]]] = {
    "hotpotqa": load_hotpotqa, "2wiki": load_2wiki, "jsonl": load_jsonl,
}
_EXAMPLE_SPECS = ("'synthetic', 'synthetic:SEED', 'ruler:TASK', 'hotpotqa:PATH', '2wiki:PATH', 'jsonl:PATH', "
                  "'musique:PATH'")


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed spec: ``arg`` is the seed (int, or None for the default 0), the RULER task or the
    file path."""

    kind: str
    arg: int | str | Path | None = None
    example_id: str | None = None

    @property
    def seed(self) -> int:
        """The synthetic seed (0 when the spec gives none)."""
        return self.arg if isinstance(self.arg, int) else 0

    def __str__(self) -> str:
        text = self.kind if self.arg is None else f"{self.kind}:{self.arg}"
        return text if self.example_id is None else f"{text}#{self.example_id}"


def _split_id(text: str) -> tuple[str, str | None]:
    """(spec, example id or None): see the module docstring for where an id containing '#' is cut."""
    kind, colon, rest = text.partition(":")
    if colon and kind not in GENERATED:
        cuts = [i for i, ch in enumerate(rest) if ch == "#"]
        for i in reversed(cuts):
            if rest[:i].strip() and Path(rest[:i]).expanduser().is_file():
                return f"{kind}:{rest[:i]}", rest[i + 1:]
        if Path(rest).expanduser().is_file():
            return text, None
    body, _, example_id = text.rpartition("#")
    return body, example_id


def parse_dataset_spec(spec: str | DatasetSpec) -> DatasetSpec:
    """Parse a spec string; ``#ID`` is split off at the last '#' that leaves an existing file (see
    the module docstring). Files are not opened here."""
    if isinstance(spec, DatasetSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise WorkbenchError(f"data set spec must be a non-empty string such as {_EXAMPLE_SPECS}; "
                             f"got {spec!r}")
    body, example_id = spec.strip(), None
    if "#" in body:
        body, example_id = _split_id(body)
        if example_id is not None and not example_id.strip():
            raise WorkbenchError(f"data set spec {spec!r} has an empty example id after '#'")
    kind, colon, arg = body.partition(":")
    if kind not in DATASET_KINDS:
        raise WorkbenchError(f"unknown data set kind {kind!r} in spec {spec!r}; valid kinds: "
                             f"{', '.join(DATASET_KINDS)} (as in {_EXAMPLE_SPECS})")
    if kind == "synthetic":
        if not colon:
            return DatasetSpec(kind, None, example_id)
        if not re.fullmatch(r"\d+", arg):
            raise WorkbenchError(f"bad seed {arg!r} in spec {spec!r}: the seed must be an "
                                 f"integer >= 0, as in 'synthetic:0'")
        return DatasetSpec(kind, int(arg), example_id)
    if kind == "ruler":
        if not arg.strip():
            raise WorkbenchError(f"data set spec {spec!r} needs a task, as in 'ruler:niah_single'; tasks: "
                                 f"{', '.join(ruler.TASKS)}")
        return DatasetSpec(kind, ruler.check_task(arg.strip(), spec), example_id)
    if not arg.strip():
        raise WorkbenchError(f"data set spec {spec!r} needs a path, as in '{kind}:PATH'")
    return DatasetSpec(kind, Path(arg).expanduser(), example_id)


def load_dataset(spec: str | DatasetSpec, n: int | None = None, *, tokenizer=None,
                 max_positions: int | None = None, **options: Any) -> list[Example]:
    """Examples of a spec: synthetic and ruler generate ``n`` (default 100); files give their
    first ``n`` (default all). A spec with ``#ID`` gives that one example, whatever ``n`` is.

    ``options`` are the kind's own (`OPTIONS`: synthetic's types, distractors, filler_sentences,
    target_words; ruler's target_tokens, passages, needle_depth, data_seed; hotpotqa's passages,
    data_seed; musique's max_passages, max_passage_tokens, instruction); any other is refused.
    Ruler data and a musique file use the model's `tokenizer` (to measure, to cut passages) and
    `max_positions` to refuse a context longer than the model holds.
    """
    parsed = parse_dataset_spec(spec)
    if parsed.example_id is not None:
        return [load_example(parsed, tokenizer=tokenizer, max_positions=max_positions, **options)]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise WorkbenchError(f"number of examples must be an integer >= 1, got {n!r}")
    _check_options(parsed, options, max_positions)
    if parsed.kind == "synthetic":
        return synthetic_examples(n or DEFAULT_SYNTHETIC_N, parsed.seed, **options)
    if parsed.kind == "ruler":
        return ruler.ruler_examples(n or DEFAULT_SYNTHETIC_N, parsed.arg, tokenizer, max_positions=max_positions,
                                    **options)
    examples = _load_file(parsed, options, tokenizer, max_positions)
    if n is not None and n > len(examples):
        raise WorkbenchError(f"{parsed.arg}: asked for {n} examples but the file has only "
                             f"{len(examples)}")
    return examples if n is None else examples[:n]


def load_example(spec: str | DatasetSpec, *, tokenizer=None, max_positions: int | None = None,
                 **options: Any) -> Example:
    """The one example a ``...#ID`` spec names; ``synthetic#3`` is example "3" of seed 0,
    ``ruler:niah_single#3`` example "3" of that task (with the model's `tokenizer`)."""
    parsed = parse_dataset_spec(spec)
    example_id = parsed.example_id
    if example_id is None:
        raise WorkbenchError(f"data set spec {str(parsed)!r} names no example: add '#ID', "
                             f"as in 'synthetic#3' or 'jsonl:data.jsonl#q17'")
    _check_options(parsed, options, max_positions)
    if parsed.kind in GENERATED:
        if not re.fullmatch(r"0|[1-9]\d*", example_id):
            raise WorkbenchError(f"unknown {parsed.kind} example id {example_id!r}: {parsed.kind} ids "
                                 f"are '0', '1', '2', ...")
        if parsed.kind == "ruler":
            return ruler.ruler_example(int(example_id), parsed.arg, tokenizer, max_positions=max_positions,
                                       **options)
        return synthetic_example(int(example_id), parsed.seed, **options)
    examples = _load_file(parsed, options, tokenizer, max_positions)
    for example in examples:
        if example.id == example_id:
            return example
    shown = ", ".join(repr(e.id) for e in examples[:5])
    more = ", ..." if len(examples) > 5 else ""
    raise WorkbenchError(f"{parsed.arg}: no example with id {example_id!r}; its "
                         f"{len(examples)} ids include {shown}{more}")


def _load_file(parsed: DatasetSpec, options: dict[str, Any], tokenizer, max_positions) -> list[Example]:
    if parsed.kind == "musique":
        return musique.load_musique(parsed.arg, tokenizer=tokenizer, max_positions=max_positions, **options)
    return _FILE_LOADERS[parsed.kind](parsed.arg, **options)


def check_dataset(spec: str | DatasetSpec, n: int | None = None, **options: Any) -> None:
    """What can be checked before a model loads: the spec, the options and the file's records
    (musique passages are cut, and ruler data measured, only with the model's tokenizer)."""
    parsed = parse_dataset_spec(spec)
    if parsed.kind == "ruler":
        _check_options(parsed, options)
        ruler.check_options(parsed.arg, **options)
        return
    cheap = {k: v for k, v in options.items() if k != "max_passage_tokens"}
    load_dataset(parsed, n=n, **cheap)


def _check_options(parsed: DatasetSpec, options: dict[str, Any], max_positions: int | None = None) -> None:
    allowed = OPTIONS.get(parsed.kind, ())
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        valid = ", ".join(allowed) if allowed else "none"
        raise WorkbenchError(f"option(s) {unknown} do not apply to {parsed.kind!r} data; its options: {valid}")
    words = options.get("target_words")
    if max_positions is not None and isinstance(words, int) and words > max_positions:  # before any text is made
        raise WorkbenchError(f"target_words {words} cannot fit the model's context of {max_positions} tokens (every "
                             f"word is at least one token); ask for fewer words")


def dataset_fingerprint(spec: str | DatasetSpec) -> str | None:
    """The SHA-256 of a file data set's content (None for generated data): a run's identity
    includes it, so an edited file is never paired with answers computed for the old one."""
    parsed = parse_dataset_spec(spec)
    if parsed.kind in GENERATED:
        return None
    path = Path(parsed.arg)
    if not path.is_file():
        raise WorkbenchError(f"{path}: no such file")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
