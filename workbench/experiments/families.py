"""Contrast families as a page shows them: the pre-registered one read from a run's folder, and
any family tested through `contrasts.contrast_family` (Holm within each family) as one table.

A pre-registration is `preregistration.json` beside the run's manifest (a record in
docs/records/ keeps it, and `keep.py restore` puts it back):

    {"source": "RESULTS 10.4", "measure": "em",
     "families": {"A": {"A1": "cadence-grad:cacheblend@0.2", "A2": "bcr:coin@0.2"}, "B": {...}}}

    fam = read_preregistration(run.folder)            # None where the run has none
    table = family_table(run, fam.families, fam.measure)
    tested = tested_families(run, fam.families, fam.measure)   # {family: [Contrast, ...]}
    shown = family_selectors(fam, labels)              # the run's selectors its contrasts name
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.areas import AUC
from workbench.experiments.contrasts import contrast_family, get_measure, parse_contrast, parse_family, resolve_coin
from workbench.runstore import SweepRun

PREREGISTRATION = "preregistration.json"
COLUMNS = ["family", "name", "a", "b", "at", "measure", "test", "n", "b_count", "c_count", "p_value", "p_holm",
           "rate_a", "rate_b", "difference", "low", "high", "draws", "draws_separating"]


@dataclass(frozen=True)
class Preregistration:
    """A run's pre-registered families: {family: {name: "A:B@budget"}}, the measure they test and
    where they were written."""

    families: dict
    measure: str
    source: str = ""

    @property
    def count(self) -> int:
        return sum(len(f) for f in self.families.values())


def read_preregistration(folder: str | Path) -> Preregistration | None:
    """The `preregistration.json` beside a run's manifest, checked (every contrast parsed, the
    measure known); None where there is none; a one-line error where it is malformed."""
    path = Path(folder) / PREREGISTRATION
    return parse_preregistration(path) if path.is_file() else None


def family_selectors(pre: Preregistration, labels) -> list[str]:
    """The selectors of `labels` (a run's, in its order) that `pre`'s contrasts name, A and B
    (`coin`: the coin matched to A)."""
    from workbench.selectors import parse_selector

    labels = list(dict.fromkeys(labels))
    named = set()
    for text in (t for family in pre.families.values() for t in family.values()):
        a, b, _ = parse_contrast(text, labels)
        named |= {a, f"coin:{parse_selector(a).label}" if b == "coin" else b}
    return [label for label in labels if label in named]


def place_preregistration(source: str | Path, out: str | Path, examples_done: int, selectors, budgets) -> Path:
    """Copy a pre-registration (as `read_preregistration` reads it) beside a run before its first
    example, byte for byte (`check_preregistration` says what is refused). The same file again (a
    resume) is accepted and left as it is."""
    from workbench.atomic import write_bytes

    data = check_preregistration(source, out, examples_done, selectors, budgets)
    target = Path(out) / PREREGISTRATION
    if not target.is_file():
        write_bytes(target, data)
    return target


def check_preregistration(source: str | Path, out: str | Path, examples_done: int, selectors, budgets) -> bytes:
    """The pre-registration's bytes, or a one-line refusal: a malformed file; a contrast naming a
    selector the run does not run or a budget off its grid; a run that already holds examples but
    no pre-registration (one written after results is not one); a run whose one differs."""
    from workbench.selectors import parse_selector

    source = Path(source)
    if not source.is_file():
        raise WorkbenchError(f"--preregistration {source}: no such file")
    pre = parse_preregistration(source)
    labels = [parse_selector(s).label for s in selectors]
    for family in pre.families.values():
        for text in family.values():
            a, b, budget = parse_family([text])[0]
            for name in (a, resolve_coin(a, b, labels)):
                if parse_selector(name).label not in labels:
                    raise WorkbenchError(f"{source}: {text!r} names {name!r}, which this run does not run "
                                         f"(selectors: {', '.join(labels)})")
            if budget != AUC and not any(math.isclose(budget, float(x)) for x in budgets):
                raise WorkbenchError(f"{source}: {text!r} tests budget {budget:g}, off the run's grid "
                                     f"({', '.join(f'{float(x):g}' for x in budgets)})")
    target = Path(out) / PREREGISTRATION
    data = source.read_bytes()
    if target.is_file():
        if target.read_bytes() != data:
            raise WorkbenchError(f"{target} already holds another pre-registration; a run keeps the one "
                                 "it started with (start a new run folder)")
    elif examples_done:
        raise WorkbenchError(f"{out} already holds {examples_done} example(s) and no pre-registration: "
                             "one written after results is not a pre-registration (start a new run folder)")
    return data


def parse_preregistration(path: str | Path) -> Preregistration:
    """A pre-registration file read and checked (see `read_preregistration`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WorkbenchError(f"{path} is not readable JSON ({err})") from None
    families = data.get("families") if isinstance(data, dict) else None
    if not isinstance(families, dict) or not families or not all(
            isinstance(f, dict) and f and all(isinstance(t, str) for t in f.values()) for f in families.values()):
        raise WorkbenchError(f"{path} holds no families: write {{\"families\": {{\"A\": {{\"A1\": \"X:Y@0.2\"}}}}}}")
    measure = str(data.get("measure", "em"))
    get_measure(measure)
    for family in families.values():
        parse_family(family.values())
    return Preregistration({str(k): {str(n): t for n, t in f.items()} for k, f in families.items()}, measure,
                           str(data.get("source", "")))


def _draws_text(c) -> str:
    """Each draw of a drawn control: b / c (a binary measure) or p, as BCR reports its seeds."""
    if not c.draws:
        return ""
    return ", ".join(f"{d.b_count}/{d.c_count}" if d.b_count is not None else f"p {d.p_value:.2g}" for d in c.draws)


def tested_families(run: SweepRun, families: dict, measure: str) -> dict[str, list]:
    """{family: its contrasts (`contrasts.Contrast`, in its order)} of {family: {name: "A:B@b"}},
    each family Holm-adjusted on its own."""
    return {family: contrast_family(run, list(named.values()), measure) for family, named in families.items()}


def family_table(run: SweepRun, families: dict, measure: str) -> pd.DataFrame:
    """One row per contrast of each family ({family: {name: "A:B@b"}}, Holm within each family):
    b / c, raw and Holm-adjusted p, both rates, the paired difference with its 95% interval, and
    against a drawn control each draw's b / c and how many draws separate at 0.05."""
    rows = []
    for family, found in tested_families(run, families, measure).items():
        for name, c in zip(families[family], found):
            rows.append({"family": family, "name": name, "a": c.a, "b": c.b, "at": c.at, "measure": c.measure,
                         "test": c.test, "n": c.n, "b_count": c.b_count, "c_count": c.c_count, "p_value": c.p_value,
                         "p_holm": c.p_holm, "rate_a": c.rate_a, "rate_b": c.rate_b, "difference": c.difference,
                         "low": c.low, "high": c.high, "draws": _draws_text(c),
                         "draws_separating": c.draws_separating if c.draws else math.nan})
    table = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("b_count", "c_count"):
        table[column] = table[column].astype("Int64")
    table.attrs["measure"] = measure
    return table


def _allowed(a: str, b: str, labels) -> bool:
    """Whether A:B is a contrast the run can test (a drawn control of another unit is refused)."""
    try:
        resolve_coin(a, b, labels)
    except WorkbenchError:
        return False
    return True


def suggested_family(labels, budgets) -> list[str]:
    """A family to start from where none is pre-registered: every selector against the default
    comparison (cacheblend, else random, else the splice `none`) and each matched coin against its
    selector, at the budget nearest 0.2."""
    from workbench.selectors import parse_selector
    from workbench.selectors.registry import comparison_reference, reference_selectors

    budgets = sorted(float(b) for b in budgets)
    if not budgets:
        return []
    at = min(budgets, key=lambda b: (abs(b - 0.2), b))
    labels = list(dict.fromkeys(labels))
    against = comparison_reference(labels) or ("none" if "none" in labels else None)  # else: the splice
    out = []
    for label in labels:
        try:
            spec = parse_selector(label)
        except WorkbenchError:
            continue
        if label in reference_selectors() or spec.info.drawn or spec.info.matched:
            continue
        if against and label != against and _allowed(label, against, labels):
            out.append(f"{label}:{against}@{at:g}")
        if f"coin:{label}" in labels:
            out.append(f"{label}:coin@{at:g}")
    return out
