"""RULER-style long-context tasks (Hsieh et al., 2024), generated here with the model's tokenizer.

    niah_single        one needle "One of the special magic numbers for {key} is: {value}."
    niah_multikey      the queried needle among 3 needles of other keys (RULER's niah_multikey_1)
    niah_multivalue    4 needles of one key; the answer must name all 4 values (scoring "all")
    variable_tracking  a chain "VAR A = 12345.", "VAR B = VAR A.", ... (4 hops); the answer must
                       name the 5 variables that hold the value (scoring "all")

The haystack is RULER's repeated noise ("The grass is green. The sky is blue. ..."), each
passage starting at a seeded sentence of it, cut into `passages` segments of about equal length
in the model's tokens (`target_tokens` in all, each passage counted on its own as the layout
tokenizes it; short of the target by less than a sentence per passage). Every needle and chain
link sits in a passage of its own, so answering needs attention across passages. The needles
sit in evenly spaced passages, the first (the queried needle, the first value) at `needle_depth`
of the haystack (by default example i at depth (i mod 11) / 10), wrapping past the end; a
chain's links fill the same passages in chain order, as RULER writes them. RULER's instruction is the system
prompt (the prefix every sender shares), its question the question and its answer prefix the
assistant turn's lead-in. Example i depends on (task, data_seed, i) and the options alone.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.tasks.example import Example, check_data_seed

TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "variable_tracking")
OPTIONS = ("target_tokens", "passages", "needle_depth", "data_seed")
DEFAULT_TARGET_TOKENS = 1024
DEFAULT_PASSAGES = 5
MAX_TARGET_TOKENS = 1_000_000  # more than any model the workbench runs holds
N_DEPTHS = 11  # default depths 0, 0.1, ..., 1 over the examples
NEEDLES = {"niah_single": 1, "niah_multikey": 4, "niah_multivalue": 4, "variable_tracking": 5}
_WHAT = {"niah_single": "needle", "niah_multikey": "needles", "niah_multivalue": "needles",
         "variable_tracking": "chain links"}
NOISE = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
NEEDLE = "One of the special magic numbers for {key} is: {value}."

_ADJECTIVES = ("abundant", "bitter", "brave", "calm", "crooked", "curious", "dusty", "eager", "faint", "fierce",
               "gentle", "gloomy", "hollow", "humble", "icy", "jolly", "lively", "loud", "mellow", "narrow",
               "noisy", "pale", "proud", "quiet", "rapid", "rusty", "shiny", "silent", "steep", "tidy")
_NOUNS = ("anchor", "badger", "basket", "beacon", "canyon", "cellar", "compass", "feather", "fountain", "garden",
          "harbor", "helmet", "island", "kettle", "ladder", "lantern", "meadow", "mirror", "orchard", "pebble",
          "pillow", "puzzle", "quarry", "saddle", "shovel", "spider", "thimble", "tunnel", "violin", "wagon")


@dataclass(frozen=True)
class _Draft:
    """An example before the haystack: needles in placement order, the texts around them, gold."""

    needles: tuple[str, ...]
    system: str
    question: str
    lead: str
    gold: tuple[str, ...]
    scoring: str
    chain: bool  # links written in chain order
    evidence: int  # the first `evidence` needles are the ones the question asks about


def _key(rng: random.Random) -> str:
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"


def _distinct(make: Callable[[], str], count: int) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        value = make()
        if value not in out:
            out.append(value)
    return out


def _niah(rng: random.Random, keys: int, values: int) -> _Draft:
    """The queried key's needles first (its values in seeded order), then one needle per other key."""
    names = _distinct(lambda: _key(rng), keys)
    numbers = _distinct(lambda: str(rng.randint(1_000_000, 9_999_999)), values + keys - 1)
    asked, others = numbers[:values], numbers[values:]
    needles = [NEEDLE.format(key=names[0], value=v) for v in asked]
    needles += [NEEDLE.format(key=k, value=v) for k, v in zip(names[1:], others)]
    key = names[0]
    if values == 1:
        return _Draft(tuple(needles), "A special magic number is hidden within the following text. Make sure to "
                      "memorize it. I will quiz you about the number afterwards.",
                      f"What is the special magic number for {key} mentioned in the provided text?",
                      f"The special magic number for {key} mentioned in the provided text is", (asked[0],), "any",
                      chain=False, evidence=1)
    return _Draft(tuple(needles), "Some special magic numbers are hidden within the following text. Make sure to "
                  "memorize it. I will quiz you about the numbers afterwards.",
                  f"What are all the special magic numbers for {key} mentioned in the provided text?",
                  f"The special magic numbers for {key} mentioned in the provided text are", tuple(asked), "all",
                  chain=False, evidence=values)


