"""RESULTS 10.6, 10.7, 10.9 and 10.11: the pre-registered studies' tables, from their records.

Each calls the code of the command the section names: `docs/records/tests-10.4.sh RUN` is
`kvwb summary RUN --measure M --contrast ...` per family (`contrasts.contrast_family`), and the
gap table is `kvwb summary RUN --measure em` (`summary.summarize`).
"""

from __future__ import annotations

import pandas as pd

from workbench.results.cells import PValue, fmt
from workbench.results.registry import frame, register_figure, register_table

# 10.4's families at b = 0.2, as `docs/records/tests-10.4.sh` gives them: (id, contrast, suffix in the
# primary table's label).
FAMILIES = {"A": (("A1", "cadence-grad:cacheblend@0.2", ""), ("A2", "bcr:coin@0.2", " (mean of {} draws)"),
                  ("A3", "cadence:cadence-grad@0.2", "")),
            "B": (("B1", "prophetkv:cadence-grad@0.2", ""), ("B2", "epic:cacheblend@0.2", ""),
                  ("B3", "relaxkv:prophetkv@0.2", " (the same rows, full context)"))}
SECONDARY = ("flip", "f1_to_dense", "dense_logprob_mean")
# The gap table's rows: selector -> its label there.
GAP_ROWS = {"random": "random ({} draws)", "cacheblend": "cacheblend", "relay": "relay", "densedev": "densedev",
            "cadence": "cadence (gated)", "cadence-grad": "cadence-grad", "bcr": "bcr (chunks)",
            "bcr:grow": "bcr:grow", "bcr:single": "bcr:single", "qattn": "qattn", "epic": "epic",
            "prophetkv": "prophetkv", "relaxkv": "relaxkv", "coin:bcr": "coin:bcr ({} draws)"}
# "Beside the papers": the selector, its label, and CADENCE's HotpotQA column (Llama-3.1-8B), as
# RESULTS copies it from the paper.
PAPER = (("CADENCE-Grad", "cadence-grad", "0.81"), ("gated CADENCE", "cadence", "0.81"),
         ("CacheBlend", "cacheblend", "0.04"), ("RelayCaching (`relay`)", "relay", "0.46"),
         ("DenseDev", "densedev", "0.54"))


def family(records, record: str, measure: str, families=None):
    """Both families' contrasts on `measure`, each family Holm-adjusted on its own (as tests-10.4.sh)."""
    from workbench.experiments.contrasts import contrast_family

    run = records.run(record)
    found = []
    for rows in (families or FAMILIES).values():
        found += list(zip(rows, contrast_family(run, [text for _, text, _ in rows], measure)))
    return found


def _holm(p: float):
    """p (Holm) as the primary table prints it: bold below 0.05."""
    return fmt("**{}**" if p < 0.05 else "{}", PValue(p))


def _draws(c) -> str:
    k, n = c.draws_separating, len(c.draws)
    if k == n:
        return fmt("– ({} of {} draws separate)", k, n)
    listed = ", ".join(f"{d.b_count}/{d.c_count}" for d in c.draws)
    return fmt("– (draws: " + listed + "; {} of {} " + ("separates)" if k == 1 else "separate)"), k, n)


def primary(records, record: str, families=None) -> pd.DataFrame:
    """The primary measure, EM at b = 0.2, Holm over each family's three (`families`: 10.4's)."""
    rows = []
    for (cid, _, suffix), c in family(records, record, "em", families):
        label = f"{cid} {c.a} vs {c.b}" + (suffix.format(len(c.draws)) if c.draws or "{}" not in suffix else "")
        rows.append({"contrast": label, "test": c.test.split(" (")[0],
                     "b / c": _draws(c) if c.draws else fmt("{} / {}", c.b_count, c.c_count),
                     "p": fmt("{}", PValue(c.p_value)), "p (Holm)": _holm(c.p_holm),
                     "EM of A vs B": fmt("{:.3f} vs {:.3f}", c.rate_a, c.rate_b),
                     "A − B [95% paired bootstrap]": fmt("{:+.3f} [{:+.3f}, {:+.3f}]", c.difference, c.low, c.high)})
    return frame(rows)


def secondary(records, record: str) -> pd.DataFrame:
    """The secondary measures: flips (rates, b / c, Holm p), F1 to dense and the dense answer's
    log-prob per token (A − B, Holm p)."""
    by = {m: family(records, record, m) for m in SECONDARY}
    rows = []
    for i, ((cid, _, _), flip) in enumerate(by["flip"]):
        if flip.draws:
            k = flip.draws_separating
            counts = fmt("– ({} of {})", k, len(flip.draws)) if k else "–"
        else:
            counts = fmt("{} / {}", flip.b_count, flip.c_count)
        f1, lp = by["f1_to_dense"][i][1], by["dense_logprob_mean"][i][1]
        rows.append({"contrast": f"{cid} {flip.a} vs {flip.b}",
                     "flips: A vs B, b / c, p (Holm)": fmt(f"{{:.3f}} vs {{:.3f}}, {counts}, {{}}", flip.rate_a,
                                                           flip.rate_b, PValue(flip.p_holm)),
                     "F1 to dense: A − B, p (Holm)": fmt("{:+.3f}, {}", f1.difference, PValue(f1.p_holm)),
                     "dense answer's log-prob per token: A − B, p (Holm)": fmt("{:+.3f}, {}", lp.difference,
                                                                              PValue(lp.p_holm))})
    return frame(rows)


