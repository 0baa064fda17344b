"""Seeded multi-passage questions over fictional entities: bridge, comparison, one-hop.

Every name is invented from syllables and every fact is made up, so a model can only
answer from the passages. Example ``i`` of a seed depends on ``(seed, i)`` and the options
alone, never on how many examples are generated; filler only appends sentences, so the
same example with and without filler has the same facts, names and passage order.

Each example's evidence (`Example.evidence`) is the fact sentence of each supporting passage: for
a bridge question the "coached by" sentence and the coach's birth sentence, for a one-hop question
the birth sentence, for a comparison the two compared facts (founding year or height).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.tasks.example import Example

QUESTION_TYPES = ("bridge", "comparison", "onehop")
_TYPE_WEIGHTS = {"bridge": 2, "comparison": 1, "onehop": 1}
_FORWARD_BRIDGE_FIX = 0.8  # chance a shuffled bridge with the answer first is put right
# More words than any model the workbench runs reads (a word is at least one token); generating
# them takes seconds per example, so a larger target is refused from the count alone.
MAX_TARGET_WORDS = 1_000_000

_FIRST_HEADS = ("Va", "Se", "Ori", "Ta", "Ma", "Ke", "Li", "Do", "Ny", "Ha",
                "Bre", "Ca", "Fe", "Jo", "Ri", "Za", "El", "Mi", "Tho", "Ysa")
_FIRST_TAILS = ("rek", "lma", "sin", "nna", "ven", "dric", "lys", "mon", "tte",
                "ric", "nor", "vid", "ssa", "bel", "ndo")
_LAST_HEADS = ("Olu", "Tar", "Ques", "Ambe", "Kor", "Vel", "Dru", "Isen", "Mar",
               "Pell", "Ost", "Yar", "Hen", "Lum", "Brav", "Sor", "Quen", "Ath")
_LAST_TAILS = ("ndi", "row", "sane", "vath", "ding", "mont", "ova", "ek", "ier",
               "quist", "aro", "well", "brandt", "ish", "enko", "ace")
_CITY_HEADS = ("Tres", "Vel", "Quor", "Ambr", "Dun", "Hal", "Kest", "Lor", "Mir",
               "Nal", "Ost", "Pry", "Sar", "Thal", "Ulv", "Wyn", "Zer", "Brae", "Cor", "Fen")
_CITY_LINKS = ("sa", "a", "i", "o", "e", "")
_CITY_TAILS = ("mor", "vane", "dell", "holt", "wick", "reach", "mere", "gard",
               "stead", "crest", "brook", "moor", "haven", "spire")
_ORG_HEADS = ("Quil", "Bras", "Dor", "Hesk", "Lam", "Mor", "Pav", "Rund", "Stav",
              "Tol", "Vash", "Orm", "Kel", "Gan")
_ORG_TAILS = ("lon", "ket", "avel", "ingo", "ara", "eth", "ulin", "osk", "endra")
_ORG_KINDS = {  # name suffix -> description
    "Rovers": "a football club",
    "Athletic": "a rowing club",
    "Ironworks": "a metal workshop",
    "Press": "a small publishing house",
    "Trading Company": "a merchant firm",
    "Mills": "a textile company",
}

_ATHLETE_ROLES = ("a hockey player", "a tennis player", "a fencer", "a rower",
                  "a long-distance runner", "a chess player", "a swimmer")
_ATHLETE_NOTES = ("who turned professional at a young age",
                  "known for a calm and patient style",
                  "who has competed in several regional tournaments",
                  "who trains on most days of the week")
_PAIR_NOTES = ("The two have worked together for several seasons.",
               "Their training sessions usually start early in the morning.",
               "They first met at a junior competition.")
_COACH_NOTES = ("later became a coach after a short playing career",
                "has trained young athletes for many years",
                "studied sports science before turning to coaching",
                "is known for careful and methodical coaching")
_PROFESSIONS = ("a librarian", "a carpenter", "an engineer", "a painter", "a nurse",
                "a translator", "a baker", "a surveyor")
_BIRTH_NOTES = ("{p} moved away from {c} as a teenager.",
                "{p} still returns to {c} from time to time.",
                "Friends describe {p} as quiet and thoughtful.")
_PERSON_NOTES = ("Friends describe {p} as quiet and thoughtful.", "{p} rarely speaks to the press.",
                 "{p} grew up in a large family.")
_ORG_NOTES = ("{p} has changed owners several times since then.",
              "{p} still operates from its first building.",
              "{p} is run by a small group of members.")
_FILLER = (
    "{p} is mentioned in a number of regional newsletters.",
    "Little else about {p} appears in the public record.",
    "Several short profiles of {p} have been written over the years.",
    "Records about {p} are kept in a small local archive.",
    "{p} has been described as steady and reliable.",
    "Accounts of {p} differ only in minor details.",
    "{p} is occasionally discussed at community meetings.",
    "A brief entry on {p} appears in a regional directory.",
    "Most descriptions of {p} are short and factual.",
    "{p} has not been the subject of any major dispute.",
    "Photographs related to {p} are rare.",
    "People familiar with {p} recall nothing out of the ordinary.",
    "Visitors sometimes ask about {p}.",
    "Nothing unusual has been reported about {p}.",
)


@dataclass
class _Passage:
    """A passage being built: whom it is about, and its sentences so far."""

    subject: str
    sentences: list[str]
    fact: int = 0  # which sentence states the passage's fact
    fillers: set[str] = field(default_factory=set)

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    @property
    def fact_span(self) -> tuple[int, int]:
        """The fact sentence's character span in `text`."""
        start = sum(len(s) + 1 for s in self.sentences[:self.fact])
        return start, start + len(self.sentences[self.fact])