def _variable_tracking(rng: random.Random, hops: int = 4) -> _Draft:
    names = _distinct(lambda: "".join(rng.choices(string.ascii_uppercase, k=5)), hops + 1)
    value = str(rng.randint(10_000, 99_999))
    links = [f"VAR {names[0]} = {value}."] + [f"VAR {names[j + 1]} = VAR {names[j]}." for j in range(hops)]
    return _Draft(tuple(links), "Memorize and track the chain(s) of variable assignment hidden in the following text.",
                  f"Find all variables that are assigned the value {value} in the text above.",
                  f"According to the chain(s) of variable assignment in the text above, {hops + 1} variables are "
                  f"assigned the value {value}, they are:", tuple(names), "all", chain=True,
                  evidence=len(links))


_BUILDERS: dict[str, Callable[[random.Random], _Draft]] = {
    "niah_single": lambda rng: _niah(rng, 1, 1),
    "niah_multikey": lambda rng: _niah(rng, 4, 1),
    "niah_multivalue": lambda rng: _niah(rng, 1, 4),
    "variable_tracking": _variable_tracking,
}


def check_task(task: str, spec: str) -> str:
    """`task` when it is a RULER task; else a one-line error naming the spec."""
    if not task:
        raise WorkbenchError(f"data set spec {spec!r} needs a task, as in 'ruler:niah_single'; tasks: "
                             f"{', '.join(TASKS)}")
    if task not in TASKS:
        raise WorkbenchError(f"unknown RULER task {task!r} in spec {spec!r}; valid tasks: {', '.join(TASKS)} "
                             f"(as in 'ruler:niah_single')")
    return task


def check_options(task: str, target_tokens=DEFAULT_TARGET_TOKENS, passages=DEFAULT_PASSAGES, needle_depth=None,
                  data_seed=0) -> None:
    """Raise a one-line error for an option no example of `task` can take (before any tokenizer)."""
    def is_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not (is_int(target_tokens) and 1 <= target_tokens <= MAX_TARGET_TOKENS):
        raise WorkbenchError(f"target_tokens must be an integer from 1 to {MAX_TARGET_TOKENS:,} (the context in the "
                             f"model's tokens), got {target_tokens!r}")
    if not (is_int(passages) and passages >= 1):
        raise WorkbenchError(f"passages must be an integer >= 1 for ruler data (the cached segments the haystack is "
                             f"cut into), got {passages!r}")
    if passages < NEEDLES[task]:
        raise WorkbenchError(f"ruler:{task} puts each of its {NEEDLES[task]} {_WHAT[task]} in a passage of its own: "
                             f"passages must be at least {NEEDLES[task]}, got {passages}")
    if needle_depth is not None and not (isinstance(needle_depth, (int, float)) and not isinstance(needle_depth, bool)
                                         and 0 <= needle_depth <= 1):
        raise WorkbenchError(f"needle_depth must be a number from 0 to 1 (0: the start of the haystack, 1: its end), "
                             f"got {needle_depth!r}")
    check_data_seed(data_seed)


def ruler_examples(n: int, task: str, tokenizer, *, max_positions: int | None = None, **options) -> list[Example]:
    """Examples "0".."n-1" of `task` (options: `OPTIONS`), laid out in `tokenizer`'s tokens."""
    check_options(task, **options)
    return [ruler_example(i, task, tokenizer, max_positions=max_positions, **options) for i in range(n)]


