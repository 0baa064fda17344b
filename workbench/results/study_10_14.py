"""RESULTS 9: the tables of 10.14's evidence study (SmolLM2-135M on the HotpotQA records), from its
record, as `docs/records/analyse-10.14.sh RUN` reads it. Descriptive: no test.

Its section 1 is `kvwb summary RUN`: the evidence recall and precision per selector and budget
(`evidence_recall_table` of `summarize`'s table), each scorer's average precision beside chance
(`evidence_tables`' ranking), EM, retrieved and flips beside them (`summarize`); its section 2 the
question's attention mass on the evidence rows per layer at b = 0.2, `mass_mean` and `mass_last`
(`attention_by_layer`, four decimals as the script prints them). A record short of its manifest's
n (94) is refused (`complete_run`).
"""

from __future__ import annotations

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.results.cells import fmt
from workbench.results.registry import frame, register_figure, register_table
from workbench.results.study_10_12 import complete_run

RECORD = "evidence-hotpotqa-smollm2"
AT = 0.2  # the budget of the per-layer attention, as the entry and the script name it


def _summary(records, column: str) -> pd.DataFrame:
    """`kvwb summary`'s table of the complete record, refused where no example has a `column`."""
    complete_run(records, RECORD)
    table = records.summary(RECORD)
    if column not in table or table[column].isna().all():
        raise WorkbenchError(f"{RECORD}'s summary has no {column}: no example with evidence in the pool has one")
    return table


def _counts(values: list[int]):
    """One count where every budget has the same, else one per budget."""
    return fmt(" / ".join("{}" for _ in values), *values) if len(set(values)) > 1 else fmt("{}", values[0])


def per_budget(table: pd.DataFrame, column: str, count: str) -> pd.DataFrame:
    """Selector x budget of the mean `column` (`evidence_recall_table`; – where no example has one)
    and `count`, the examples each mean is over."""
    from workbench.experiments.evidence import evidence_recall_table

    values, counts = evidence_recall_table(table, column), evidence_recall_table(table, count)
    return frame([{"selector": selector,
                   **{f"b = {b:g}": fmt("{:.3f}", values.loc[selector, b]) for b in values.columns},
                   "n": _counts([int(counts.loc[selector, b]) for b in counts.columns])}
                  for selector in values.index])


@register_table("10.14-recall", f"RESULTS 9 (10.14): evidence recall per selector and budget, mean over the "
                                f"examples with evidence in the pool (n) ({RECORD})")
def recall(records) -> pd.DataFrame:
    return per_budget(_summary(records, "evidence_recall"), "evidence_recall", "n_with_evidence")


@register_table("10.14-precision", f"RESULTS 9 (10.14): evidence precision per selector and budget, mean over the "
                                   f"examples with evidence in the pool where the repair recomputed a row (n) "
                                   f"({RECORD})")
def precision(records) -> pd.DataFrame:
    return per_budget(_summary(records, "evidence_precision"), "evidence_precision", "n_with_precision")


def _evidence_tables(records):
    """`evidence_tables` of the complete record: (ranking, attention), read once for all its tables."""
    complete_run(records, RECORD)
    return records.evidence(RECORD)


@register_table("10.14-average-precision", f"RESULTS 9 (10.14): each scorer's mean average precision against the "
                                           f"evidence rows, beside chance (their share of the pool) ({RECORD})")
def average_precision(records) -> pd.DataFrame:
    ranking, _ = _evidence_tables(records)
    if ranking.empty:
        raise WorkbenchError(f"{RECORD} keeps no evidence ranking: 10.14's average precision needs it")
    return frame([{"scorer": r.scorer, "kind": r.kind, "n": fmt("{}", int(r.n)),
                   "average precision": fmt("{:.3f}", r.average_precision), "chance": fmt("{:.3f}", r.chance),
                   "lift (AP / chance)": fmt("{:.3f}", r.lift)} for r in ranking.itertuples(index=False)])


@register_table("10.14-em-retrieved-flips", f"RESULTS 9 (10.14), beside the evidence: EM / retrieved / flip rate "
                                            f"per selector and budget ({RECORD})")
def em_retrieved_flips(records) -> pd.DataFrame:
    complete_run(records, RECORD)
    table = records.summary(RECORD)
    rows = []
    for selector in dict.fromkeys(table["selector"]):
        cells = table[table["selector"] == selector].set_index("budget")
        rows.append({"selector (EM / retrieved / flips)": selector,
                     **{f"b = {b:g}": fmt("{:.3f} / {:.3f} / {:.3f}", c.em, c.retrieved, c.flip_rate)
                        for b, c in cells.sort_index().iterrows()}})
    return frame(rows)


def by_layer(records, mass: str) -> pd.DataFrame:
    """Layer x cache of `mass` at b = AT (`attention_by_layer`: dense, the splice, each selector but
    none and full), four decimals, and dense's n (the examples with evidence in the context)."""
    from workbench.experiments.evidence import attention_by_layer

    _, attention = _evidence_tables(records)
    if attention.empty:
        raise WorkbenchError(f"{RECORD} keeps no evidence attention: 10.14's per-layer reading needs it")
    table = attention_by_layer(attention, AT, mass)
    dense = attention[attention["cell"] == "dense"].set_index("layer")["n"]
    cells = table.columns[1:]
    return frame([{"layer": fmt("{}", int(layer)), **{cell: fmt("{:.4f}", table[cell].iloc[i]) for cell in cells},
                   "n": fmt("{}", int(dense.loc[layer]))} for i, layer in enumerate(table["layer"])])


for _name, _mass, _what in (("10.14-attention-mean", "mass_mean", "mean over its rows and heads"),
                            ("10.14-attention-last", "mass_last", "its last row, mean over heads")):
    register_table(_name, f"RESULTS 9 (10.14): the question's attention mass on the evidence rows per layer ({_mass}: "
                          f"{_what}) under dense, the splice and each selector at b = {AT:g} ({RECORD})")(
        lambda records, mass=_mass: by_layer(records, mass))


@register_figure("10.14-attention", f"RESULTS 9 (10.14): the question's attention on the evidence per layer under "
                                    f"dense, the splice and each selector at b = {AT:g} (mass_mean; the tables' lines "
                                    f"drawn) ({RECORD})")
def attention_figure(records):
    """The per-layer reading as a figure (`plots.evidence_attention_figure`, as `kvwb summary --html`
    draws it): 30 layers x 16 lines read better drawn than as a 32-line table."""
    from workbench.plots import evidence_attention_figure

    _, attention = _evidence_tables(records)
    if attention.empty:
        raise WorkbenchError(f"{RECORD} keeps no evidence attention: 10.14's per-layer reading needs it")
    return evidence_attention_figure(attention, AT, "mass_mean",
                                     title=f"10.14: the question's attention on the supporting facts, b = {AT:g}")
