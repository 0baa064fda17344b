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
from workbench.registry import Registry
from workbench.tasks.example import Example
from workbench.tasks import musique, ruler
from workbench.tasks.loaders import HOTPOTQA_OPTIONS, load_2wiki, load_hotpotqa, load_jsonl
from workbench.tasks.synthetic import synthetic_example, synthetic_examples

DEFAULT_SYNTHETIC_N = 100  # examples a generated data set gives when no n is asked
SYNTHETIC_OPTIONS = ("types", "distractors", "filler_sentences", "target_words")


@dataclass(frozen=True)
class DatasetKind:
    """A registered data set kind: how its spec's argument is read and how its examples are made.

    ``load(parsed, n, tokenizer=..., max_positions=..., **options)`` gives the examples (a file kind
    gives them all; `load_dataset` keeps the first n); a generated kind also makes one example by
    index (``load_one(index, parsed, ...)``). ``check(parsed, **options)`` is what can be checked
    before a model loads (None: load without the tokenizer's options)."""

    kind: str
    load: Callable[..., list[Example]]
    options: tuple[str, ...] = ()  # the kind's own options, as load_dataset takes them
    arg: str = "PATH"  # what follows "kind:" in a spec, as help shows it ("" when the kind takes nothing)
    generated: bool = False  # made here, not read from a file
    optional_arg: bool = False  # "kind" alone is a spec too
    parse_arg: Callable[[str, str], Any] | None = None  # (text after ':', the whole spec) -> arg; None: a path
    load_one: Callable[..., Example] | None = None
    check: Callable[..., None] | None = None
    description: str = ""

    @property
    def spec(self) -> str:
        """The spec as help writes it: ``synthetic[:SEED]``, ``ruler:TASK``, ``hotpotqa:PATH``."""
        if not self.arg:
            return self.kind
        return f"{self.kind}[:{self.arg}]" if self.optional_arg else f"{self.kind}:{self.arg}"


_DATASETS: Registry[DatasetKind] = Registry("data set kind")


def register_dataset(kind: str, load: Callable[..., list[Example]], **fields: Any) -> DatasetKind:
    """Register a data set kind (fields as `DatasetKind`); the CLI's help, the app's choices and
    `dataset_kinds()` read the registry, so a new kind needs nothing else."""
    if not kind or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", kind):
        raise WorkbenchError(f"data set kinds are lower-case words (letters, digits, '-', '_'), got {kind!r}")
    info = DatasetKind(kind, load, **fields)
    if info.generated and info.load_one is None:
        raise WorkbenchError(f"data set kind {kind!r}: a generated kind needs load_one (one example by index)")
    held, module = _DATASETS.get(kind), getattr(load, "__module__", None)
    held_module = getattr(held.load, "__module__", None) if held is not None else None
    if isinstance(held_module, str) and held_module.startswith("workbench.") and module != held_module:
        raise WorkbenchError(f"plugin module {module!r} may not register the data set kind {kind!r}: it is built in "
                             f"({held_module}); register it under a name of its own")
    return _DATASETS.add(kind, info)


def dataset_kinds() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return _DATASETS.names()


def dataset_kind(kind: str) -> DatasetKind:
    return _DATASETS.get_or_raise(kind)