def gap_cell(row) -> str:
    """A share of the gap closed with its paired bootstrap interval (the value alone where the
    interval is a point)."""
    g, low, high = row["gap_recovered"], row["gap_recovered_low"], row["gap_recovered_high"]
    return fmt("{:.2f}", g) if low == high else fmt("{:.2f} [{:.2f}, {:.2f}]", g, low, high)


def gap_table(records, record: str, selectors=None) -> pd.DataFrame:
    """The share of the EM gap closed, every selector and budget (`kvwb summary RUN --measure em`;
    `selectors`: label per selector, 10.4's by default)."""
    table = records.summary(record, "em")
    budgets = sorted(table["budget"].unique())
    rows = []
    for selector, label in (selectors or GAP_ROWS).items():
        cells = table[table["selector"] == selector].set_index("budget")
        draws = int(cells["draws"].max())
        row = {"selector": fmt(label, draws) if "{}" in label else label}
        for i, b in enumerate(budgets):
            row[f"b = {b:g}" if i == 0 else f"{b:g}"] = gap_cell(cells.loc[b])
        rows.append(row)
    return frame(rows)


def _gap_at(records, record: str, selector: str, budget: float = 0.2) -> str:
    table = records.summary(record, "em")
    return gap_cell(table[(table["selector"] == selector) & ((table["budget"] - budget).abs() < 1e-9)].iloc[0])


def papers(records, record: str, others: tuple[tuple[str, str], ...], setting: str) -> pd.DataFrame:
    """Beside the papers: the share of the EM gap closed at b = 0.2 here, in the earlier studies
    (`others`: record, column header), and CADENCE's HotpotQA column (copied from the paper)."""
    rows = []
    for label, selector, paper in PAPER:
        row = {"selector at b = 0.2": label, f"gap closed here ({setting})": _gap_at(records, record, selector)}
        for other, header in others:
            row[header] = _gap_at(records, other, selector)
        rows.append({**row, "CADENCE's HotpotQA column (Llama-3.1-8B)": paper})
    return frame(rows)


def _register(section: str, record: str, others: tuple[tuple[str, str], ...], setting: str) -> None:
    register_table(f"{section}-contrasts", f"RESULTS {section}: the primary measure's contrasts ({record})")(
        lambda records: primary(records, record))
    register_table(f"{section}-secondary", f"RESULTS {section}: the secondary measures ({record})")(
        lambda records: secondary(records, record))
    register_table(f"{section}-gap", f"RESULTS {section}: the share of the EM gap closed ({record})")(
        lambda records: gap_table(records, record))
    register_table(f"{section}-papers", f"RESULTS {section}: beside the papers at b = 0.2 ({record})")(
        lambda records: papers(records, record, others, setting))
    register_figure(f"{section}-gap", f"RESULTS {section}: the share of the EM gap closed against budget")(
        lambda records: gap_figure(records, record))


def gap_figure(records, record: str):
    """The figure `kvwb summary RUN --measure em --html DIR` writes as gap.html."""
    from workbench import plots

    return plots.gap_curve(records.summary(record, "em"), f"Share of the EM gap closed against budget ({record})")


_register("10.6", "study-ruler-mk512-smollm2", (),
          "SmolLM2-135M, RULER `niah_multikey`, 512 tokens, n = 200")
_register("10.7", "study-ruler-mk512-gemma3", (("study-ruler-mk512-smollm2", "SmolLM2-135M (10.6)"),),
          "Gemma 3 270M, RULER `niah_multikey`, 512 tokens, n = 200")
_register("10.11", "study-ruler-single-gemma3",
          (("study-ruler-mk512-gemma3", "Gemma 3 270M, `niah_multikey`, 512 tokens (10.7)"),
           ("study-ruler-mk512-smollm2", "SmolLM2-135M, `niah_multikey`, 512 tokens (10.6)")),
          "Gemma 3 270M, RULER `niah_single`, 2048 tokens, n = 200")


# 10.9: EPIC at 16 rows a passage (`kvwb summary RUN --measure em`), beside 10.4's runs at b = 0.2.
EPIC16 = (("SmolLM2-135M", "explore-epic16-mk512-smollm2", "study-ruler-mk512-smollm2"),
          ("Gemma 3 270M", "explore-epic16-mk512-gemma3", "study-ruler-mk512-gemma3"))


def _at(table, selector: str):
    return table[table["selector"] == selector].iloc[0]


@register_table("10.9-epic16", "RESULTS 10.9: EPIC at 16 rows a passage on both models, beside 10.4's runs")
def epic16(records) -> pd.DataFrame:
    rows = []
    for model, record, study in EPIC16:
        table, beside = records.summary(record, "em"), records.summary(study, "em")
        beside = beside[(beside["budget"] - 0.2).abs() < 1e-9]
        epic = _at(table, "epic")
        rows.append({"model": model,
                     "EM: splice / EPIC-16 / full": fmt("{:.3f} / {:.3f} / {:.3f}", _at(table, "none")["em"],
                                                        epic["em"], _at(table, "full")["em"]),
                     "gap closed by EPIC-16 [paired bootstrap 95%]": gap_cell(epic),
                     "flips": fmt("{:.3f}", epic["flip_rate"]), "F1 to dense": fmt("{:.3f}", epic["f1_to_dense"]),
                     "beside it in 10.4's run at b = 0.2 (81 rows), EM": fmt(
                         "EPIC {:.3f}, CacheBlend {:.3f}, CADENCE-Grad {:.3f}", _at(beside, "epic")["em"],
                         _at(beside, "cacheblend")["em"], _at(beside, "cadence-grad")["em"])})
    return frame(rows)
