"""Where an answer's words come from: the evidence, the prompt, the rest of the passages, or nowhere.

An answer that loses the gold can name another passage's fact, recite the haystack's filler, or say
what no passage holds; `retrieved` and the gap anatomy count the loss, this module says what came
instead. Each word of an answer (lower-cased `\\w+` runs) is traced through the runs of consecutive
answer words around it that occur word for word in the example's texts, taken in this order:

    evidence        the gold evidence spans (`Example.evidence`: RULER's queried needles, HotpotQA's
                    supporting sentences, the synthetic bridge facts)
    prompt          the system text, the question and the data's answer lead (RULER's "The special
                    magic ... are"; the layout's default lead and instruction, "Answer:", "Answer with
                    a short phrase only.", are not traced: an answer repeating them counts them new)
    same_passage    the rest of the passages that hold evidence (HotpotQA's gold paragraphs outside
                    their supporting sentences; RULER's filler beside a needle)
    other_passages  the passages that hold none (HotpotQA's distractor paragraphs; RULER's filler)
    new             none of them (a number that is nowhere, a count, a list's "1.")

The first source above whose run around the word is as long as the longest one, or at least
`CREDIT_WORDS` words long, takes it (runs of `MAX_RUN` words at most): "new york city" in a
supporting sentence stays the evidence's though a distractor holds "in new york city", while a "the"
of a filler sentence read back goes to the filler. Runs never cross a text's edge (an evidence span's
edge included; overlapping spans are merged first).

Per answer, `sources` records each source's share of its words and `recites_context`: at least
`RECITE_WORDS` consecutive words, each credited to the passages outside the evidence (`same_passage`
or `other_passages`) by a run of at least `RECITE_WORDS` words: the filler read back, a distractor's
sentence (not a word of the question followed by one of a distractor's, nor "there, there, there");
`SourceTexts.recited` quotes those stretches. On the 10.12w record this is the readings' hand count of five filler sentences, answer for
answer. Where the answer is a passage's prose (HotpotQA), dense's own answers recite it too: read a
cell against dense's.

Only examples that define their evidence (a non-empty list) are read: without it the passages around
the evidence cannot be told from it, and the tables leave such examples out rather than count their
words as anything. Like `answer_lines`, everything here is a function of the stored texts: a kept
record is enough.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.answer_lines import CELL, reference_cells, run_examples
from workbench.runstore.loaders import SweepRun
from workbench.tasks import Example

SOURCES = ("evidence", "prompt", "same_passage", "other_passages", "new")  # in the order that credits them
MAX_RUN = 12  # the longest run of words looked up (longer copies count as this long)
CREDIT_WORDS = 3  # a run at least this long credits a source earlier in SOURCES over a longer run of a later one
RECITE_WORDS = 3  # consecutive words, each credited outside the evidence by a run this long, that recite
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
    """(inside, outside): the text of the character `spans` of `text`, overlapping or touching spans
    merged into one piece, and the text between them."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    edges = [0, *(x for span in merged for x in span), len(text)]
    outside = [text[edges[i]:edges[i + 1]] for i in range(0, len(edges), 2)]
    return [text[start:end] for start, end in merged], outside


def has_evidence(example: Example) -> bool:
    """Whether `example` defines its evidence (a non-empty list of spans)."""
    return bool(example.evidence)


