"""The per-example tables the Example explorer and Live show: the answers of each cache with
their graded outcomes, each draw of a drawn control, and which rows each selector picks."""

from __future__ import annotations

import pandas as pd

from workbench.app_api import ENDED_AT_ONCE, Diagnosis, no_token, recited_note


def _at(table: pd.DataFrame, budget: float) -> pd.DataFrame:
    return table[(table["budget"] - budget).abs() < 1e-9]


def _flip_word(flip: bool) -> str:
    return "FLIP" if flip else "same"


def _draws_word(flips: int, draws: int) -> str:
    """A drawn control's cell: how many of its draws flip."""
    return f"FLIP in {flips} of {draws} draws" if flips else f"same in all {draws} draws"


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def answers_table(d: Diagnosis, selectors: list[str], budget: float) -> pd.DataFrame:
    """Dense, spliced and each selector's repaired answer at a budget; flips as recorded, with the
    graded outcomes against dense beside them (a drawn control, the coin: the answer of its first
    draw, flips counted and scores averaged over draws). An answer of no token says it ended at once,
    so that an empty cell does not read as a value missing; one that reads back the passages outside
    the gold evidence (where the example defines it) quotes what it recites."""
    dense, spliced = d.answers.dense, d.answers.spliced
    rows = [{"cache": "dense", "rows recomputed": None, "answer": dense.text, "flip vs dense": "",
             "F1 to dense": 1.0, "first token = dense's": 1.0, "EM": dense.em, "retrieved": dense.retrieved,
             "F1": dense.f1, "note": _joined(ENDED_AT_ONCE if no_token(dense.n_tokens) else "",
                                             recited_note(d.example, dense.text))},
            {"cache": "spliced", "rows recomputed": 0, "answer": spliced.text,
             "flip vs dense": _flip_word(d.answers.splice_flip), "EM": spliced.em, "retrieved": spliced.retrieved,
             "ran on": float(d.answers.splice_ran_on), "F1": spliced.f1,
             "note": _joined(ENDED_AT_ONCE if no_token(spliced.n_tokens) else "", recited_note(d.example, spliced.text))}]
    outcomes, chosen = _at(d.outcomes, budget), _at(d.selections, budget)
    for name in selectors:
        cell, picked = outcomes[outcomes["selector"] == name], chosen[chosen["selector"] == name]
        if cell.empty:
            continue
        first, draws, notes = cell.iloc[0], len(cell), []
        if draws > 1:
            notes.append(f"answer of draw {first['draw']}; scores averaged over {draws} draws")
        if no_token(first.get("answer_tokens")):
            notes.append(ENDED_AT_ONCE)
        if not picked.empty and bool(picked.iloc[0].get("skipped", False)):
            notes.append("skipped: budget under one chunk")
        elif not picked.empty and not bool(picked.iloc[0].get("budget_matched", True)):
            notes.append(f"not budget-matched ({int(picked.iloc[0]['n_recomputed'])} rows for "
                         f"{int(picked.iloc[0]['n_requested'])} asked)")
        notes.append(recited_note(d.example, first["answer"]))
        flips = int(cell["flip"].sum())
        graded = {label: float(cell[column].mean()) if column in cell else None
                  for label, column in (("F1 to dense", "f1_to_dense"), ("first token = dense's", "first_token_agree"))}
        rows.append({"cache": f"repaired: {name}", "rows recomputed": int(first["n_recomputed"]),
                     "answer": first["answer"],
                     "flip vs dense": _flip_word(bool(first["flip"])) if draws == 1 else _draws_word(flips, draws),
                     **graded, "EM": float(cell["em"].mean()),
                     **{label: float(cell[column].astype(float).mean()) for label, column in
                        (("retrieved", "retrieved"), ("ran on", "ran_on"), ("evidence recall", "evidence_recall"))
                        if column in cell},
                     "F1": float(cell["f1"].mean()), "note": _joined(*notes)})
    table = pd.DataFrame(rows)
    table["rows recomputed"] = table["rows recomputed"].astype("Int64")
    return table


def draws_table(d: Diagnosis, selectors: list[str], budget: float) -> pd.DataFrame:
    """Each draw of the drawn controls (the coin) among `selectors` at a budget: its rows, answer,
    flip and graded outcomes, one row per draw, and a note where the answer ended at once or recites
    the passages."""
    cells = _at(d.outcomes, budget)
    cells = cells[cells["selector"].isin(selectors)]
    drawn = cells.groupby("selector")["selector"].transform("size") > 1
    columns = [c for c in ("selector", "draw", "n_recomputed", "answer", "flip", "f1_to_dense", "first_token_agree",
                           "em", "f1") if c in cells]
    table = cells[drawn][columns].rename(columns={"n_recomputed": "rows recomputed"}).reset_index(drop=True)
    ended = cells[drawn]["answer_tokens"] if "answer_tokens" in cells else [None] * len(table)
    example = getattr(d, "example", None)
    table["note"] = [_joined(ENDED_AT_ONCE if no_token(n) else "", recited_note(example, a))  # no token: ended at once
                     for n, a in zip(ended, cells[drawn]["answer"])]
    return table


def picks_table(d: Diagnosis, selectors: list[str], budget: float) -> pd.DataFrame:
    """Reused tokens x selectors: True where a selector recomputes the row at this budget."""
    tokens = d.tokens[d.tokens["reused"]][["position", "segment", "token"]].reset_index(drop=True)
    for name in selectors:
        tokens[name] = tokens["position"].isin(set(d.picks(name, budget)))
    tokens["n_selectors"] = tokens[selectors].sum(axis=1) if selectors else 0
    return tokens
