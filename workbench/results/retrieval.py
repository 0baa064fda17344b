"""RESULTS 10.12 and 10.13: the retrieval measure's tables, from the records.

10.13 re-reads the three study records (`kvwb summary RUN --measure retrieved --contrast ...@auc`;
the dense-against-splice counts through `answerability_summary`, the function `kvwb answerability`
prints). 10.12's grid is read from `docs/records/grid-retrieved/`'s CSVs as they are when the table
is built (the grid grows while its queue runs), one row per kept setting in the queue's order.
"""

from __future__ import annotations

import pandas as pd

from workbench.results.cells import PValue, fmt
from workbench.results.registry import frame, register_table

RECORDS = (("Gemma 3 270M, `niah_single`, 2048 (10.11)", "study-ruler-single-gemma3"),
           ("Gemma 3 270M, `niah_multikey`, 512 (10.7)", "study-ruler-mk512-gemma3"),
           ("SmolLM2-135M, `niah_multikey`, 512 (10.6)", "study-ruler-mk512-smollm2"))
AUC_FAMILIES = ((("A1 CADENCE-Grad − CacheBlend", "cadence-grad:cacheblend@auc"),
                 ("A2 BCR − `coin:bcr`", "bcr:coin@auc"),
                 ("A3 gated CADENCE − CADENCE-Grad", "cadence:cadence-grad@auc")),
                (("B1 ProphetKV − CADENCE-Grad", "prophetkv:cadence-grad@auc"),
                 ("B2 EPIC − CacheBlend", "epic:cacheblend@auc"),
                 ("B3 RelaxKV − ProphetKV", "relaxkv:prophetkv@auc")))
AUC_COLUMNS = (("Gemma `niah_multikey` 512: A − B [95% CI], Holm p", "study-ruler-mk512-gemma3"),
               ("SmolLM2 `niah_multikey` 512", "study-ruler-mk512-smollm2"),
               ("Gemma `niah_single` 2048", "study-ruler-single-gemma3"))
SHARE_ROWS = (("CADENCE-Grad", "cadence-grad"), ("gated CADENCE", "cadence"), ("CacheBlend", "cacheblend"),
              ("RelayCaching", "relay"), ("DenseDev", "densedev"), ("BCR (chunks)", "bcr"), ("BCR grow", "bcr:grow"),
              ("BCR single", "bcr:single"), ("QAttn", "qattn"), ("EPIC", "epic"), ("ProphetKV", "prophetkv"),
              ("RelaxKV", "relaxkv"), ("random rows", "random"), ("`coin:bcr`", "coin:bcr"))


@register_table("10.13-splice", "RESULTS 10.13: dense against the splice per study record, EM and retrieved")
def splice_table(records) -> pd.DataFrame:
    from workbench.experiments.answerability import answerability_summary

    rows = []
    for label, record in RECORDS:
        ex = records.run(record).examples
        em, got = answerability_summary(ex, "em"), answerability_summary(ex, "retrieved")
        lost = ex[(ex["dense_em"] == 1) & (ex["spliced_em"] == 0)]
        named = int((lost["spliced_retrieved"] == 1).sum())
        ran = int(lost["spliced_ran_on"].astype(bool).sum())
        rows.append({"record (RESULTS)": label, "dense EM": fmt("{:.3f}", em["dense_em"]),
                     "splice EM": fmt("{:.3f}", em["spliced_em"]), "b / c": fmt("{} / {}", em["b"], em["c"]),
                     "dense retrieved": fmt("{:.3f}", got["dense_em"]),
                     "splice retrieved": fmt("{:.3f}", got["spliced_em"]),
                     "b / c (retrieved)": (fmt("{} / {} (p = {})", got["b"], got["c"], PValue(got["p"]))
                                           if got["b"] + got["c"] else fmt("{} / {}", got["b"], got["c"])),
                     "lost EMs whose splice answer names the gold": fmt("{} of {}", named, len(lost)),
                     "… that ran on past dense's": fmt("{} of {}", ran, len(lost))})
    return frame(rows)


def _auc_cell(c) -> str:
    """A − B of the areas with its interval and Holm p; a contrast whose areas never differ: 0."""
    if c.difference == 0 and c.low == 0 and c.high == 0:
        return "0 (no difference)"
    suffix = f" ({c.draws_separating} of {len(c.draws)} draws)" if c.draws else ""
    return fmt("{:+.3f} [{:+.3f}, {:+.3f}], {}" + suffix, c.difference, c.low, c.high, PValue(c.p_holm))


@register_table("10.13-families", "RESULTS 10.13: 10.4's families re-read on retrieved over the budget grid (@auc)")
def auc_families(records) -> pd.DataFrame:
    from workbench.experiments.contrasts import contrast_family

    found = {record: [c for fam in AUC_FAMILIES for c in contrast_family(
        records.run(record), [text for _, text in fam], "retrieved")] for _, record in AUC_COLUMNS}
    labels = [label for fam in AUC_FAMILIES for label, _ in fam]
    return frame([{"contrast": label, **{header: _auc_cell(found[record][i]) for header, record in AUC_COLUMNS}}
                  for i, label in enumerate(labels)])