class SourceTexts:
    """An example's texts grouped by source, ready to trace answers against (one per example)."""

    def __init__(self, example: Example):
        if not has_evidence(example):
            raise WorkbenchError(f"example {example.id!r} defines no evidence: its passages cannot be told from it")
        evidence, same, other = [], [], []
        for index, passage in enumerate(example.passages):
            held = [(s, e) for p, s, e in example.evidence if p == index]
            inside, outside = _cut(passage, held)
            evidence += inside
            (same if held else other).extend(outside)
        prompt = [example.system or "", example.question, str(example.meta.get("answer_lead") or "")]
        self.found = {"evidence": _runs(evidence), "prompt": _runs(prompt), "same_passage": _runs(same),
                      "other_passages": _runs(other)}

    def trace(self, answer: str) -> list[tuple[str, str, int]]:
        """(word, source, run length) for each word of `answer`: the first source whose run around it
        is the longest or at least `CREDIT_WORDS` long, and that run's length (0 and "new" where no
        source holds the word)."""
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

    def recited(self, answer: str, traced: list[tuple[str, str, int]] | None = None) -> list[str]:
        """The stretches of `answer` that recite the passages outside the evidence: at least `RECITE_WORDS`
        consecutive words each credited there by a run of at least `RECITE_WORDS` words (not "there,
        there, there", one word found again and again), the stretch's words joined by spaces; `traced`: the
        answer's `trace` where the caller has it already."""
        stretches, current = [], []
        for word, source, run in [*(self.trace(answer) if traced is None else traced), ("", "end", 0)]:
            if source in OUTSIDE and run >= RECITE_WORDS:
                current.append(word)
                continue
            if len(current) >= RECITE_WORDS:
                stretches.append(" ".join(current))
            current = []
        return stretches

    def sources(self, answer: str) -> dict:
        """`words`, each source's share of them (NaN for an answer with no words) and `recites_context`."""
        traced = self.trace(answer)
        n = len(traced)
        shares = {name: (sum(s == name for _, s, _ in traced) / n if n else np.nan) for name in SOURCES}
        return {"words": n, **shares, "recites_context": bool(self.recited(answer, traced))}


@lru_cache(maxsize=8)
def source_texts(example: Example | None) -> SourceTexts | None:
    """`SourceTexts` of `example` where it defines its evidence, else None (the last few kept: the
    explorer's tables and a report's rows trace one example's answers in turn)."""
    return SourceTexts(example) if example is not None and has_evidence(example) else None


def recited_note(example: Example | None, answer) -> str:
    """'recites the passages: "…", "…"' quoting the first two distinct stretches of `answer` that recite
    the passages outside `example`'s evidence (and ", …" where there are more); '' for none, for an
    answer that is no text and for no example or one without evidence."""
    texts = source_texts(example)
    distinct = list(dict.fromkeys(texts.recited(answer))) if texts is not None and isinstance(answer, str) else []
    if not distinct:
        return ""
    more = ", …" if len(distinct) > 2 else ""
    return "recites the passages: " + ", ".join(f'"{stretch}"' for stretch in distinct[:2]) + more


def run_has_evidence(run: SweepRun) -> bool:
    """Whether some example of `run` recorded evidence rows (`n_evidence` > 0 in its examples' table): the
    runs whose answers these tables read (a run recorded before evidence was has no such column)."""
    ex = run.examples
    return "n_evidence" in ex and bool((pd.to_numeric(ex["n_evidence"], errors="coerce").fillna(0) > 0).any())


def answer_sources(run: SweepRun) -> pd.DataFrame:
    """Per answer of the examples that define evidence: the cell (`CELL`; dense and the splice as
    selectors "dense" and "splice", budget NaN), its `answer`, `words`, the share of each of
    `SOURCES` and `recites_context`. `attrs["left_out"]`: the examples read without evidence. Each
    example's texts are built, used and let go in turn (a long haystack's runs take tens of MB)."""
    examples = run_examples(run)
    kept = {i for i, e in examples.items() if has_evidence(e)}
    cells = run.outcomes[[*CELL, "answer"]].assign(example_id=lambda t: t["example_id"].astype(str))
    table = pd.concat([reference_cells(run, ("answer",)), cells], ignore_index=True)
    table = table[table["example_id"].isin(kept)].reset_index(drop=True)
    columns = ["words", *SOURCES, "recites_context"]
    traced = pd.DataFrame(index=table.index, columns=columns, dtype=object)
    for example_id, rows in table.groupby("example_id", sort=False).groups.items():
        texts = SourceTexts(examples[example_id])
        traced.loc[rows] = [list(texts.sources(a if isinstance(a, str) else "").values())  # in `columns`' order
                            for a in table.loc[rows, "answer"]]
    traced = traced.astype({"words": int, **dict.fromkeys(SOURCES, float), "recites_context": bool})
    out = pd.concat([table, traced], axis=1)
    out.attrs["left_out"] = len(examples) - len(kept)
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