@dataclass
class _Draft:
    """An example before ordering: fact passages, distractors, question, answer, meta."""

    facts: list[_Passage]
    distractors: list[_Passage]
    question: str
    answer: str
    answer_fact: int
    meta: dict


class _Names:
    """Invented names for one example, no two sharing a word or containing each other."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: list[str] = []

    def person(self) -> str:
        return self._fresh(lambda: f"{self._join(_FIRST_HEADS, _FIRST_TAILS)} "
                                   f"{self._join(_LAST_HEADS, _LAST_TAILS)}")

    def city(self) -> str:
        return self._fresh(lambda: self._join(_CITY_HEADS, _CITY_LINKS, _CITY_TAILS))

    def org(self) -> tuple[str, str]:
        """A name such as "Quillon Press" and its description ("a small publishing house")."""
        name = self._fresh(lambda: f"{self._join(_ORG_HEADS, _ORG_TAILS)} "
                                   f"{self._rng.choice(list(_ORG_KINDS))}")
        return name, _ORG_KINDS[name.split(" ", 1)[1]]

    def _join(self, *parts: tuple[str, ...]) -> str:
        return "".join(self._rng.choice(options) for options in parts)

    def _fresh(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if not any(_clash(name, used) for used in self._used):
                self._used.append(name)
                return name


def _clash(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return a in b or b in a or bool(set(a.split()) & set(b.split()))


def _birth(rng: random.Random, person: str, city: str, coach: bool) -> _Passage:
    note = rng.choice(_COACH_NOTES) if coach else f"works as {rng.choice(_PROFESSIONS)}"
    sentences = [f"{person} was born in the city of {city}.", f"{person} {note}."]
    if rng.random() < 0.5:
        sentences.append(rng.choice(_BIRTH_NOTES).format(p=person, c=city))
    return _Passage(person, sentences)


def _coached(rng: random.Random, athlete: str, coach: str) -> _Passage:
    sentences = [f"{athlete} is {rng.choice(_ATHLETE_ROLES)} {rng.choice(_ATHLETE_NOTES)}.",
                 f"{athlete} is coached by {coach}."]
    if rng.random() < 0.5:
        sentences.append(rng.choice(_PAIR_NOTES))
    return _Passage(athlete, sentences, fact=1)


def _founded(rng: random.Random, org: str, description: str, year: int) -> _Passage:
    sentences = [f"{org} is {description}.", f"{org} was founded in {year}.",
                 rng.choice(_ORG_NOTES).format(p=org)]
    return _Passage(org, sentences, fact=1)


def _tall(rng: random.Random, person: str, height: int) -> _Passage:
    sentences = [f"{person} is {rng.choice(_ATHLETE_ROLES)}.",
                 f"{person} is {height} centimetres tall.",
                 rng.choice(_PERSON_NOTES).format(p=person)]
    return _Passage(person, sentences, fact=1)


def _person_distractor(rng: random.Random, names: _Names, coach: bool) -> _Passage:
    """Either "A is coached by B." or "B was born in the city of C." about new people."""
    if rng.random() < 0.5:
        return _coached(rng, names.person(), names.person())
    return _birth(rng, names.person(), names.city(), coach)


def _spread(rng: random.Random, count: int, low: int, high: int, gap: int) -> list[int]:
    """``count`` distinct integers in [low, high], pairwise at least ``gap`` apart."""
    values: list[int] = []
    while len(values) < count:
        value = rng.randint(low, high)
        if all(abs(value - other) >= gap for other in values):
            values.append(value)
    return values


def _bridge(rng: random.Random, names: _Names, n_distractors: int) -> _Draft:
    athlete, coach, city = names.person(), names.person(), names.city()
    facts = [_coached(rng, athlete, coach), _birth(rng, coach, city, coach=True)]
    return _Draft(
        facts=facts,
        distractors=[_person_distractor(rng, names, coach=True) for _ in range(n_distractors)],
        question=f"In which city was the coach of {athlete} born?",
        answer=city,
        answer_fact=1,
        meta={"type": "bridge", "subject": athlete, "bridge_entity": coach,
              "answer_lead": f"The coach of {athlete} was born in the city of"},
    )


def _onehop(rng: random.Random, names: _Names, n_distractors: int) -> _Draft:
    person, city = names.person(), names.city()
    return _Draft(
        facts=[_birth(rng, person, city, coach=False)],
        distractors=[_person_distractor(rng, names, coach=False) for _ in range(n_distractors)],
        question=f"In which city was {person} born?",
        answer=city,
        answer_fact=0,
        meta={"type": "onehop", "subject": person,
              "answer_lead": f"{person} was born in the city of"},
    )


def _comparison(rng: random.Random, names: _Names, n_distractors: int) -> _Draft:
    count = 2 + n_distractors
    if rng.random() < 0.5:
        attribute, question = "founded", "Which was founded earlier, {} or {}?"
        values = _spread(rng, count, 1820, 1995, gap=3)
        orgs = [names.org() for _ in range(count)]
        entities = [name for name, _ in orgs]
        passages = [_founded(rng, name, desc, year) for (name, desc), year in zip(orgs, values)]
        winner = 0 if values[0] < values[1] else 1
    else:
        attribute, question = "height", "Who is taller, {} or {}?"
        values = _spread(rng, count, 150, 205, gap=3)
        entities = [names.person() for _ in range(count)]
        passages = [_tall(rng, person, height) for person, height in zip(entities, values)]
        winner = 0 if values[0] > values[1] else 1
    return _Draft(
        facts=passages[:2],
        distractors=passages[2:],
        question=question.format(entities[0], entities[1]),
        answer=entities[winner],
        answer_fact=winner,
        meta={"type": "comparison", "attribute": attribute,
              "entities": entities[:2], "values": values[:2],
              "answer_lead": "The one founded earlier is" if attribute == "founded" else "The taller one is"},
    )


_BUILDERS = {"bridge": _bridge, "comparison": _comparison, "onehop": _onehop}


def _add_filler(rng: random.Random, passages: list[_Passage], per_passage: int,
                target_words: int | None) -> None:
    """Append bland sentences: ``per_passage`` to each, then round-robin up to the target."""

    def add(passage: _Passage) -> int:
        fresh = [t for t in _FILLER if t not in passage.fillers] or list(_FILLER)
        template = rng.choice(fresh)
        passage.fillers.add(template)
        sentence = template.format(p=passage.subject)
        passage.sentences.append(sentence)
        return len(sentence.split())

    for passage in passages:
        for _ in range(per_passage):
            add(passage)
    if target_words is not None:
        total = sum(len(p.text.split()) for p in passages)
        turn = 0
        while total < target_words:
            total += add(passages[turn % len(passages)])
            turn += 1


def synthetic_example(index: int, seed: int = 0, *, types: Iterable[str] = QUESTION_TYPES,
                      distractors: int | None = None, filler_sentences: int = 0,
                      target_words: int | None = None) -> Example:
    """Example ``index`` of ``seed``: the same as ``synthetic_examples(n, seed)[index]``."""
    types = _check_options(seed, types, distractors, filler_sentences, target_words)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise WorkbenchError(f"synthetic example index must be an integer >= 0, got {index!r}")
    rng = random.Random(f"workbench-synthetic:{seed}:{index}")
    filler_rng = random.Random(f"workbench-synthetic:{seed}:{index}:filler")
    kind = rng.choices(types, weights=[_TYPE_WEIGHTS[t] for t in types])[0]
    n_facts = 1 if kind == "onehop" else 2
    n_distractors = rng.choice((3, 4)) - n_facts if distractors is None else distractors
    draft = _BUILDERS[kind](rng, _Names(rng), n_distractors)

    passages = draft.facts + draft.distractors
    order = list(range(len(passages)))
    rng.shuffle(order)
    if kind == "bridge" and order.index(0) > order.index(1) and rng.random() < _FORWARD_BRIDGE_FIX:
        first, second = order.index(0), order.index(1)
        order[first], order[second] = order[second], order[first]
    position = {original: new for new, original in enumerate(order)}
    _add_filler(filler_rng, [passages[i] for i in order], filler_sentences, target_words)
    meta = {
        **draft.meta,
        "seed": seed,
        "support_passages": [position[i] for i in range(n_facts)],
        "answer_passage": position[draft.answer_fact],
        "distractor_passages": sorted(position[i] for i in range(n_facts, len(passages))),
        "evidence": sorted([position[i], *passages[i].fact_span] for i in range(n_facts)),
    }
    return Example(
        id=str(index),
        passages=tuple(passages[i].text for i in order),
        question=draft.question,
        gold=(draft.answer,),
        meta=meta,
    )


def synthetic_examples(n: int, seed: int = 0, *, types: Iterable[str] = QUESTION_TYPES,
                       distractors: int | None = None, filler_sentences: int = 0,
                       target_words: int | None = None) -> list[Example]:
    """``n`` examples with ids "0".."n-1"; by default about 50% bridge, 25% each other type.

    ``distractors`` is the number of distractor passages per example (default: enough for
    3 or 4 passages in all, chosen at random). ``filler_sentences`` bland sentences are
    appended to every passage, then more round-robin until the passages total
    ``target_words`` words; filler never changes the facts, names or passage order.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise WorkbenchError(f"number of synthetic examples must be an integer >= 0, got {n!r}")
    options = dict(types=types, distractors=distractors, filler_sentences=filler_sentences,
                   target_words=target_words)
    _check_options(seed, **options)
    return [synthetic_example(i, seed, **options) for i in range(n)]


