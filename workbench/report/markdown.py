"""Text renderings of results for the CLI and the docs: markdown tables of a sweep's summary
and of the unit-of-choice curve."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from workbench.experiments.answer_lines import whole_answers
from workbench.experiments.answer_sources import CREDIT_WORDS, RECITE_WORDS, SOURCES
from workbench.experiments.behind import behind_sentence
from workbench.experiments.blank_answers import blank_sentence, blank_table
from workbench.experiments.gap_anatomy import anatomy_grid, anatomy_sentence, cell_anatomy, splice_anatomy
from workbench.experiments.summary import attribution_table, run_caveats
from workbench.runstore import SweepRun
from workbench.runstore.segments import hardware_sentence


def markdown_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a markdown table (floats with three decimals; a "|" inside a cell escaped)."""
    def cell(v):
        if v is pd.NA:
            return "–"
        return f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", "\\|")
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    return "\n".join([head, rule] + ["| " + " | ".join(cell(v) for v in row) + " |"
                                     for row in frame.itertuples(index=False)])


def sweep_summary_markdown(run: SweepRun, table: pd.DataFrame, targets: pd.DataFrame) -> str:
    """A sweep's summary (`experiments.summary.summarize`) as a markdown report: header facts,
    the main table, the rows-to-target table, and the attribution check when the run has it."""
    ex = run.examples
    unfinished, whole = unfinished_note(run), whole_answers(run)
    lines = [
        (f"run {run.folder}: {len(ex)}{f' of {run.manifest.n}' if unfinished and run.manifest.n else ''} examples ({run.n_failed} "
         f"failed){f'; {unfinished}' if unfinished else ''}, model {run.manifest.model_name}, "
         f"data set {run.manifest.dataset}"
         + ("; answers scored whole (--no-stop-at-newline: decoded past the first line break, as RULER reads "
            "a prediction)" if whole else "")),
        (f"dense EM {ex['dense_em'].mean():.3f}, splice EM {ex['spliced_em'].mean():.3f}, "
         f"splice flips against dense on {int(ex['splice_flip'].sum())} of {len(ex)}"
         + (f"; answer contained: dense {ex['dense_contains'].mean():.3f}, splice {ex['spliced_contains'].mean():.3f}"
            if "dense_contains" in ex else "")),
        *_caveats(ex),
        "",
    ]
    reference = table.attrs.get("reference")
    measure = table.attrs.get("measure", "em")
    anatomy = anatomy_sentence(splice_anatomy(ex), hint=measure == "em")
    if anatomy:
        lines.insert(2, anatomy)
    machines = hardware_sentence(run.manifest.segments)
    if machines:
        lines.insert(1, machines)
    blank = blank_sentence(blank_table(run.outcomes, ex), whole)
    if blank:
        lines.insert(2, blank)
    if measure != "em" and f"dense_{measure}" in ex:
        dense, splice = (ex[f"{side}_{measure}"].astype(float).mean() for side in ("dense", "spliced"))
        lines.insert(2, f"the gap and the tests read {measure}: dense {dense:.3f}, splice {splice:.3f}")
    shown = table.assign(
        em=[f"{e:.2f} [{lo:.2f}, {hi:.2f}]" for e, lo, hi in zip(table.em, table.em_low, table.em_high)],
        flips=[f"{f:.2f} [{lo:.2f}, {hi:.2f}]" for f, lo, hi in zip(table.flip_rate, table.flip_low, table.flip_high)],
        vs_ref=[_split(b, c, p) if reference else "–" for b, c, p in
                zip(table.ref_b, table.ref_c, table.ref_p_holm.fillna(1.0))],
        vs_dense=[_split(b, c, p) for b, c, p in zip(table.dense_b, table.dense_c, table.dense_p_holm.fillna(1.0))],
        gap_recovered=[_with_interval(g, lo, hi) for g, lo, hi in
                       zip(table.gap_recovered, table.gap_recovered_low, table.gap_recovered_high)],
    )
    columns = ["budget", "selector", "flips", "f1_to_dense", "first_token_agree", "em", "f1", "contains",
               *[c for c in ("retrieved", "ran_on", "answer_tokens") if c in shown and shown[c].notna().any()],
               "gap_recovered", "rows_per_example", "vs_ref", "vs_dense"]
    lines.append(markdown_table(shown[[c for c in columns if c in shown.columns]]))
    gap, tested = ("EM", "exact match") if measure == "em" else (measure, measure)
    drawn = table.loc[table["draws"] > 1, "selector"].unique() if "draws" in table else []
    lines += ["", f"flips: the share of outputs changed against dense (the {'whole answer' if whole else 'first line'} "
              "differs after SQuAD normalisation; it needs no gold); beside it, graded: f1_to_dense (token F1 to the dense answer) and "
              "first_token_agree (the first answer token is dense's). "
              "em, f1 and contains score against gold (contains: an accepted answer appears in the answer). "
              f"gap_recovered: the share of the dense-vs-splice {gap} gap closed, with a paired bootstrap interval "
              "over examples ('–' where dense and the splice score alike). "
              f"McNemar b/c on {tested}: b = the selector right where the other is wrong; p Holm-corrected "
              "within each budget over the whole family. "
              + (f"vs_ref compares against {reference}. " if reference else
                 "No reference selector (cacheblend or random) is in this run: the comparison against a "
                 "reference is left out. ")
              + (f"{', '.join(drawn)}: the mean over {int(table['draws'].max())} draws per example, its intervals "
                 "bootstrapped over examples and its tests exact sign-flip tests on those means (no b/c: they "
                 "belong to one draw; `kvwb summary --contrast` gives each draw's)." if len(drawn) else ""),
              "", markdown_table(targets.astype(object).where(targets.notna(), "not reached")),
              "rows_to_*: 'not reached' where no budget of the run reaches the target."]
    cells = cell_anatomy(run.outcomes, ex)
    if not cells.empty:
        lines += ["", "What each answer's lost exact matches are (against dense, per budget): lost: lost the gold (those "
                  "that ended at once, an end of turn first, beside it where any did) / "
                  "named it only inside a longer word (RULER's substring match counts it) / named it and ran on "
                  "past dense's answer / named it and ended otherwise"
                  + (" (ran on read from the text: this run's cells predate the recorded run-on)"
                     if cells.attrs.get("ran_on_rule") != "recorded" else "")
                  + "; drawn controls: mean per draw.", "", markdown_table(anatomy_grid(cells))]
    atp = attribution_table(run)
    if not atp.empty:
        worse = int((atp["rho_k"] < atp["rho_v"]).sum())
        lines += ["", (f"Attribution patching vs actual patching (Spearman rho over {len(atp)} examples): "
                       f"median K+V {atp['rho_kv'].median():.2f}, K only {atp['rho_k'].median():.2f}, "
                       f"V only {atp['rho_v'].median():.2f}; keys tracked worse than values in {worse} of "
                       f"{len(atp)}.")]
    return "\n".join(lines)