def ruler_example(index: int, task: str, tokenizer, *, target_tokens: int = DEFAULT_TARGET_TOKENS,
                  passages: int = DEFAULT_PASSAGES, needle_depth: float | None = None, data_seed: int = 0,
                  max_positions: int | None = None) -> Example:
    """Example `index` of `task`: the same as `ruler_examples(n, task, ...)[index]`. A target the
    model cannot hold with the instruction, question and lead-in is refused before any filling."""
    check_options(task, target_tokens, passages, needle_depth, data_seed)
    if tokenizer is None:
        raise WorkbenchError("ruler data is cut to target_tokens of the model's tokens: it needs the model's tokenizer")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise WorkbenchError(f"ruler example index must be an integer >= 0, got {index!r}")
    rng = random.Random(f"workbench-ruler:{task}:{data_seed}:{index}")
    draft = _BUILDERS[task](rng)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    around = count(draft.system) + count(draft.question) + count(draft.lead)
    if max_positions is not None and target_tokens + around > max_positions:
        raise WorkbenchError(f"target_tokens {target_tokens} cannot fit the model's context of {max_positions} tokens "
                             f"with ruler:{task}'s instruction, question and lead-in ({around} tokens); ask for at "
                             f"most {max_positions - around}")
    depth = float(needle_depth) if needle_depth is not None else (index % N_DEPTHS) / (N_DEPTHS - 1)
    slots, fraction = _slots(depth, len(draft.needles), passages)
    order = sorted(slots) if draft.chain else slots
    needle_at = dict(zip(order, draft.needles))
    texts = [_fill(count, target_tokens // passages + (p < target_tokens % passages), rng.randrange(len(NOISE)),
                   needle_at.get(p), fraction, target_tokens) for p in range(passages)]
    evidence = []
    for passage, needle in needle_at.items():
        if needle in draft.needles[:draft.evidence]:
            start = texts[passage].index(needle)
            evidence.append([passage, start, start + len(needle)])
    meta = {"source": "ruler", "task": task, "data_seed": data_seed, "target_tokens": target_tokens,
            "n_tokens": sum(count(t) for t in texts), "needle_depth": depth, "needle_passages": list(order),
            "scoring": draft.scoring, "answer_lead": draft.lead, "evidence": sorted(evidence)}
    return Example(str(index), tuple(texts), draft.question, draft.gold, system=draft.system, meta=meta)


def _slots(depth: float, needles: int, passages: int) -> tuple[list[int], float]:
    """The passage of each needle (evenly spaced, the first at `depth`, wrapping past the end) and
    where in its passage a needle sits (a fraction of its sentences)."""
    first = min(passages - 1, int(depth * passages))
    fraction = min(1.0, depth * passages - first)
    # floor(j * passages / needles + 1/2): distinct for passages >= needles
    return [(first + (2 * j * passages + needles) // (2 * needles)) % passages for j in range(needles)], fraction


def _passage(offset: int, k: int, needle: str | None, fraction: float) -> str:
    sentences = [NOISE[(offset + t) % len(NOISE)] for t in range(k)]
    if needle is not None:
        sentences.insert(int(fraction * k + 0.5), needle)
    return " ".join(sentences)


def _fill(count: Callable[[str], int], share: int, offset: int, needle: str | None, fraction: float,
          target: int) -> str:
    """The passage with the most noise sentences that keeps it within `share` tokens."""
    low = 0 if needle is not None else 1
    if count(_passage(offset, low, needle, fraction)) > share:
        raise WorkbenchError(f"target_tokens {target} is too short for its passages: a passage of about {share} "
                             f"tokens cannot hold {'its needle' if needle else 'one noise sentence'}; ask for more "
                             f"tokens or fewer passages")
    high = low + 1
    while count(_passage(offset, high, needle, fraction)) <= share:
        low, high = high, high * 2
    while high - low > 1:  # count(low) fits, count(high) does not
        mid = (low + high) // 2
        low, high = (mid, high) if count(_passage(offset, mid, needle, fraction)) <= share else (low, mid)
    return _passage(offset, low, needle, fraction)
