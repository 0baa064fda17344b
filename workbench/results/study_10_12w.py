"""RESULTS 8: the tables of 10.12w, SmolLM2's 10.12 record scored on the whole answer, beside the
first-line record of the same examples, as `docs/records/analyse-10.12w.sh RUN FIRST` reads them.

The pre-registration (docs/results-log/2026-12-06-10.12w-whole-answer-preregistration.md) checks the
pairing first (`10.12w-pairing`: both records' shared cells repaired the same rows), then tests the
first record's families on the whole answers (`10.12w-families`, as `--preregistered`) and reads beside
the first record, descriptive: dense's and the splice's `retrieved` and the gap under each rule
(`10.12w-rules`), each contrast's estimate under each rule (`10.12w-both-rules`), each selector's
share of the gap closed per budget (`10.12w-shares`), the share of cells whose whole answer names more
than its first line (`10.12w-first-lines`); secondary, uncorrected, em at b = 0.2 (`10.12w-em`) and the
answers' lengths and run-ons (`10.12w-lengths`). Each refuses either record short of its n (200).
"""

from __future__ import annotations

import pandas as pd

from workbench.errors import TableRefusedError, WorkbenchError
from workbench.results.cells import fmt
from workbench.results.registry import frame, register_table
from workbench.results.studies import _holm
from workbench.results.study_10_12 import (
    _difference, _label, complete_run, em_table, families_table, preregistration, shares_table,
)
from workbench.results.study_10_12 import RECORD as FIRST

RECORD = "study-10.12w-mv1024-smollm2"
MEASURE = "retrieved"
AT = 0.2  # the budget of the first-line reading and of the secondary em contrasts
RULES = {FIRST: "first line", RECORD: "whole answer"}
REFERENCES = {"dense": "dense", "splice": "spliced"}  # label: the examples table's prefix


def _paired(records):
    """Both records, complete, and their pairing (`experiments.answer_lines.pairing`)."""
    from workbench.experiments.answer_lines import pairing

    run, first = complete_run(records, RECORD), complete_run(records, FIRST)
    return run, first, pairing(run, first)


def _holds(paired) -> bool:
    return paired["shared"] > 0 and paired["shared"] == paired["expected"] and paired["differ"].empty


def paired_runs(records):
    """Both records, complete; refused where the pairing is broken (the entry reads nothing then)."""
    run, first, paired = _paired(records)
    if not _holds(paired):
        raise TableRefusedError(f"the pairing of {RECORD} with {FIRST} is broken ({paired['shared']} of "
                                f"{paired['expected']} cells shared, {len(paired['differ'])} repaired other rows): "
                                "its pre-registration reads nothing else")
    return run, first, paired


def _after_pairing(records, build) -> pd.DataFrame:
    """`build(records, RECORD)`, one of `study_10_12`'s tables of a record, refused on a broken pairing."""
    paired_runs(records)
    return build(records, RECORD)


def _same_first_lines(run, first, side: str) -> tuple[int, int]:
    """Examples whose `side` answer's first line here is the first record's answer, of those both hold."""
    from workbench.tasks.metrics import first_line

    here = dict(zip(run.examples["example_id"].astype(str), run.examples[f"{side}_answer"]))
    there = dict(zip(first.examples["example_id"].astype(str), first.examples[f"{side}_answer"]))
    both = [i for i in here if i in there]
    return sum(first_line(str(here[i])) == first_line(str(there[i])) for i in both), len(both)


def _plain(text) -> str:
    """A name set into a `fmt` template as text (its braces doubled)."""
    return str(text).replace("{", "{{").replace("}", "}}")


SHOWN_CELLS = 5  # differing cells listed in the pairing table, the rest counted


@register_table("10.12w-pairing", f"RESULTS 8 (10.12w): the check before any reading, both records' shared cells "
                                  f"repaired the same rows ({RECORD} against {FIRST}); shown whether it holds or not")
def pairing_check(records) -> pd.DataFrame:
    run, first, paired = _paired(records)
    differ = paired["differ"]
    shown = differ.head(SHOWN_CELLS)
    template = "{}" + "".join(  # a cell's names in the text, its numbers kept by `fmt`
        (": " if i == 0 else "; ") + f"example {_plain(r.example_id)} {_plain(r.selector)} b = {{:g}}: rows {{}} / {{}}, "
        "recall {:.4f} / {:.4f}" for i, r in enumerate(shown.itertuples()))
    values = [len(differ)] + [v for r in shown.itertuples() for v in (r.budget, r.n_recomputed, r.n_recomputed_other,
                                                                      r.evidence_recall, r.evidence_recall_other)]
    more = f" (+{len(differ) - SHOWN_CELLS} more)" if len(differ) > SHOWN_CELLS else ""
    dense, splice = _same_first_lines(run, first, "dense"), _same_first_lines(run, first, "spliced")
    return frame([{"check": "holds" if _holds(paired) else "broken",
                   "cells shared / expected": fmt("{} / {}", paired["shared"], paired["expected"]),
                   "cells whose rows differ": fmt(template + more, *values),
                   "cells: first line here is the first record's answer": fmt("{:.4f}", paired["same_first_line"]),
                   "dense / splice: the same first line": fmt("{} / {} and {} / {}", *dense, *splice)}])


@register_table("10.12w-families", f"RESULTS 8 (10.12w): the first record's families on {MEASURE} of the whole "
                                  f"answer over the budget grid (@auc), Holm within each ({RECORD})")
def families(records) -> pd.DataFrame:
    return _after_pairing(records, families_table)


@register_table("10.12w-rules", f"RESULTS 8 (10.12w): dense's and the splice's {MEASURE} and the gap, under the "
                                f"first-line rule ({FIRST}) and the whole answer ({RECORD})")