def unfinished_note(run: SweepRun) -> str | None:
    """Why a sweep's tables are partial, in words, or None for a finished run: its manifest is not
    complete, or it holds fewer examples (done and failed) than its args' n. A record kept in git
    (a folder beside `keep.py`) is restored to runs/ before its command resumes it."""
    status, n = run.manifest.status, run.manifest.n
    if status == "complete" and (n is None or len(run.examples) + run.n_failed >= n):
        return None
    folder = Path(run.folder)
    resume = (f"`docs/records/keep.py restore {folder.name}` brings it back to runs/, where its command resumes it"
              if (folder.parent / "keep.py").is_file() else "its command resumes it")  # a record kept in git
    if status == "complete":
        return f"the run completed short of its n: {resume}"
    state = "still running (or ended without closing its manifest)" if status == "running" else status
    return f"the run is {state}: {resume}"


def _caveats(ex: pd.DataFrame) -> list[str]:
    """The header's warnings, a line each: examples computed under hooks, examples whose records held
    fewer distractors than `gold+K` asked (examples.parquet's `hooks` and `distractors_short`)."""
    lines, found = [], run_caveats(ex)
    if "hooked_examples" in found:
        lines.append(f"HOOKED: {found['hooked_examples']} of {len(ex)} examples were computed under hooks "
                     f"({found['hooks']}): not an unmodified model's diagnosis")
    if "distractors_short_examples" in found:
        lines.append(f"{found['distractors_short_examples']} of {len(ex)} examples had fewer distractors than the "
                     f"passage setting asks (up to {found['distractors_short_max']} fewer): their records hold "
                     f"fewer, and each kept those it had")
    return lines