def _check_options(seed: int, types: Iterable[str], distractors: int | None,
                   filler_sentences: int, target_words: int | None) -> tuple[str, ...]:
    """Validate generator options; return the question types, deduplicated, in order."""

    def is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not is_int(seed):
        raise WorkbenchError(f"synthetic seed must be an integer, got {seed!r}")
    if isinstance(types, str):
        types = (types,)
    types = tuple(dict.fromkeys(types))
    unknown = [t for t in types if t not in QUESTION_TYPES]
    if not types or unknown:
        raise WorkbenchError(f"synthetic question types must be a non-empty subset of "
                             f"{QUESTION_TYPES}, got {types!r}")
    if distractors is not None and not (is_int(distractors) and distractors >= 0):
        raise WorkbenchError(f"distractors must be None or an integer >= 0, got {distractors!r}")
    if not (is_int(filler_sentences) and filler_sentences >= 0):
        raise WorkbenchError(f"filler_sentences must be an integer >= 0, got {filler_sentences!r}")
    if target_words is not None and not (is_int(target_words) and 1 <= target_words <= MAX_TARGET_WORDS):
        raise WorkbenchError(f"target_words must be None or an integer from 1 to {MAX_TARGET_WORDS:,} (no model the "
                             f"workbench runs reads more words: each is at least one token), got {target_words!r}")
    return types
