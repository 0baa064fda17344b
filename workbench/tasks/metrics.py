"""SQuAD-style answer metrics: normalisation, exact match, token F1; RULER's "all values
present" for a gold that lists several values all of which must be named; and the retrieval
measures, which ask only whether the answer names the evidence, however it ends:

    string_match_all   RULER's niah and variable tracking: the share of the values that occur in
                       the answer (case-folded substrings, RULER's postprocessing), in [0, 1]
    string_match_part  RULER's QA tasks: 1.0 when some value occurs so
    contains           QA data: some accepted answer occurs as whole words (SQuAD-normalised)
    contains_all       QA data whose gold lists values that must all be named: every one does
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

from workbench.errors import WorkbenchError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# How an example's gold scores an answer: "any" accepted answer (the first canonical), or "all"
# of the listed values (RULER's multi-value needles and variable tracking: string_match_all).
SCORINGS = ("any", "all")
# How an example's gold scores retrieval (`retrieved_score`); see the module docstring.
RETRIEVAL_RULES = ("string_match_all", "string_match_part", "contains", "contains_all")
_CONTROL = re.compile(r"[\x00-\x1f]")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(pred: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1_score(pred: str, gold: str) -> float:
    """Token-overlap F1 of the normalised strings (official SQuAD v2 script).

    If either side normalises to no tokens, the score is 1.0 when both do, else 0.0.
    """
    pred_tokens = normalize_answer(pred).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def first_line(text) -> str:
    """The part of an answer the default rule scores: its first line, stripped (`engine.decode.StopRule`)."""
    return str(text).strip().split("\n")[0].strip()


def is_flip(answer: str, dense_answer: str) -> bool:
    """The workbench's flip: the answer differs from the dense answer after normalization.

    Token-exact differences (`flip_strict`) are a separate, stricter reading of the same
    question; they compare generated ids, not text.
    """
    return normalize_answer(answer) != normalize_answer(dense_answer)


def _named(pred: str, golds: Iterable[str]) -> list[bool]:
    """Per gold: does it, normalized, occur in the normalized prediction as whole words."""
    text = f" {normalize_answer(pred)} "
    return [bool(normalize_answer(g)) and f" {normalize_answer(g)} " in text for g in golds]


def contains_answer(pred: str, golds: Iterable[str]) -> float:
    """1.0 when some accepted answer, normalized, occurs in the normalized prediction as whole
    words (small models answer in sentences: "The city of Tressamor." contains "Tressamor";
    "in New York City." contains "New York"; "1950" does not contain "5")."""
    return float(any(_named(pred, golds)))


def all_present(pred: str, golds: Iterable[str]) -> float:
    """1.0 when every listed value, normalized, occurs in the normalized prediction as whole words
    (RULER's string_match_all, all or nothing); 0.0 when there are no values."""
    named = _named(pred, golds)
    return float(bool(named) and all(named))


def best_em_f1(pred: str, golds: Iterable[str]) -> tuple[float, float]:
    """Best exact match and best F1 over accepted answers; (0.0, 0.0) when there are none."""
    golds = list(golds)
    if not golds:
        return 0.0, 0.0
    return max(exact_match(pred, g) for g in golds), max(f1_score(pred, g) for g in golds)


def score_answer(pred: str, golds: Iterable[str], scoring: str = "any") -> tuple[float, float, float]:
    """(em, f1, contains) of an answer against an example's gold, as its `scoring` reads it.

    "any": best exact match and F1 over accepted answers, contains some answer. "all": em is 1.0
    when every value is named (in any order, with any words around them), f1 the token F1 against
    the values joined by spaces, contains 1.0 when some value is named.
    """
    golds = list(golds)
    if scoring == "all":
        f1 = f1_score(pred, " ".join(golds)) if golds else 0.0
        return all_present(pred, golds), f1, contains_answer(pred, golds)
    if scoring != "any":
        raise WorkbenchError(f"unknown scoring {scoring!r}; use one of {', '.join(SCORINGS)}")
    return (*best_em_f1(pred, golds), contains_answer(pred, golds))


def ruler_postprocess(pred: str) -> str:
    """RULER's `postprocess_pred`: strip, control characters to newlines, strip again."""
    return _CONTROL.sub("\n", pred.strip()).strip()


def string_match_all(pred: str, refs: Iterable[str]) -> float:
    """RULER's string_match_all for one answer: the share of `refs` that occur, case-folded, as
    substrings of the answer (0.0 when there are none)."""
    refs, pred = list(refs), ruler_postprocess(pred).lower()
    return sum(r.lower() in pred for r in refs) / len(refs) if refs else 0.0


def string_match_part(pred: str, refs: Iterable[str]) -> float:
    """RULER's string_match_part for one answer: 1.0 when some ref occurs, case-folded, in it."""
    pred = ruler_postprocess(pred).lower()
    return float(any(r.lower() in pred for r in refs))


def retrieved_score(pred: str, golds: Iterable[str], rule: str) -> float:
    """The retrieval measure `rule` (`RETRIEVAL_RULES`) of an answer against its gold, in [0, 1]."""
    golds = list(golds)
    if rule == "string_match_all":
        return string_match_all(pred, golds)
    if rule == "string_match_part":
        return string_match_part(pred, golds)
    if rule == "contains":
        return contains_answer(pred, golds)
    if rule == "contains_all":
        return all_present(pred, golds)
    raise WorkbenchError(f"unknown retrieval rule {rule!r}; use one of {', '.join(RETRIEVAL_RULES)}")