def rules(records) -> pd.DataFrame:
    paired_runs(records)
    rows = []
    for name, rule in RULES.items():
        examples = complete_run(records, name).examples
        dense, splice = examples["dense_retrieved"].astype(float), examples["spliced_retrieved"].astype(float)
        rows.append({"answers scored": f"{rule} (`{name}`)", "n": fmt("{}", len(examples)),
                     "dense": fmt("{:.3f}", dense.mean()), "splice": fmt("{:.3f}", splice.mean()),
                     "gap": fmt("{:+.3f}", dense.mean() - splice.mean()),
                     "dense higher / splice higher": fmt("{} / {}", int((dense > splice).sum()),
                                                         int((splice > dense).sum()))})
    return frame(rows)


@register_table("10.12w-both-rules", f"RESULTS 8 (10.12w): each contrast's A − B over the budget grid (@auc) on "
                                     f"{MEASURE}, under the first-line rule and the whole answer")
def both_rules(records) -> pd.DataFrame:
    from workbench.experiments.families import tested_families

    paired_runs(records)
    found = {}
    for name in RULES:
        run = complete_run(records, name)
        pre = preregistration(run)
        tested = tested_families(run, pre.families, MEASURE)
        found[name] = {contrast: c for family, results in tested.items()
                       for contrast, c in zip(pre.families[family], results)}
    rows = []
    for contrast, whole in found[RECORD].items():
        first = found[FIRST].get(contrast)
        if first is None:
            raise WorkbenchError(f"{FIRST}'s pre-registration names no {contrast}: the two rules are not the same tests")
        rows.append({"contrast": _label(contrast, whole), "first line: A − B [95%]": _difference(first),
                     "whole answer: A − B [95%]": _difference(whole),
                     "whole answer: p (Holm)": _holm(whole.p_holm)})
    return frame(rows)


@register_table("10.12w-shares", f"RESULTS 8 (10.12w): the share of the {MEASURE} gap (whole answers) closed per "
                                 f"budget [paired bootstrap 95%] and the evidence recall, per selector ({RECORD})")
def shares(records) -> pd.DataFrame:
    return _after_pairing(records, shares_table)


def _per_budget(values) -> object:
    return fmt(" / ".join("{:.3f}" for _ in values), *values)


@register_table("10.12w-first-lines", f"RESULTS 8 (10.12w): {MEASURE} of the first line and of the whole answer at "
                                      f"b = {AT:g}, and the share of cells whose whole answer names more, per budget")
def first_lines(records) -> pd.DataFrame:
    from workbench.experiments.answer_lines import first_line_table

    run, _, _ = paired_runs(records)
    table = first_line_table(run)
    budgets = sorted(b for b in table["budget"].dropna().unique())
    more_header = "whole names more, b = " + " / ".join(f"{b:g}" for b in budgets)
    rows = []
    for label in REFERENCES:
        ref = table[table["selector"] == label].iloc[0]
        rows.append({"selector": label,
                     f"first line (cells at b = {AT:g})": fmt("{:.3f} (no budget)", ref["retrieved_first_line"]),
                     f"whole (cells at b = {AT:g})": fmt("{:.3f} (no budget)", ref["retrieved_whole"]),
                     more_header: fmt("{:.3f} (every budget)", ref["share_more"])})
    for selector in dict.fromkeys(s for s in table["selector"] if s not in REFERENCES and s not in ("none", "full")):
        cells = table[table["selector"] == selector].set_index("budget")
        at = cells.loc[AT]
        rows.append({"selector": selector, f"first line (cells at b = {AT:g})": fmt("{:.3f}", at["retrieved_first_line"]),
                     f"whole (cells at b = {AT:g})": fmt("{:.3f}", at["retrieved_whole"]),
                     more_header: _per_budget([cells.loc[b, "share_more"] for b in budgets])})
    return frame(rows)


@register_table("10.12w-em", f"RESULTS 8 (10.12w), secondary and uncorrected: the families' contrasts on em of the "
                             f"whole answer at b = {AT:g} ({RECORD})")
def em_contrasts(records) -> pd.DataFrame:
    return _after_pairing(records, em_table)


@register_table("10.12w-lengths", f"RESULTS 8 (10.12w), secondary: the whole answers' mean length in tokens and "
                                  f"the share that run on past dense's, per selector and budget ({RECORD})")
def lengths(records) -> pd.DataFrame:
    run, _, _ = paired_runs(records)
    examples, cells = run.examples, run.outcomes
    budgets = sorted(cells["budget"].dropna().unique())
    span = " / ".join(f"{b:g}" for b in budgets)
    rows = [{"selector": "dense",
             f"answer tokens (cells at b = {span})": fmt("{:.2f} (no budget)", examples["dense_answer_tokens"].mean()),
             f"ran on (cells at b = {span})": fmt("–")},
            {"selector": "splice",
             f"answer tokens (cells at b = {span})": fmt("{:.2f} (no budget)", examples["spliced_answer_tokens"].mean()),
             f"ran on (cells at b = {span})": fmt("{:.3f} (no budget)", examples["spliced_ran_on"].astype(float).mean())}]
    for selector in dict.fromkeys(s for s in cells["selector"] if s not in ("none", "full")):
        by = cells[cells["selector"] == selector].groupby("budget")
        tokens, ran_on = by["answer_tokens"].mean(), by["ran_on"].mean()
        rows.append({"selector": selector,
                     f"answer tokens (cells at b = {span})": fmt(" / ".join("{:.2f}" for _ in budgets), *tokens.loc[budgets]),
                     f"ran on (cells at b = {span})": _per_budget(list(ran_on.loc[budgets].astype(float)))})
    return frame(rows)