def _with_interval(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return "–"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:.2f}"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def gap_auc_markdown(auc: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The readings over the whole budget grid (`experiments.gap_auc`): the share of the gap closed
    as an area, and the rows needed to reach a share of dense, each with its interval."""
    measure, grid, share = auc.attrs.get("measure", "em"), auc.attrs.get("grid", ()), rows.attrs.get("share", 0.9)
    span = f"{min(grid):g}-{max(grid):g}" if grid else "the run's budgets"
    area = auc.assign(gap_auc=[_with_interval(g, lo, hi) for g, lo, hi in zip(auc.auc, auc.auc_low, auc.auc_high)])
    needed = rows.assign(**{f"rows_to_{share:g}_dense_{measure}": [
        _rows_interval(r, lo, hi) for r, lo, hi in zip(rows.rows, rows.rows_low, rows.rows_high)]})
    return "\n".join([
        f"Over the budget grid ({', '.join(f'{b:g}' for b in grid)}), on {measure}:", "",
        markdown_table(area[["selector", "n", "area", "gap_auc"]]), "",
        markdown_table(needed[["selector", "n", f"rows_to_{share:g}_dense_{measure}"]]), "",
        (f"gap_auc: the share of the dense-vs-splice {measure} gap closed by the area under the curve over "
         f"{span}: per example the trapezoid area of {measure} over the run's budgets divided by their span "
         "(area: its mean; a drawn control's draws averaged at each budget first), then (area - splice) / "
         "(dense - splice), with a 95% paired bootstrap interval over examples ('–' without a gap). "
         f"rows_to_{share:g}_dense_{measure}: the fewest rows recomputed per example (a budget's mean) at which "
         f"the mean {measure} reaches {share:g} of dense's, with a 95% percentile interval resampling examples "
         "('not reached' where no budget of the grid does, in the estimate or in that share of resamples)."),
    ])


def _rows_interval(value: float, low: float, high: float) -> str:
    def text(v):
        return "not reached" if math.isinf(v) else f"{v:.1f}"
    if math.isnan(low):  # fewer than two examples: no interval
        return "–" if math.isnan(value) else text(value)
    return f"{text(value)} [{text(low)}, {text(high)}]"


def curve_summary_markdown(summary: pd.DataFrame) -> str:
    """The unit-of-choice curve's summary (one row per unit) laid out like BCR's Table 8."""
    header = ("| unit | budget | matched | informed | random | gap | gap / no-repair | "
              "prompts won (p) | no-repair |")
    lines = [header, "|" + "---|" * 9]
    for r in summary.itertuples(index=False):
        p = "n/a" if math.isnan(r.p_value) else (f"{r.p_value:.2f}" if r.p_value >= 0.01 else f"{r.p_value:.1e}")
        share = (f"{r.budget_share:.1%}" if r.budget_share_max - r.budget_share_min < 5e-4
                 else f"{r.budget_share:.1%} ({r.budget_share_min:.1%}-{r.budget_share_max:.1%})")
        lines.append(
            f"| {r.unit} | {share} | {'yes' if r.budget_matched else 'no'} | {r.informed_error:.4f} | "
            f"{r.random_error:.4f} | {r.gap:+.4f} | {r.gap_share:+.1%} | {r.prompts_won}/{r.n_prompts} ({p}) | "
            f"{r.unrepaired_error:.4f} |")
    return "\n".join(lines)


def _split(b, c, p) -> str:
    """A paired test as `b/c p=...`, or `p=...` alone where it has no McNemar split (a coin)."""
    return f"p={p:.3g}" if pd.isna(b) else f"{b}/{c} p={p:.3g}"


def contrasts_markdown(contrasts) -> str:
    """Pre-registered contrasts (`experiments.contrasts.Contrast`) as a markdown table, raw and
    Holm-adjusted p, and for a contrast against a drawn coin one line per draw."""
    def counts(b, c) -> str:
        return "–" if b is None else f"{b}/{c}"

    rows = [{"contrast": f"{c.a} vs {c.b}", "budget": c.at if isinstance(c.budget, str) else c.budget,
             "measure": c.measure, "n": c.n,
             "test": c.test, "b/c": counts(c.b_count, c.c_count), "p": f"{c.p_value:.4g}",
             "p (Holm)": f"{c.p_holm:.4g}", "A": f"{c.rate_a:.3f}", "B": f"{c.rate_b:.3f}",
             "A - B [95% CI]": f"{c.difference:+.3f} [{c.low:+.3f}, {c.high:+.3f}]",
             "draws separating": f"{c.draws_separating} of {len(c.draws)}" if c.draws else "–"}
            for c in contrasts]
    lines = [markdown_table(pd.DataFrame(rows)), ""]
    for c in contrasts:
        if c.draws:
            per_draw = "; ".join(f"draw {d.draw}: {counts(d.b_count, d.c_count)}, p = {d.p_value:.3g}"
                                 for d in c.draws)
            over = f" ({c.at})" if isinstance(c.budget, str) else ""
            lines.append(f"- {c.a} vs each draw of {c.b}{over}: {per_draw}")
    measure = contrasts[0].measure if contrasts else "flip"
    lines += ["", f"The family: the {len(contrasts)} contrasts above, Holm-adjusted together. Measure: {measure} "
              "(for flips, a success is an output unchanged against dense: b = A keeps it where B changes it; "
              "A and B are flip rates). Two selectors on a binary measure: exact McNemar; a graded measure or "
              "a drawn coin (its mean over draws per example): the exact sign-flip permutation test (Monte "
              "Carlo where the values are not on a lattice). The difference and its 95% paired bootstrap "
              "interval are of the per-example quantity the test reads."
              + (" At auc: per example the area of the measure over the run's budget grid (the trapezoid over "
                 "its budgets divided by their span; a coin's draws averaged at each budget first), tested by "
                 "the exact sign-flip test; A and B are mean areas." if any(isinstance(c.budget, str)
                                                                            for c in contrasts) else "")]
    return "\n".join(lines)

def across_markdown(results) -> str:
    """Contrasts compared between two runs (`experiments.across.AcrossSettings`) as a markdown table."""
    if not results:
        return ""
    first, second = results[0].first, results[0].second
    rows = [{"contrast": f"{r.a} vs {r.b}", "budget": r.budget, "measure": r.measure,
             "n": f"{r.n_first} / {r.n_second}", f"A - B in {first}": f"{r.effect_first:+.3f}",
             f"A - B in {second}": f"{r.effect_second:+.3f}",
             "difference [95% CI]": f"{r.difference:+.3f} [{r.low:+.3f}, {r.high:+.3f}]", "test": r.test,
             "p": f"{r.p_value:.4g}", "p (Holm)": f"{r.p_holm:.4g}"} for r in results]
    return "\n".join([markdown_table(pd.DataFrame(rows)), "",
                      f"Across settings: each contrast's mean paired difference (A - B per example, the quantity "
                      f"the contrast tests) in {first} against that in {second}, two independent samples: the "
                      f"two-sided permutation test of their difference of means (twice the smaller one-sided p), "
                      f"a percentile bootstrap interval resampling each run on its own; Holm over the "
                      f"{len(results)} compared."])


def behind_markdown(behind) -> str:
    """The examples behind one contrast (`experiments.behind.Behind`) as a markdown table to read."""
    head = behind_sentence(behind)
    if behind.shown.empty:
        return head + ": none."
    return head + ":\n\n" + markdown_table(behind.shown)


def answer_sources_markdown(sources: pd.DataFrame, budget: float = 0.2) -> str:
    """`experiments.answer_sources.answer_sources_table` as markdown: each source's share of the words
    of dense's, the splice's and each repair's answers at `budget` (the grid's middle where the run
    has no such budget), then the share of answers that recite the passages outside the evidence, at
    every budget."""
    grid = sorted(sources["budget"].dropna().unique())
    if grid and not any(abs(b - budget) < 1e-9 for b in grid):
        budget = grid[len(grid) // 2]
    at = sources[sources["budget"].isna() | ((sources["budget"] - budget).abs() < 1e-9)]
    shares = at[["selector", "cells", "answered", *SOURCES]].round(3)
    refs = sources[sources["budget"].isna()]
    said = ", ".join(f"{r.selector} {r.recites_context:.3f}" for r in refs.itertuples())
    cells = sources[sources["budget"].notna()]
    recites = cells.pivot(index="selector", columns="budget", values="recites_context").reindex(
        list(dict.fromkeys(cells["selector"])))
    recites.columns = [f"{b:g}" for b in recites.columns]
    left_out = sources.attrs.get("left_out", 0)
    parts = [f"Where the answers' words come from at b = {budget:g} (each word credited to the first of the evidence, "
             "the prompt, the rest of the passages that hold evidence and the passages that hold none where the run of "
             f"answer words around it is the longest or at least {CREDIT_WORDS} words long, else to nowhere; the mean "
             "share of each over the `answered` of the `cells`, those with words: an answer that ends at once has "
             "none, so two rows can average different examples):", "",
             markdown_table(shares), "",
             f"Answers that recite the passages outside the evidence (at least {RECITE_WORDS} consecutive words, each "
             f"credited there by a run of at least {RECITE_WORDS}; " + (said or "no reference answers") + "):", "",
             markdown_table(recites.round(3).reset_index())]
    if left_out:
        parts += ["", f"{left_out} example(s) define no evidence and are left out of both tables."]
    return "\n".join(parts)