def dataset_specs_help(quoted: bool = False) -> str:
    """The spec forms, as help writes them: 'synthetic[:SEED], ruler:TASK, hotpotqa:PATH, ...'
    (each in quotes with `quoted`, as an error message writes them)."""
    return ", ".join(f"'{info.spec}'" if quoted else info.spec for info in _DATASETS.values())


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
    if colon and not (kind in _DATASETS and _DATASETS[kind].generated):
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
        raise WorkbenchError(f"data set spec must be a non-empty string such as {dataset_specs_help(quoted=True)}; "
                             f"got {spec!r}")
    body, example_id = spec.strip(), None
    if "#" in body:
        body, example_id = _split_id(body)
        if example_id is not None and not example_id.strip():
            raise WorkbenchError(f"data set spec {spec!r} has an empty example id after '#'")
    kind, colon, arg = body.partition(":")
    if kind not in _DATASETS:
        raise WorkbenchError(f"unknown data set kind {kind!r} in spec {spec!r}; valid kinds: "
                             f"{', '.join(dataset_kinds())} (as in {dataset_specs_help(quoted=True)})")
    info = _DATASETS[kind]
    if not colon and info.optional_arg:
        return DatasetSpec(kind, None, example_id)
    if info.parse_arg is not None:  # it says what an empty or bad argument lacks
        return DatasetSpec(kind, info.parse_arg(arg, spec), example_id)
    if not arg.strip():
        raise WorkbenchError(f"data set spec {spec!r} needs a path, as in '{kind}:PATH'")
    parsed = Path(arg).expanduser()
    return DatasetSpec(kind, parsed, example_id)


def load_dataset(spec: str | DatasetSpec, n: int | None = None, *, tokenizer=None,
                 max_positions: int | None = None, **options: Any) -> list[Example]:
    """Examples of a spec: synthetic and ruler generate ``n`` (default 100); files give their
    first ``n`` (default all). A spec with ``#ID`` gives that one example, whatever ``n`` is.

    ``options`` are the kind's own (`dataset_kind(kind).options`: synthetic's types, distractors, filler_sentences,
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
    info = _DATASETS[parsed.kind]
    if info.generated:
        return info.load(parsed, n or DEFAULT_SYNTHETIC_N, tokenizer=tokenizer, max_positions=max_positions, **options)
    examples = info.load(parsed, n, tokenizer=tokenizer, max_positions=max_positions, **options)
    if n is not None and n > len(examples):
        raise WorkbenchError(f"{parsed.arg}: asked for {n} examples but the file has only "
                             f"{len(examples)}")
    return examples if n is None else examples[:n]


def load_example(spec: str | DatasetSpec, *, tokenizer=None, max_positions: int | None = None,
                 **options: Any) -> Example:
    """The one example a ``...#ID`` spec names; ``synthetic#3`` is example "3" of seed 0,
    ``ruler:niah_single#3`` example "3" of that task (with the model's `tokenizer`)."""
    parsed = check_example_spec(spec)
    example_id = parsed.example_id
    _check_options(parsed, options, max_positions)
    info = _DATASETS[parsed.kind]
    if info.generated:
        return info.load_one(int(example_id), parsed, tokenizer=tokenizer, max_positions=max_positions, **options)
    examples = info.load(parsed, None, tokenizer=tokenizer, max_positions=max_positions, **options)
    for example in examples:
        if example.id == example_id:
            return example
    shown = ", ".join(repr(e.id) for e in examples[:5])
    more = ", ..." if len(examples) > 5 else ""
    raise WorkbenchError(f"{parsed.arg}: no example with id {example_id!r}; its "
                         f"{len(examples)} ids include {shown}{more}")


def check_example_spec(spec: str | DatasetSpec) -> DatasetSpec:
    """A ``...#ID`` spec parsed, checked before a model loads: it names an example, and a generated
    data set's id is a count ('0', '1', ...)."""
    parsed = parse_dataset_spec(spec)
    example_id = parsed.example_id
    if example_id is None:
        raise WorkbenchError(f"data set spec {str(parsed)!r} names no example: add '#ID', "
                             f"as in 'synthetic#3' or 'jsonl:data.jsonl#q17'")
    if _DATASETS[parsed.kind].generated and not re.fullmatch(r"0|[1-9]\d*", example_id):
        raise WorkbenchError(f"unknown {parsed.kind} example id {example_id!r}: {parsed.kind} ids "
                             f"are '0', '1', '2', ...")
    return parsed


def check_dataset(spec: str | DatasetSpec, n: int | None = None, **options: Any) -> None:
    """What can be checked before a model loads: the spec, the options and the file's records
    (musique passages are cut, and ruler data measured, only with the model's tokenizer)."""
    parsed = parse_dataset_spec(spec)
    check = _DATASETS[parsed.kind].check
    if check is not None:
        _check_options(parsed, options)
        check(parsed, **options)
        return
    cheap = {k: v for k, v in options.items() if k != "max_passage_tokens"}
    load_dataset(parsed, n=n, **cheap)


