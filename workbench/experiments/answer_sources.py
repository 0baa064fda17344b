"""Where an answer's words come from: the evidence, the prompt, the rest of the passages, or nowhere.

An answer that loses the gold can name another passage's fact, recite the haystack's filler, or say
what no passage holds; `retrieved` and the gap anatomy count the loss, this module says what came
instead. Each word of an answer (lower-cased `\\w+` runs) is traced through the runs of consecutive
answer words around it that occur word for word in the example's texts, taken in this order:

    evidence        the gold evidence spans (`Example.evidence`: RULER's queried needles, HotpotQA's
                    supporting sentences, the synthetic bridge facts)
    prompt          the system text, the question and the answer lead (RULER's "The special magic ... are")
    same_passage    the rest of the passages that hold evidence (HotpotQA's gold paragraphs outside
                    their supporting sentences; RULER's filler beside a needle)
    other_passages  the passages that hold none (HotpotQA's distractor paragraphs; RULER's filler)
    new             none of them (a number that is nowhere, a count, a list's "1.")

The first source above whose run around the word is as long as the longest one, or `CREDIT_WORDS`
words long, takes it (runs of `MAX_RUN` words at most): "new york city" in a supporting sentence
stays the evidence's though a distractor holds "in new york city", while a "the" of a filler sentence
read back goes to the filler. Runs never cross a text's edge (an evidence span's edge included).

Per answer, `sources` records each source's share of its words and `recites_context`: a word credited
to the passages outside the evidence (`same_passage` or `other_passages`) by a run of `RECITE_WORDS`
words or more (the filler read back, a distractor's sentence), the count the 10.12w readings made by
hand for five filler sentences. Where the answer is a passage's prose (HotpotQA), dense's own answers
recite it too: read a cell against dense's. Words the layout adds around the question ("Answer with
a short phrase only.") are not traced, so an answer that repeats them counts them as new.

Only examples that define their evidence are read: without it the passages around the evidence cannot
be told from it, and the tables leave such examples out rather than count their words as anything.
Like `answer_lines`, everything here is a function of the stored texts: a kept record is enough.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.answer_lines import CELL, run_examples
from workbench.runstore.loaders import SweepRun
from workbench.tasks import Example

SOURCES = ("evidence", "prompt", "same_passage", "other_passages", "new")  # in the order that credits them
MAX_RUN = 12  # the longest run of words looked up (longer copies count as this long)
CREDIT_WORDS = 3  # a run this long credits a source earlier in SOURCES' order over a longer run of a later one
RECITE_WORDS = 3  # consecutive words found outside the evidence and the prompt that count as reciting
OUTSIDE = ("same_passage", "other_passages")  # the passages' text outside the evidence
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The lower-cased `\\w+` runs of `text`, in order."""
    return _WORD.findall(str(text).lower())


def _runs(pieces) -> list[set[tuple[str, ...]]]:
    """`found[n]`: every run of n + 1 consecutive words of any piece (n < MAX_RUN)."""
    found = [set() for _ in range(MAX_RUN)]
    for piece in pieces:
        w = words(piece)
        for n in range(1, min(MAX_RUN, len(w)) + 1):
            found[n - 1].update(tuple(w[s:s + n]) for s in range(len(w) - n + 1))
    return found


