"""RESULTS 8: the tables of 10.12's SmolLM2 study, from its record, as `analyse-10.12.sh RUN OTHER`
reads it.

Each table calls the function of the `kvwb summary` command the script runs: the record's own
pre-registered families on their measure over the budget grid, Holm within each (`tested_families`,
as `--preregistered`); the same contrasts on em at b = 0.2, read uncorrected, and amendment 1's B3
on contains (`contrast_family`, as `--contrast`); A1 here against the second setting
(`across_family`, as `--against`); per selector the share of the retrieved gap closed and its
evidence recall (`summarize`). How many examples a contrast separates each way is
`examples_behind`'s count (as `--read`). A record short of its manifest's n is refused: the
pre-registration reads no family at fewer than its n (200).
"""

from __future__ import annotations

import pandas as pd

from workbench.errors import RecordShortError, WorkbenchError
from workbench.results.cells import PValue, fmt
from workbench.results.registry import frame, register_table
from workbench.results.retrieval import SHARE_ROWS
from workbench.results.studies import _draws, _holm, gap_cell

RECORD = "study-10.12-mv1024-smollm2"
OTHER = "study-ruler-mk512-smollm2"  # the second setting of the test across settings (Gemma's grid picked none)
MEASURE = "retrieved"  # what the script's test across settings and its summary read
AT = 0.2  # the budget of the secondary em contrasts


def complete_run(records, name: str):
    """The record `name` read back, refused where it holds fewer examples than its manifest asked for."""
    run = records.run(name)
    asked, done = run.manifest.n, len(run.examples)
    if asked is None:
        raise WorkbenchError(f"{name}'s manifest names no n: its tables are read at the n its command asked for")
    if done < asked:
        raise RecordShortError(f"{name} holds {done} of its {asked} examples: its tables are read at n = {asked}")
    return run


def preregistration(run):
    """The record's own preregistration.json (`read_preregistration`), refused where it keeps none."""
    from workbench.experiments.families import read_preregistration

    pre = read_preregistration(run.folder)
    if pre is None:
        raise WorkbenchError(f"{run.folder.name} keeps no preregistration.json: it is not a pre-registered study")
    return pre


def named_contrasts(run, needed=()) -> dict[str, str]:
    """{name: "A:B@auc"} over the pre-registration's families, in order; each of `needed` must be named."""
    named = {name: text for family in preregistration(run).families.values() for name, text in family.items()}
    missing = [name for name in needed if name not in named]
    if missing:
        raise WorkbenchError(f"{run.folder.name}'s pre-registration names no {' or '.join(missing)}")
    return named


def _label(name: str, c) -> str:
    return f"{name} {c.a} vs {c.b}" + (f" (mean of {len(c.draws)} draws)" if c.draws else "")


def _difference(c):
    return fmt("{:+.3f} [{:+.3f}, {:+.3f}]", c.difference, c.low, c.high)


def each_way(run, text: str, measure: str, c):
    """Examples where A's value (an area at @auc) is higher / where B's is (`examples_behind`'s
    counts); against a coin, its draws beside them: how many separate, and each draw's p where not
    all do (as studies' `_draws`; an area's draws have no b / c)."""
    from workbench.experiments.behind import examples_behind

    behind = examples_behind(run, text, measure, k=0)
    k, n = c.draws_separating, len(c.draws)
    if not c.draws:
        return fmt("{} / {}", behind.a_higher, behind.b_higher)
    if k == n:
        return fmt("{} / {} ({} of {} draws separate)", behind.a_higher, behind.b_higher, k, n)
    listed = ", ".join("{}" for _ in c.draws)
    return fmt("{} / {} (draws: p = " + listed + "; {} of {} " + ("separates)" if k == 1 else "separate)"),
               behind.a_higher, behind.b_higher, *(PValue(d.p_value) for d in c.draws), k, n)


def _area_row(run, name: str, text: str, c, holm: bool) -> dict:
    """One contrast over the budget grid: its test, the examples it separates each way, p (and p
    Holm-adjusted where `holm`), both mean areas and A − B with its interval."""
    row = {"contrast": _label(name, c), "test": c.test.split(" (")[0],
           "A higher / B higher": each_way(run, text, c.measure, c), "p": fmt("{}", PValue(c.p_value))}
    if holm:
        row["p (Holm)"] = _holm(c.p_holm)
    return {**row, "area of A vs B": fmt("{:.3f} vs {:.3f}", c.rate_a, c.rate_b),
            "A − B [95% paired bootstrap]": _difference(c)}


@register_table("10.12-families", f"RESULTS 8 (10.12): the pre-registered families over the budget grid "
                                  f"(@auc), Holm within each ({RECORD})")
def families(records) -> pd.DataFrame:
    return families_table(records, RECORD)


