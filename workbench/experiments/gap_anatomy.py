"""What an exact-match gap is made of: lost evidence, or an answer that no longer stops.

Exact match counts an answer that names the gold and runs on ("1695484. The grass is green…")
as wrong, exactly like one that names another number. So the lost exact matches of an answer
(dense right, the answer wrong) are split three ways, each against dense's answer to the same
example:

    lost_gold   it retrieves less of the gold than dense's answer did (`retrieved` falls)
    in_word     it retrieves as much, but the gold occurs only inside a longer word where dense's
                occurred as whole words (`contains` falls): RULER's substring match counts
                "43918910" as naming 4391891, a damaged answer, not a formatting loss
    ran_on      it retrieves as much, and ran on past where dense's answer ended (`graded.ran_on`)
    other       it retrieves as much and did not run on (another wording, a cut, a prefix)

`gained` counts the other way (dense wrong, the answer right); `silent`, where the answers' token
counts are recorded, counts the `lost_gold` answers that ended at once (no token: an end of turn
first), the receiver naming nothing rather than something else. Cells of runs recorded before
`ran_on` was (their outcomes lack the column) use its text half, `graded.continues_past`; the
table says so in `attrs["ran_on_rule"]`.
"""

from __future__ import annotations

import pandas as pd

from workbench.diagnosis.graded import continues_past

KINDS = ("lost_gold", "in_word", "ran_on", "other")
# Below this share of lost exact matches that lost the gold, the summary says the EM gap is mostly
# how answers end (a display rule, fixed before any run was read with it).
MOSTLY = 0.5


def _split(dense_em, em, dense_retrieved, retrieved, ran_on, dense_contains=None, contains=None,
           tokens=None) -> dict:
    """Counts of one answer set against dense's (aligned pandas Series; `contains` and the answers'
    token counts `tokens` optional: with them, `silent`)."""
    lost = (dense_em >= 1) & (em < 1)
    lost_gold = lost & (retrieved < dense_retrieved)
    in_word = lost & ~lost_gold & ((contains < dense_contains) if contains is not None else False)
    kept = lost & ~lost_gold & ~in_word
    silent = {} if tokens is None or tokens.isna().any() else {"silent": int((lost_gold & (tokens == 0)).sum())}
    return {"lost": int(lost.sum()), "lost_gold": int(lost_gold.sum()), **silent, "in_word": int(in_word.sum()),
            "ran_on": int((kept & ran_on.astype(bool)).sum()), "other": int((kept & ~ran_on.astype(bool)).sum()),
            "gained": int(((dense_em < 1) & (em >= 1)).sum())}


def _pair(frame, dense: str, answer: str):
    """The (dense, answer) `contains` columns where both are recorded, else (None, None)."""
    if {dense, answer} <= set(frame.columns) and frame[[dense, answer]].notna().all().all():
        return frame[dense], frame[answer]
    return None, None


def splice_anatomy(examples: pd.DataFrame) -> dict | None:
    """The splice's lost exact matches split (module docstring); None where the run records no
    retrieval measure or no run-on (no gold, or an examples table from before them)."""
    need = ("dense_em", "spliced_em", "dense_retrieved", "spliced_retrieved", "spliced_ran_on")
    if not set(need) <= set(examples.columns) or examples["spliced_retrieved"].isna().all():
        return None
    ex = examples.dropna(subset=["dense_em", "spliced_em", "dense_retrieved", "spliced_retrieved"])
    return _split(ex["dense_em"], ex["spliced_em"], ex["dense_retrieved"], ex["spliced_retrieved"],
                  ex["spliced_ran_on"].fillna(False), *_pair(ex, "dense_contains", "spliced_contains"),
                  ex.get("spliced_answer_tokens"))