def _cut(text: str, spans: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    """(inside, outside): the text of the merged character `spans` of `text`, and of the rest."""
    inside, outside, at = [], [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        start = max(start, at)
        outside.append(text[at:start])
        inside.append(text[start:end])
        at = end
    outside.append(text[at:])
    return inside, outside


class SourceTexts:
    """An example's texts grouped by source, ready to trace answers against (one per example)."""

    def __init__(self, example: Example):
        spans = example.evidence
        if spans is None:
            raise WorkbenchError(f"example {example.id!r} defines no evidence: its passages cannot be told from it")
        evidence, same, other = [], [], []
        for index, passage in enumerate(example.passages):
            held = [(s, e) for p, s, e in spans if p == index]
            inside, outside = _cut(passage, held)
            evidence += inside
            (same if held else other).extend(outside)
        prompt = [example.system or "", example.question, str(example.meta.get("answer_lead") or "")]
        self.found = {"evidence": _runs(evidence), "prompt": _runs(prompt), "same_passage": _runs(same),
                      "other_passages": _runs(other)}

    def trace(self, answer: str) -> list[tuple[str, str, int]]:
        """(word, source, run length) for each word of `answer`: the first source whose run around it
        is the longest or `CREDIT_WORDS` long, and that run's length (0 and "new" where no source holds
        the word)."""
        w = words(answer)
        longest = {name: np.zeros(len(w), dtype=int) for name in self.found}  # [word]
        for name, found in self.found.items():
            for start in range(len(w)):
                for n in range(1, min(MAX_RUN, len(w) - start) + 1):
                    if tuple(w[start:start + n]) not in found[n - 1]:
                        break  # a longer run from here would hold this one
                    np.maximum(longest[name][start:start + n], n, out=longest[name][start:start + n])
        out = []
        for i, word in enumerate(w):
            best = max(longest[name][i] for name in self.found)
            enough = min(best, CREDIT_WORDS)
            source = next((name for name in self.found if longest[name][i] >= enough), None) if best else "new"
            out.append((word, source, int(longest[source][i]) if best else 0))
        return out

    def recited(self, answer: str) -> list[str]:
        """The runs of `answer`'s words that recite the passages outside the evidence: each maximal stretch
        of words credited there by runs of `RECITE_WORDS` or more, its words joined by spaces."""
        runs, current = [], []
        for word, source, run in self.trace(answer):
            if source in OUTSIDE and run >= RECITE_WORDS:
                current.append(word)
            elif current:
                runs, current = [*runs, " ".join(current)], []
        return [*runs, " ".join(current)] if current else runs

    def sources(self, answer: str) -> dict:
        """`words`, each source's share of them (NaN for an answer with no words) and `recites_context`."""
        traced = self.trace(answer)
        n = len(traced)
        shares = {name: (sum(s == name for _, s, _ in traced) / n if n else np.nan) for name in SOURCES}
        recites = any(s in OUTSIDE and run >= RECITE_WORDS for _, s, run in traced)
        return {"words": n, **shares, "recites_context": recites}


def recited_text(runs: list[str], shown: int = 2) -> str:
    """'recites the passages: "…", "…"' quoting the first `shown` distinct `runs` (`SourceTexts.recited`);
    '' for none."""
    distinct = list(dict.fromkeys(runs))
    if not distinct:
        return ""
    more = ", …" if len(distinct) > shown else ""
    return "recites the passages: " + ", ".join(f'"{run}"' for run in distinct[:shown]) + more


def answer_sources(run: SweepRun) -> pd.DataFrame:
    """Per answer of the examples that define evidence: the cell (`CELL`; dense and the splice as
    selectors "dense" and "splice", budget NaN), its `answer`, `words`, the share of each of
    `SOURCES` and `recites_context`. `attrs["left_out"]`: the examples read without evidence."""
    examples = run_examples(run)
    texts = {i: SourceTexts(e) for i, e in examples.items() if e.evidence is not None}
    cells = run.outcomes[[*CELL, "answer"]].copy()
    cells["example_id"] = cells["example_id"].astype(str)
    refs = [pd.DataFrame({"example_id": run.examples["example_id"].astype(str), "selector": who, "budget": np.nan,
                          "draw": pd.NA, "answer": run.examples[f"{who}_answer"]}) for who in ("dense", "spliced")]
    table = pd.concat([*refs, cells], ignore_index=True)
    table["selector"] = table["selector"].replace({"spliced": "splice"})
    table = table[table["example_id"].isin(texts)].reset_index(drop=True)
    traced = [texts[i].sources(a if isinstance(a, str) else "") for i, a in zip(table["example_id"], table["answer"])]
    columns = ["words", *SOURCES, "recites_context"]
    out = pd.concat([table, pd.DataFrame(traced, columns=columns, index=table.index)], axis=1)
    out.attrs["left_out"] = len(examples) - len(texts)
    return out


def answer_sources_table(run: SweepRun) -> pd.DataFrame:
    """Per selector and budget (dense and the splice first; a drawn selector's draws pooled): `cells`,
    `answered` (cells whose answer has a word), the mean share of each source over those (so two rows
    can average different examples: an answer that ends at once has no words), and `recites_context`,
    the share of all cells that recite the passages. `attrs["left_out"]` as `answer_sources`."""
    cells = answer_sources(run).assign(answered=lambda t: t["words"] > 0)
    grouped = cells.groupby(["selector", "budget"], dropna=False, sort=False)
    table = grouped.agg(cells=("words", "size"), answered=("answered", "sum"),
                        **{name: (name, "mean") for name in SOURCES},
                        recites_context=("recites_context", "mean")).reset_index()
    table.attrs["left_out"] = cells.attrs["left_out"]
    return table