@register_table("10.13-shares", "RESULTS 10.13: the share of the retrieval gap closed per budget")
def retrieval_shares(records) -> pd.DataFrame:
    rows = []
    columns = (("Gemma `niah_multikey` 512: b = 0.05 / 0.1 / 0.2 / 0.3 / 0.5", "study-ruler-mk512-gemma3"),
               ("SmolLM2 `niah_multikey` 512", "study-ruler-mk512-smollm2"))
    for label, selector in SHARE_ROWS:
        row = {"selector": label}
        for header, record in columns:
            table = records.summary(record, "retrieved")
            shares = table[table["selector"] == selector].sort_values("budget")["gap_recovered"]
            row[header] = fmt(" / ".join("{:.2f}" for _ in shares), *shares)
        rows.append(row)
    return frame(rows)


# 10.12's queue, in its order (`docs/records/grid-retrieved.sh`): CSV stem -> (model, setting).
MODELS = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}
QUEUE = ([(m, f"{t}-{n}") for n in (512, 1024, 2048) for m in MODELS
          for t in ("niah_single", "niah_multikey", "niah_multivalue", "variable_tracking")]
         + [(m, f"hotpotqa-{p}") for m in MODELS for p in ("gold", "gold+2", "all")])
RULE_DENSE, RULE_GAP = 0.6, 0.2  # 10.12's rule: dense retrieved >= 0.6, the splice at least 0.2 below
TOLERANCE = 1e-9  # a rate of 30 examples on the rule's edge (6 / 30 as 0.19999...) meets it


def _qualifies(got: dict) -> bool:
    """10.12's rule on one setting's `answerability_summary(..., "retrieved")`."""
    return got["dense_em"] >= RULE_DENSE - TOLERANCE and got["gap"] >= RULE_GAP - TOLERANCE


@register_table("10.12-grid", "RESULTS 10.12: the grid's settings measured so far, under the corrected rule")
def grid(records) -> pd.DataFrame:
    from workbench.experiments.answerability import answerability_summary

    kept = records.csvs("grid-retrieved")
    unknown = sorted(set(kept) - {f"{m}-{s}" for m, s in QUEUE})
    if unknown:
        from workbench.errors import WorkbenchError

        raise WorkbenchError(f"grid-retrieved holds settings outside 10.12's queue: {', '.join(unknown)}")
    rows = []
    for model, setting in QUEUE:
        table = kept.get(f"{model}-{setting}")
        if table is None:
            continue
        em, got = answerability_summary(table, "em"), answerability_summary(table, "retrieved")
        test = (fmt("{} / {}, p = {}", got["b"], got["c"], PValue(got["p"])) if got["b"] is not None
                else fmt("sign-flip p = {}", PValue(got["p"])))
        qualifies = _qualifies(got)
        rows.append({"model": MODELS[model], "setting": f"`{setting}`",
                     "median tokens": fmt("{:.0f}", got["median_tokens"]),
                     "dense EM": fmt("{:.3f}", em["dense_em"]), "splice EM": fmt("{:.3f}", em["spliced_em"]),
                     "b / c": fmt("{} / {}", em["b"], em["c"]),
                     "dense retrieved [95%]": fmt("{:.3f} [{:.3f}, {:.3f}]", got["dense_em"], *got["dense_low_high"]),
                     "splice retrieved": fmt("{:.3f}", got["spliced_em"]), "gap": fmt("{:+.3f}", got["gap"]),
                     "test": test, "splice ran on": fmt("{:.2f}", got["ran_on"]),
                     "qualifies": "yes" if qualifies else "no"})
    return frame(rows)



def _kind(setting: str) -> str:
    return "HotpotQA" if setting.startswith("hotpotqa-") else "RULER"


def _rule_order(setting: str) -> tuple:
    """10.12's tie order: RULER the shorter length, then the task order; HotpotQA fewer passages."""
    if _kind(setting) == "HotpotQA":
        return (("gold", "gold+2", "all").index(setting.removeprefix("hotpotqa-")),)
    task, length = setting.rsplit("-", 1)
    return int(length), ("niah_single", "niah_multikey", "niah_multivalue", "variable_tracking").index(task)


@register_table("10.12-picks", "RESULTS 10.12: the rule's pick per model and kind, once all of its settings are kept")
def picks(records) -> pd.DataFrame:
    """Per model and kind (RULER, HotpotQA): the settings kept of the queue's, those that qualify, and
    the rule's pick (the largest gap; ties as `_rule_order`), given only when every setting of that
    model and kind is measured; where none qualifies, "none qualifies: not run"."""
    from workbench.experiments.answerability import answerability_summary

    kept = records.csvs("grid-retrieved")
    rows = []
    for model, name in MODELS.items():
        for kind in ("RULER", "HotpotQA"):
            queue = [s for m, s in QUEUE if m == model and _kind(s) == kind]
            measured = {s: answerability_summary(kept[f"{model}-{s}"], "retrieved") for s in queue
                        if f"{model}-{s}" in kept}
            gaps = {s: got["gap"] for s, got in measured.items() if _qualifies(got)}
            if len(measured) < len(queue):
                pick = fmt("not yet: {} of {} settings unmeasured", len(queue) - len(measured), len(queue))
            elif not gaps:
                pick = "none qualifies: not run"
            else:
                best = min(gaps, key=lambda s: (-round(gaps[s], 9), _rule_order(s)))
                pick = fmt(f"`{best}` (gap {{:+.3f}})", gaps[best])
            rows.append({"model": name, "kind": kind, "settings kept": fmt("{} of {}", len(measured), len(queue)),
                         "qualifying so far": ", ".join(f"`{s}` ({gaps[s]:+.3f})" for s in sorted(gaps, key=_rule_order))
                         or "none", "pick": pick})
    return frame(rows)