def families_table(records, name: str) -> pd.DataFrame:
    """Record `name`'s pre-registered families on their measure over the budget grid, Holm within each."""
    from workbench.experiments.families import tested_families

    run = complete_run(records, name)
    pre = preregistration(run)
    rows = []
    for family, found in tested_families(run, pre.families, pre.measure).items():
        named = pre.families[family].items()
        rows += [_area_row(run, name, text, c, holm=True) for (name, text), c in zip(named, found)]
    return frame(rows)


@register_table("10.12-em", f"RESULTS 8 (10.12), secondary and uncorrected: the families' contrasts on em at "
                            f"b = {AT:g} ({RECORD})")
def em_contrasts(records) -> pd.DataFrame:
    return em_table(records, RECORD)


def em_table(records, name: str) -> pd.DataFrame:
    """Record `name`'s pre-registered contrasts on em at b = AT, uncorrected (exact McNemar b / c)."""
    from workbench.experiments.contrasts import contrast_family

    run = complete_run(records, name)
    named = named_contrasts(run)
    found = contrast_family(run, [text.replace("@auc", f"@{AT:g}") for text in named.values()], "em")
    return frame([{"contrast": _label(name, c), "test": c.test.split(" (")[0],
                   "b / c": _draws(c) if c.draws else fmt("{} / {}", c.b_count, c.c_count),
                   "p (uncorrected)": fmt("{}", PValue(c.p_value)),
                   "EM of A vs B": fmt("{:.3f} vs {:.3f}", c.rate_a, c.rate_b),
                   "A − B [95% paired bootstrap]": _difference(c)} for name, c in zip(named, found)])


@register_table("10.12-contains-b3", f"RESULTS 8 (10.12), amendment 1, secondary and uncorrected: B3 on "
                                     f"whole-word contains over the budget grid ({RECORD})")
def contains_b3(records) -> pd.DataFrame:
    from workbench.experiments.contrasts import contrast_family

    run = complete_run(records, RECORD)
    text = named_contrasts(run, ("B3",))["B3"]
    (c,) = contrast_family(run, [text], "contains")
    return frame([_area_row(run, "B3", text, c, holm=False)])


@register_table("10.12-across", f"RESULTS 8 (10.12): the one test across settings, A1 on {MEASURE} (@auc) in "
                                f"{RECORD} against {OTHER}")
def across(records) -> pd.DataFrame:
    from workbench.experiments.across import across_family

    run, other = complete_run(records, RECORD), complete_run(records, OTHER)
    (r,) = across_family(run, other, [named_contrasts(run, ("A1",))["A1"]], MEASURE)
    return frame([{"contrast": f"A1 {r.a} vs {r.b}", "n here / there": fmt("{} / {}", r.n_first, r.n_second),
                   "A − B here": fmt("{:+.3f}", r.effect_first), "A − B there": fmt("{:+.3f}", r.effect_second),
                   "difference [95% bootstrap]": fmt("{:+.3f} [{:+.3f}, {:+.3f}]", r.difference, r.low, r.high),
                   "test": r.test, "p": fmt("{}", PValue(r.p_value))}])


def share_rows(selectors) -> list[tuple[str, str]]:
    """(label, selector) of a run's selectors (its manifest's specs), the references left out:
    those of 10.13's table in its order and with its labels, then the others as the run labels them."""
    from workbench.selectors import parse_selector
    from workbench.selectors.registry import reference_selectors

    labels = [parse_selector(s).label for s in selectors]
    labels = [s for s in dict.fromkeys(labels) if s not in reference_selectors()]
    known = [(label, s) for label, s in SHARE_ROWS if s in labels]
    return known + [(f"`{s}`", s) for s in labels if s not in dict(SHARE_ROWS).values()]


@register_table("10.12-shares", f"RESULTS 8 (10.12): the share of the {MEASURE} gap closed per budget [paired "
                                f"bootstrap 95%] and the evidence recall per budget, per selector ({RECORD})")
def shares(records) -> pd.DataFrame:
    return shares_table(records, RECORD)


def shares_table(records, name: str) -> pd.DataFrame:
    """Per selector of record `name`: the share of the MEASURE gap closed and the evidence recall, per budget."""
    from workbench.experiments.evidence import evidence_recall_table

    run = complete_run(records, name)
    table = records.summary(name, MEASURE)
    budgets = sorted(table["budget"].unique())
    recall = evidence_recall_table(table)  # selector x budget: the pre-registration's "per budget"
    recall_header = "evidence recall, b = " + " / ".join(f"{b:g}" for b in recall.columns)
    rows = []
    for label, selector in share_rows(run.manifest.selectors):
        cells = table[table["selector"] == selector].set_index("budget")
        row = {"selector": label}
        for i, b in enumerate(budgets):
            row[f"b = {b:g}" if i == 0 else f"{b:g}"] = gap_cell(cells.loc[b])
        values = [recall.loc[selector, b] for b in recall.columns]
        rows.append({**row, recall_header: fmt(" / ".join("{:.3f}" for _ in values), *values)})
    return frame(rows)