def cell_anatomy(outcomes: pd.DataFrame, examples: pd.DataFrame) -> pd.DataFrame:
    """Per selector and budget, its lost exact matches split (mean counts per draw for drawn
    controls). Columns: selector, budget, draws, lost, lost_gold[, silent], in_word, ran_on, other, gained."""
    if "retrieved" not in outcomes.columns or "dense_retrieved" not in examples.columns:
        return pd.DataFrame(columns=["selector", "budget", "draws", "lost", *KINDS, "gained"])
    dense = examples.set_index("example_id")[[c for c in ("dense_em", "dense_retrieved", "dense_contains")
                                              if c in examples.columns]]
    cells = outcomes.join(dense, on="example_id").dropna(subset=["em", "retrieved", "dense_em", "dense_retrieved"])
    recorded = "ran_on" in cells.columns and cells["ran_on"].notna().all()
    ran = cells["ran_on"].astype(bool) if recorded else pd.Series(
        [continues_past(a, d) for a, d in zip(cells["answer"], cells["dense_answer"])], index=cells.index)
    rows = []
    for (selector, budget), cell in cells.groupby(["selector", "budget"], sort=False):
        draws = max(int(cell["draw"].nunique()), 1) if "draw" in cell and cell["draw"].notna().any() else 1
        counts = _split(cell["dense_em"], cell["em"], cell["dense_retrieved"], cell["retrieved"], ran.loc[cell.index],
                        *_pair(cell, "dense_contains", "contains"), cell.get("answer_tokens"))
        rows.append({"selector": selector, "budget": budget, "draws": draws,
                     **{k: v / draws for k, v in counts.items()}})
    table = pd.DataFrame(rows)
    table.attrs["ran_on_rule"] = "recorded" if recorded else "text (dense's answer a proper prefix)"
    return table


def anatomy_sentence(counts: dict | None, who: str = "the splice", hint: bool = True) -> str:
    """One line saying what `who`'s lost exact matches are, with a warning when most kept the gold
    (and, with `hint`, the measure that reads the gap apart from how answers end)."""
    if counts is None:
        return ""
    lost = counts["lost"]
    if lost == 0:
        return f"{who} loses no exact match that dense has ({counts['gained']} gained)."
    glued = f"{counts['in_word']} name it only inside a longer word, " if counts.get("in_word") else ""
    silent = f" ({counts['silent']} of them ended at once, naming nothing)" if counts.get("silent") else ""
    line = (f"Of {who}'s {lost} lost exact matches (dense right, {who} wrong): {counts['lost_gold']} lost the gold{silent}, "
            f"{glued}{counts['ran_on']} name it and ran on past dense's answer, {counts['other']} name it and end "
            f"otherwise ({counts['gained']} gained).")
    if (counts["lost_gold"] + counts.get("in_word", 0)) / lost < MOSTLY:
        line += " Most of this EM gap is how the answer ends, not lost evidence" + (
            ": read it with `--measure retrieved`." if hint else ".")
    return line


def anatomy_grid(table: pd.DataFrame) -> pd.DataFrame:
    """`cell_anatomy` as selector rows × budget columns of "lost: gold / in word / ran on / other", the
    gold's answers that ended at once beside it where counted and any ("4: 3 (2 ended at once) / ...")."""
    if table.empty:
        return pd.DataFrame()
    def text(r):
        fmt = (lambda v: f"{v:g}") if r.draws == 1 else (lambda v: f"{v:.1f}")
        silent = getattr(r, "silent", float("nan"))
        gold = fmt(r.lost_gold) + (f" ({fmt(silent)} ended at once)" if silent > 0 else "")
        return f"{fmt(r.lost)}: {gold} / {fmt(r.in_word)} / {fmt(r.ran_on)} / {fmt(r.other)}"
    shown = table.assign(cell=[text(r) for r in table.itertuples()])
    grid = shown.pivot(index="selector", columns="budget", values="cell")
    grid = grid.reindex(table["selector"].drop_duplicates())
    grid.columns = [f"b={b:g}" for b in grid.columns]
    return grid.reset_index()
