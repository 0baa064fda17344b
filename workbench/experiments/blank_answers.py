"""Answers that name nothing: the artefact a first-line rule can hide.

An answer is blank when the text scored holds no letter or digit ("", ":", "-"). Under the default
rule (the answer is its first line, `engine.decode.StopRule`) a blank answer is often a label before
a line break: ":" and then a numbered list of values on the next lines (RESULTS 8). The rule reads
none of what follows, so EM and `retrieved` count a change of format as lost evidence;
`--no-stop-at-newline` scores the whole answer. A blank answer can also end at once: an end-of-turn
token as its first token (`answer_tokens` 0), the receiver declining to answer, which no answer rule
reads past (the splice of ten HotpotQA paragraphs, RESULTS 9). The table tells the two apart.

    blank_table(outcomes, examples)   per selector x budget, and the splice: the share of cells whose
                                      answer is blank where dense's names something (draws pooled), and
                                      the share of those that ended at once (NaN: no blank cell, or a
                                      record without `answer_tokens`)
    blank_sentence(table, whole)      the selectors (and the splice) that answer blank in at least
                                      BLANK_SHARE of their cells at some budget (the SHOWN most blank
                                      named, the rest counted), which of them ended at once, and what to
                                      do about the rest; "" where none does
"""

from __future__ import annotations

import pandas as pd

ENDED_AT_ONCE = "ended at once (an end of turn first)"  # a note beside an answer of no token
BLANK_SHARE = 0.1  # a display rule (it tests nothing): from this share of cells a selector is named
SHOWN = 4  # selectors named in the sentence, the most blank first
COLUMNS = ["selector", "budget", "cells", "blank_share", "ended_share"]


def is_blank(text) -> bool:
    """Whether an answer's text names nothing (no letter or digit); a missing answer is not blank."""
    return isinstance(text, str) and not any(ch.isalnum() for ch in text)


def no_token(n_tokens) -> bool:
    """Whether an answer's recorded token count says it ended at once (0: an end of turn first);
    False where the count is missing (None, NaN, pd.NA)."""
    return bool(pd.notna(n_tokens) and n_tokens == 0)


def _shares(answers: pd.Series, dense: pd.Series, tokens: pd.Series | None) -> dict:
    """The share of `answers` that are blank where the aligned `dense` answer is not, and the share of
    those whose answer generated no token (`tokens` 0: an end of turn first); NaN where a blank
    answer's count is missing (no `tokens`, or a resumed run's older cells without them)."""
    blank = answers.map(is_blank) & ~dense.map(is_blank)
    counts = None if tokens is None else tokens[blank]
    ended = (float("nan") if counts is None or counts.empty or counts.isna().any()
             else float((counts == 0).mean()))
    return {"blank_share": float(blank.mean()), "ended_share": ended}


def blank_table(outcomes: pd.DataFrame, examples: pd.DataFrame) -> pd.DataFrame:
    """Per selector and budget (`none` and `full` left out: the splice's and dense's caches again),
    then the splice (budget NaN): cells and the share answering blank where dense's answer is not.
    `outcomes` without cells (`kvwb answerability`'s table has none): the splice's row alone."""
    rows = []
    if {"selector", "budget", "answer", "dense_answer"} <= set(outcomes.columns):  # else no cells: the splice alone
        cells = outcomes[~outcomes["selector"].isin(["none", "full"])].dropna(subset=["answer", "dense_answer"])
        rows = [{"selector": selector, "budget": budget, "cells": len(cell),
                 **_shares(cell["answer"], cell["dense_answer"], cell.get("answer_tokens"))}
                for (selector, budget), cell in cells.groupby(["selector", "budget"], sort=False)]
    ex = examples.dropna(subset=["spliced_answer", "dense_answer"]) if "spliced_answer" in examples else examples.iloc[:0]
    if len(ex):
        rows.append({"selector": "splice", "budget": float("nan"), "cells": len(ex),
                     **_shares(ex["spliced_answer"], ex["dense_answer"], ex.get("spliced_answer_tokens"))})
    return pd.DataFrame(rows, columns=COLUMNS)


def blank_sentence(table: pd.DataFrame, whole: bool, name=str, read: bool = True) -> str:
    """One line naming who answers blank in at least BLANK_SHARE of its cells at some budget (its
    largest share and where; the SHOWN largest, the rest counted), the share of blank answers that
    ended at once (`ended_at_once`), and, for a run that scored first lines, how to read past the line
    (`read`: and `kvwb summary --read`, for a sweep); `name` writes a selector's label (the app escapes
    it: labels are data)."""
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
    ended = ended_at_once(table)
    if ended == 1:
        return line + (" Every blank answer here ended at once: an end of turn as the first token (the receiver "
                       "declined to answer), which no answer rule reads past.")
    share = "over 99%" if ended > 0.99 else "under 1%" if ended < 0.01 else f"{ended:.0%}"
    at_once = "" if ended != ended or ended == 0 else (
        f" {share} of the blank answers ended at once (an end of turn as the first token, which no answer rule "
        "reads past).")
    if whole:
        return line + at_once + " These answers were scored whole: they name nothing at all."
    return line + at_once + (
        " Under the first-line rule a blank answer can be a label before a line break (\":\", then a list), which "
        "EM and retrieved count as lost: " + ("read a few (`kvwb summary --read`), or " if read else "") +
        "rerun with `--no-stop-at-newline` to score the whole answer.")


def ended_at_once(table: pd.DataFrame) -> float:
    """Of every blank cell in `table` (each row's cells x blank share; a drawn control's draws are
    cells), the share that ended at once; NaN where none is blank or a row with blank cells does not
    know (a record without `answer_tokens`, or cells without them beside a splice with them)."""
    if "ended_share" not in table:
        return float("nan")
    blank = table["cells"] * table["blank_share"]
    if blank.sum() == 0 or table.loc[blank > 0, "ended_share"].isna().any():
        return float("nan")
    return float((blank * table["ended_share"].fillna(0)).sum() / blank.sum())