def _check_options(parsed: DatasetSpec, options: dict[str, Any], max_positions: int | None = None) -> None:
    allowed = _DATASETS[parsed.kind].options
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        valid = ", ".join(allowed) if allowed else "none"
        raise WorkbenchError(f"option(s) {unknown} do not apply to {parsed.kind!r} data; its options: {valid}")
    words = options.get("target_words")
    if max_positions is not None and isinstance(words, int) and words > max_positions:  # before any text is made
        raise WorkbenchError(f"target_words {words} cannot fit the model's context of {max_positions} tokens (every "
                             f"word is at least one token); ask for fewer words")


def data_identity(spec: str | DatasetSpec, options: dict[str, Any] | None = None) -> dict:
    """The data part of every resumable run's identity: the spec, its options and the file's
    content digest (None for generated data)."""
    return {"dataset": str(spec), "dataset_options": dict(options or {}), "data_sha256": dataset_fingerprint(spec)}


def dataset_fingerprint(spec: str | DatasetSpec) -> str | None:
    """The SHA-256 of a file data set's content (None for generated data): a run's identity
    includes it, so an edited file is never paired with answers computed for the old one."""
    parsed = parse_dataset_spec(spec)
    if _DATASETS[parsed.kind].generated:
        return None
    path = Path(parsed.arg)
    if not path.is_file():
        raise WorkbenchError(f"{path}: no such file")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The built-in kinds, in the order help lists them.

def _synthetic_seed(arg: str, spec: str) -> int:
    if not re.fullmatch(r"\d+", arg):
        raise WorkbenchError(f"bad seed {arg!r} in spec {spec!r}: the seed must be an integer >= 0, as in 'synthetic:0'")
    return int(arg)


def _ruler_task(arg: str, spec: str) -> str:
    return ruler.check_task(arg.strip(), spec)


def _file(loader: Callable[..., list[Example]]) -> Callable[..., list[Example]]:
    """A file loader that needs no tokenizer, as a kind's `load`."""
    return lambda parsed, n, tokenizer=None, max_positions=None, **options: loader(parsed.arg, **options)


register_dataset(
    "synthetic", lambda parsed, n, tokenizer=None, max_positions=None, **o: synthetic_examples(n, parsed.seed, **o),
    options=SYNTHETIC_OPTIONS, arg="SEED", generated=True, optional_arg=True, parse_arg=_synthetic_seed,
    load_one=lambda i, parsed, tokenizer=None, max_positions=None, **o: synthetic_example(i, parsed.seed, **o),
    description="seeded multi-hop facts in filler passages, made here")
register_dataset(
    "hotpotqa", _file(load_hotpotqa), options=HOTPOTQA_OPTIONS,
    description="HotpotQA, distractor setting (a JSON list of records)")
register_dataset("2wiki", _file(load_2wiki), description="2WikiMultihopQA (HotpotQA's shape, answer aliases)")
register_dataset("jsonl", _file(load_jsonl), description="the workbench's JSONL (id, passages, question, answers)")
register_dataset(
    "musique", lambda parsed, n, **kw: musique.load_musique(parsed.arg, **kw), options=musique.OPTIONS,
    description="MuSiQue (retrieved passages; cut with the model's tokenizer)")
register_dataset(
    "ruler", lambda parsed, n, tokenizer=None, **kw: ruler.ruler_examples(n, parsed.arg, tokenizer, **kw),
    options=ruler.OPTIONS, arg="TASK", generated=True, parse_arg=_ruler_task,
    load_one=lambda i, parsed, tokenizer=None, **kw: ruler.ruler_example(i, parsed.arg, tokenizer, **kw),
    check=lambda parsed, **o: ruler.check_options(parsed.arg, **o),
    description=f"RULER-style synthetic long context ({', '.join(ruler.TASKS)}), made here")
