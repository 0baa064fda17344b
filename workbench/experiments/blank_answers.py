"""Answers that name nothing: the artefact a first-line rule can hide.

An answer is blank when the text scored holds no letter or digit ("", ":", "-"). Under the default
rule (the answer is its first line, `engine.decode.StopRule`) a blank answer is often a label before
a line break: ":" and then a numbered list of values on the next lines (RESULTS 8). The rule reads
none of what follows, so EM and `retrieved` count a change of format as lost evidence;
`--no-stop-at-newline` scores the whole answer.

    blank_table(outcomes, examples)   per selector x budget, and the splice: the share of cells whose
                                      answer is blank where dense's names something (draws pooled)
    blank_sentence(table, whole)      the selectors (and the splice) that answer blank in at least
                                      BLANK_SHARE of their cells at some budget (the SHOWN most blank
                                      named, the rest counted), with what to do about it; "" where none does
"""

from __future__ import annotations

import pandas as pd

BLANK_SHARE = 0.1  # a display rule (it tests nothing): from this share of cells a selector is named
SHOWN = 4  # selectors named in the sentence, the most blank first
COLUMNS = ["selector", "budget", "cells", "blank_share"]


def is_blank(text) -> bool:
    """Whether an answer's text names nothing (no letter or digit); a missing answer is not blank."""
    return isinstance(text, str) and not any(ch.isalnum() for ch in text)


def _share(answers: pd.Series, dense: pd.Series) -> float:
    """The share of `answers` that are blank where the aligned `dense` answer is not."""
    return float((answers.map(is_blank) & ~dense.map(is_blank)).mean())


def blank_table(outcomes: pd.DataFrame, examples: pd.DataFrame) -> pd.DataFrame:
    """Per selector and budget (`none` and `full` left out: the splice's and dense's caches again),
    then the splice (budget NaN): cells and the share answering blank where dense's answer is not.
    `outcomes` without cells (`kvwb answerability`'s table has none): the splice's row alone."""
    rows = []
    if {"selector", "budget", "answer", "dense_answer"} <= set(outcomes.columns):  # else no cells: the splice alone
        cells = outcomes[~outcomes["selector"].isin(["none", "full"])].dropna(subset=["answer", "dense_answer"])
        rows = [{"selector": selector, "budget": budget, "cells": len(cell),
                 "blank_share": _share(cell["answer"], cell["dense_answer"])}
                for (selector, budget), cell in cells.groupby(["selector", "budget"], sort=False)]
    ex = examples.dropna(subset=["spliced_answer", "dense_answer"]) if "spliced_answer" in examples else examples.iloc[:0]
    if len(ex):
        rows.append({"selector": "splice", "budget": float("nan"), "cells": len(ex),
                     "blank_share": _share(ex["spliced_answer"], ex["dense_answer"])})
    return pd.DataFrame(rows, columns=COLUMNS)


def blank_sentence(table: pd.DataFrame, whole: bool, name=str, read: bool = True) -> str:
    """One line naming who answers blank in at least BLANK_SHARE of its cells at some budget (its
    largest share and where; the SHOWN largest, the rest counted), and, for a run that scored first
    lines, how to read past the line (`read`: and `kvwb summary --read`, for a sweep); `name` writes a
    selector's label (the app escapes it: labels are data)."""
    if table.empty:
        return ""
    worst = table.sort_values("blank_share", ascending=False, kind="stable").drop_duplicates("selector")
    worst = worst[worst["blank_share"] >= BLANK_SHARE]
    if worst.empty:
        return ""
    named = [f"{name(s)} {share:.0%}" + ("" if pd.isna(b) else f" at b = {b:g}")
             for s, b, share in zip(worst["selector"], worst["budget"], worst["blank_share"])]
    more = f" (+{len(named) - SHOWN} more)" if len(named) > SHOWN else ""
    line = ("Blank answers (no letter or digit, where dense's answer names something), the largest share of "
            f"cells: {', '.join(named[:SHOWN])}{more}.")
    if whole:
        return line + " These answers were scored whole: they name nothing at all."
    return line + (" Under the first-line rule a blank answer can be a label before a line break (\":\", then "
                   "a list), which EM and retrieved count as lost: " + ("read a few (`kvwb summary --read`), or "
                                                                       if read else "") +
                   "rerun with `--no-stop-at-newline` to score the whole answer.")
