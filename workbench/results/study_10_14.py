"""RESULTS 9: the tables of 10.14's evidence study on the HotpotQA records, from its record, as
`docs/records/analyse-10.14.sh RUN` reads it: SmolLM2-135M's (`evidence-hotpotqa-smollm2`, tables
`10.14-*`) and Gemma 3 270M's, the same command with `--model gemma3-270m`
(`evidence-hotpotqa-gemma3`, tables `10.14g-*`, registered before its data were read). Descriptive:
no test.

Its section 1 is `kvwb summary RUN`: the evidence recall and precision per selector and budget
(`evidence_recall_table` of `summarize`'s table), each scorer's average precision beside chance
(`evidence_tables`' ranking), EM, retrieved and flips beside them (`summarize`); its section 2 the
question's attention mass on the evidence rows per layer at b = 0.2, `mass_mean` and `mass_last`
(`attention_by_layer`, four decimals as the script prints them). A record short of its manifest's
n (94) is refused (`complete_run`, a `TableRefusedError`), and so is Gemma's while it is not kept yet
(`PENDING`: a `RecordMissingError`); any other missing record is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from workbench.errors import RecordMissingError, WorkbenchError
from workbench.results.cells import fmt
from workbench.results.registry import frame, register_figure, register_table
from workbench.results.study_10_12 import complete_run

AT = 0.2  # the budget of the per-layer attention, as the entry and the script name it


@dataclass(frozen=True)
class EvidenceStudy:
    """One model's 10.14: the prefix of its tables' names, its record and the model, as RESULTS names them."""

    prefix: str
    record: str
    model: str

    @property
    def label(self) -> str:
        """The study as RESULTS names it: 10.14 (SmolLM2's, the first), or with the model."""
        return "10.14" if self.prefix == "10.14" else f"10.14, {self.model}"

    def about(self, what: str, joint: str = ":") -> str:
        """A table's description: RESULTS 9, the study, what it shows, the record."""
        return f"RESULTS 9 ({self.label}){joint} {what} ({self.record})"


SMOLLM2 = EvidenceStudy("10.14", "evidence-hotpotqa-smollm2", "SmolLM2-135M")
GEMMA3 = EvidenceStudy("10.14g", "evidence-hotpotqa-gemma3", "Gemma 3 270M")
STUDIES = (SMOLLM2, GEMMA3)
RECORD = SMOLLM2.record
PENDING = frozenset({GEMMA3.record})  # registered before the record is kept: refused, not an error, until it is


def _complete(records, record: str):
    """The record read back whole (`complete_run`); a PENDING one not kept yet is a RecordMissingError."""
    if record in PENDING and not records.has(record):
        raise RecordMissingError(f"{records.folder} has no record {record!r} (not kept yet)")
    return complete_run(records, record)


def _summary(records, record: str, column: str) -> pd.DataFrame:
    """`kvwb summary`'s table of the complete record, refused where no example has a `column`."""
    _complete(records, record)
    table = records.summary(record)
    if column not in table or table[column].isna().all():
        raise WorkbenchError(f"{record}'s summary has no {column}: no example with evidence in the pool has one")
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


def recall(records, record: str = RECORD) -> pd.DataFrame:
    return per_budget(_summary(records, record, "evidence_recall"), "evidence_recall", "n_with_evidence")


def precision(records, record: str = RECORD) -> pd.DataFrame:
    return per_budget(_summary(records, record, "evidence_precision"), "evidence_precision", "n_with_precision")


def _evidence_tables(records, record: str):
    """`evidence_tables` of the complete record: (ranking, attention), read once for all its tables."""
    _complete(records, record)
    return records.evidence(record)


def average_precision(records, record: str = RECORD) -> pd.DataFrame:
    ranking, _ = _evidence_tables(records, record)
    if ranking.empty:
        raise WorkbenchError(f"{record} keeps no evidence ranking: 10.14's average precision needs it")
    return frame([{"scorer": r.scorer, "kind": r.kind, "n": fmt("{}", int(r.n)),
                   "average precision": fmt("{:.3f}", r.average_precision), "chance": fmt("{:.3f}", r.chance),
                   "lift (AP / chance)": fmt("{:.3f}", r.lift)} for r in ranking.itertuples(index=False)])


def em_retrieved_flips(records, record: str = RECORD) -> pd.DataFrame:
    _complete(records, record)
    table = records.summary(record)
    rows = []
    for selector in dict.fromkeys(table["selector"]):
        cells = table[table["selector"] == selector].set_index("budget")
        rows.append({"selector (EM / retrieved / flips)": selector,
                     **{f"b = {b:g}": fmt("{:.3f} / {:.3f} / {:.3f}", c.em, c.retrieved, c.flip_rate)
                        for b, c in cells.sort_index().iterrows()}})
    return frame(rows)


def _attention(records, record: str) -> pd.DataFrame:
    _, attention = _evidence_tables(records, record)
    if attention.empty:
        raise WorkbenchError(f"{record} keeps no evidence attention: 10.14's per-layer reading needs it")
    return attention


def by_layer(records, mass: str, record: str = RECORD) -> pd.DataFrame:
    """Layer x cache of `mass` at b = AT (`attention_by_layer`: dense, the splice, each selector but
    none and full), four decimals, and dense's n (the examples with evidence in the context)."""
    from workbench.experiments.evidence import attention_by_layer

    attention = _attention(records, record)
    table = attention_by_layer(attention, AT, mass)
    dense = attention[attention["cell"] == "dense"].set_index("layer")["n"]
    cells = table.columns[1:]
    return frame([{"layer": fmt("{}", int(layer)), **{cell: fmt("{:.4f}", table[cell].iloc[i]) for cell in cells},
                   "n": fmt("{}", int(dense.loc[layer]))} for i, layer in enumerate(table["layer"])])


def attention_figure(records, study: EvidenceStudy = SMOLLM2):
    """The per-layer reading as a figure (`plots.evidence_attention_figure`, as `kvwb summary --html`
    draws it): 30 layers x 16 lines read better drawn than as a 32-line table."""
    from workbench.plots import evidence_attention_figure

    return evidence_attention_figure(_attention(records, study.record), AT, "mass_mean",
                                     title=f"{study.label}: the question's attention on the supporting facts, b = {AT:g}")


def _register(study: EvidenceStudy) -> None:
    """The study's six tables and its figure, each a function of the records reading `study.record`."""
    record, p = study.record, study.prefix
    tables = {
        "recall": (recall, "evidence recall per selector and budget, mean over the examples with evidence in the "
                           "pool (n)"),
        "precision": (precision, "evidence precision per selector and budget, mean over the examples with evidence "
                                 "in the pool where the repair recomputed a row (n)"),
        "average-precision": (average_precision, "each scorer's mean average precision against the evidence rows, "
                                                 "beside chance (their share of the pool)"),
    }
    for name, (build, what) in tables.items():
        register_table(f"{p}-{name}", study.about(what))(lambda records, build=build: build(records, record))
    register_table(f"{p}-em-retrieved-flips", study.about("beside the evidence: EM / retrieved / flip rate per "
                                                          "selector and budget", joint=","))(
        lambda records: em_retrieved_flips(records, record))
    for name, mass, what in (("attention-mean", "mass_mean", "mean over its rows and heads"),
                             ("attention-last", "mass_last", "its last row, mean over heads")):
        register_table(f"{p}-{name}", study.about(f"the question's attention mass on the evidence rows per layer "
                                                  f"({mass}: {what}) under dense, the splice and each selector at "
                                                  f"b = {AT:g}"))(
            lambda records, mass=mass: by_layer(records, mass, record))
    register_figure(f"{p}-attention", study.about(f"the question's attention on the evidence per layer under dense, "
                                                  f"the splice and each selector at b = {AT:g} (mass_mean; the "
                                                  f"tables' lines drawn)"))(
        lambda records: attention_figure(records, study))


for _study in STUDIES:
    _register(_study)
