"""`kvwb summary`: a sweep's accuracy, flips, gap recovered and paired tests; figures as HTML."""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

from workbench.cli.common import printable, say, warnings_as_lines
from workbench.errors import WorkbenchError
from workbench.experiments.contrasts import GAP_MEASURES, MEASURES

NAME = "summary"
FIGURES = {"accuracy": "Exact match against budget", "gap": "Share of the EM gap closed against budget",
           "flips": "Flip rate against dense", "rows": "Rows recomputed against exact match"}


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1], got {text!r}")
    return value


def add_arguments(p) -> None:
    p.add_argument("run", help="a folder written by kvwb run")
    p.add_argument("--reference", default=None,
                   help="selector to test every other against (default: cacheblend, else random, when the run "
                        "has one; otherwise that comparison is left out)")
    p.add_argument("--format", choices=["markdown", "csv"], default="markdown",
                   help="output format (csv: stdout holds the one table; the contrasts go to stderr)")
    p.add_argument("--target-share", type=_fraction, default=0.9,
                   help="tokens-to-target: share of dense's value to reach, on the summary's measure (EM unless "
                        "--measure is em, contains or retrieved; default 0.9)")
    p.add_argument("--max-flip-rate", type=_fraction, default=0.2,
                   help="tokens-to-target: flip rate to get under (default 0.2)")
    p.add_argument("--contrast", action="append", default=[], metavar="A:B@BUDGET",
                   help="a pre-registered contrast, e.g. cadence-grad:cacheblend@0.2, or bcr:coin@0.2 for the coin "
                        "matched to bcr (coin:bcr): exact McNemar b/c and p for two selectors on a binary measure, "
                        "the sign-flip test on a graded one and against a coin's mean over draws (with each draw's "
                        "b/c; exact on a lattice, else sampled), and the difference with a 95%% paired interval; "
                        "A:B@auc reads per example the area of the measure over the run's budget grid (trapezoid / "
                        "span) by the sign-flip test. Repeat for several: together "
                        "they are the family, and each p is printed raw and Holm-adjusted over it")
    p.add_argument("--measure", default="flip", choices=list(MEASURES),
                   help="the outcome the contrasts test, at a budget or @auc (default flip: the output changed "
                        "against dense; graded ones such as f1_to_dense or dense_logprob_mean take the sign-flip "
                        "test; retrieved: the task's retrieval measure, RULER's string match or contains for QA, "
                        "fractional over several values). em, contains and retrieved also move the gap closed, "
                        "its area over budgets and the summary's tests onto that measure; any other leaves them "
                        "on em")
    p.add_argument("--preregistered", action="store_true",
                   help="test the families pre-registered in the run's preregistration.json (beside its manifest; "
                        "a kept record restores it), each family under Holm on its own, on the measure it names")
    p.add_argument("--against", default=None, metavar="RUN2",
                   help="another run (a setting on distinct examples): each --contrast is also compared between "
                        "the two runs, its per-example A - B here against there, by a two-sided permutation test "
                        "of the difference of means with a bootstrap interval, Holm over the contrasts")
    p.add_argument("--read", type=int, default=0, metavar="K",
                   help="after each contrast (--contrast or --preregistered), K of the examples behind it: a seeded "
                        "sample of those where A and B differ, with the gold, dense's answer and both answers, to "
                        "read before reporting the difference (default 0: none)")
    p.add_argument("--html", default=None,
                   help="also write the curves as standalone HTML into this folder (new, empty, or one an "
                        "earlier --html wrote)")


def summarize_run(folder, reference: str | None = None, measure: str = "em"):
    """The sweep folder read back and its summary table (gap and tests on `measure`)."""
    from workbench.experiments.summary import summarize
    from workbench.runstore import load_sweep

    run = load_sweep(folder)
    return run, summarize(run, reference=None if reference is None else _label(reference), measure=measure)


def _label(spec: str) -> str:
    """A selector spec as the run labels it (`bcr:chunk` is `bcr`); an unknown name as written."""
    from workbench.selectors import parse_selector

    try:
        return parse_selector(spec).label
    except WorkbenchError:
        return spec


def render(run, table, target_share: float = 0.9, max_flip_rate: float = 0.2) -> str:
    """The summary as markdown: the header facts, the main table, tokens-to-target, and with two
    budgets or more the readings over the grid (the gap's area, rows to the target share)."""
    from workbench.experiments.summary import tokens_to_target
    from workbench.report import sweep_summary_markdown

    text = sweep_summary_markdown(run, table, tokens_to_target(table, run.examples, target_share, max_flip_rate))
    if run.outcomes["budget"].nunique() < 2:
        return text
    from workbench.experiments.gap_auc import gap_auc_table, rows_to_target_table
    from workbench.report.markdown import gap_auc_markdown

    measure = table.attrs.get("measure", "em")
    return text + "\n\n" + gap_auc_markdown(gap_auc_table(run, measure),
                                             rows_to_target_table(run, measure, target_share))


def command(args) -> int:
    """Summarize a run: accuracy, flips, gap recovered and McNemar per selector and budget."""
    from workbench.experiments.contrasts import contrast_family, parse_contrast
    from workbench.experiments.answer_sources import answer_sources_table, run_has_evidence
    from workbench.report.markdown import answer_sources_markdown

    known = _run_selectors(args.run) if args.contrast else None
    for text in args.contrast:
        parse_contrast(text, known)  # a malformed contrast fails before the run's tables are read
    if args.read < 0:
        raise WorkbenchError(f"--read takes a number of examples >= 0, got {args.read}")
    if args.read and not (args.contrast or args.preregistered):
        raise WorkbenchError("--read shows the examples behind contrasts: give --contrast or --preregistered")
    if args.against and not args.contrast:
        raise WorkbenchError("--against compares contrasts between two runs: give at least one --contrast")
    if args.preregistered and args.contrast:
        raise WorkbenchError("--preregistered tests the run's own families: give it without --contrast (or test "
                             "--contrast on its own, a family of its own)")
    pre = _preregistration(args.run) if args.preregistered else None
    html_out = check_html_out(args.html) if args.html is not None else None  # '' is refused, not ignored
    run, table = summarize_run(args.run, args.reference, args.measure if args.measure in GAP_MEASURES else "em")
    other = against_run(run, args.against) if args.against else None  # refused before anything is printed
    with warnings_as_lines():  # an em contrast on a run without gold answers: one warning line
        contrasts = contrast_family(run, args.contrast, args.measure)
    _warn_unfinished(run, bool(args.contrast or pre is not None))
    if args.format == "csv":
        print(printable(csv_table(run, table).to_csv(index=False), keep_newlines=True), end="")
    else:
        say(render(run, table, args.target_share, args.max_flip_rate))
        if "evidence_recall" in table and table["evidence_recall"].notna().any():
            say("\n" + evidence_text(run, table))
        if run_has_evidence(run):  # any run whose examples recorded evidence, however old its cells
            sources = answer_sources_table(run)
            if not sources.empty:
                say("\n" + answer_sources_markdown(sources))
    # with --format csv stdout holds the one CSV table; the contrasts, in markdown, go to stderr
    tell = say if args.format != "csv" else _say_on_stderr
    if contrasts:
        from workbench.report import contrasts_markdown

        tell("\n" + contrasts_markdown(contrasts))
        _tell_behind(tell, run, args.contrast, args.measure, args.read)
    if pre is not None:
        from workbench.experiments.families import tested_families
        from workbench.report import contrasts_markdown

        source = pre.source or "preregistration.json"
        for family, found in tested_families(run, pre.families, pre.measure).items():
            tell(f"\nFamily {family} ({', '.join(pre.families[family])}), pre-registered ({source}); "
                 f"on {pre.measure}, Holm within the family:\n\n" + contrasts_markdown(found))
            _tell_behind(tell, run, pre.families[family].values(), pre.measure, args.read)
    if args.against:
        from workbench.experiments.across import across_family
        from workbench.report.markdown import across_markdown
        tell("\n" + across_markdown(across_family(run, other, args.contrast, args.measure)))
    if html_out is not None:
        write_figures(html_out, run, table)
        print(f"wrote {', '.join(f'{n}.html' for n in FIGURES)} and index.html to {printable(html_out)}")
    return 0


def against_run(run, folder):
    """--against read back: another run, never this one again (the same folder, or a copy of it: the
    same model, data, examples and settings under another name), else a one-line refusal. Two runs
    that share examples (the same id, question and gold) under other settings (two models on one data
    set) are compared, with a note that the test takes them as independent (PROTOCOLS, "Across
    settings")."""
    from workbench.experiments.answer_lines import whole_answers
    from workbench.runstore import identity_differences, load_sweep

    if Path(folder).resolve() == Path(run.folder).resolve():
        raise WorkbenchError(f"--against {folder} is the run itself: give a run of another setting")
    other = load_sweep(folder)
    rules = [whole_answers(r) for r in (run, other)]
    if rules[0] != rules[1]:
        said = ["whole answers" if whole else "first lines" for whole in rules]
        _say_on_stderr(f"note: this run scores {said[0]} and --against {folder} scores {said[1]}: the test compares "
                       "two answer rules (--no-stop-at-newline) as well as two settings")
    shared = _example_keys(run) & _example_keys(other)
    if not shared:
        return other
    settings = {k: v for k, v in run.manifest.args.items() if k != "n"}
    other_settings = {k: v for k, v in other.manifest.args.items() if k != "n"}
    if not identity_differences(settings, other_settings) and run.manifest.fingerprint == other.manifest.fingerprint:
        raise WorkbenchError(f"--against {folder} is a copy of this run (the same model, data and settings; "
                             f"{len(shared)} examples shared): give a run of another setting")
    _say_on_stderr(f"note: --against {folder} shares {len(shared)} examples with this run; the test takes the two "
                   "as independent samples, which is conservative where the two effects correlate")
    return other


def _example_keys(run) -> set[tuple[str, str, str]]:
    """A run's examples as (id, question, gold): two runs share an example only where all three agree
    (every RULER run numbers its examples 0, 1, ...: an id alone is not an example)."""
    ex = run.examples
    return set(zip(ex["example_id"].astype(str), ex["question"].astype(str), ex["gold"].astype(str)))


def _run_selectors(folder) -> tuple[str, ...] | None:
    """The selectors the run's manifest names, for a contrast's error; None where it cannot be read."""
    from workbench.runstore import load_manifest

    try:
        return load_manifest(folder).selectors or None
    except WorkbenchError:
        return None


def _warn_unfinished(run, testing: bool) -> None:
    """One stderr line where contrasts are tested on a run that is not finished (its tables are partial)."""
    from workbench.report.markdown import unfinished_note

    note = unfinished_note(run) if testing else None
    if note:
        _say_on_stderr(f"warning: the contrasts test {len(run.examples)} of {run.manifest.n or '?'} examples; {note}")


def _tell_behind(tell, run, texts, measure: str, k: int) -> None:
    """K examples behind each contrast (`experiments.behind`), where K > 0."""
    if k <= 0:
        return
    from workbench.experiments.behind import examples_behind
    from workbench.report.markdown import behind_markdown

    for text in texts:
        tell("\n" + behind_markdown(examples_behind(run, text, measure, k)))


def csv_table(run, table):
    """The summary table for --format csv: the text summary's header caveats (`run_caveats`: examples
    computed under hooks, examples short of distractors) as columns of every row, where the run has
    them (stdout stays one table)."""
    from workbench.experiments.summary import run_caveats

    caveats = run_caveats(run.examples)
    return table.assign(n_examples=len(run.examples), **caveats) if caveats else table


def _preregistration(folder):
    """The run's pre-registered families, or a one-line error where it keeps none."""
    from workbench.experiments.families import PREREGISTRATION, read_preregistration

    pre = read_preregistration(folder)
    if pre is None:
        raise WorkbenchError(f"{folder} keeps no {PREREGISTRATION} beside its manifest: write one (see "
                             "experiments/families.py) or give the contrasts with --contrast")
    return pre


def _say_on_stderr(text: str) -> None:
    print(printable(text, keep_newlines=True, stream=sys.stderr), file=sys.stderr)


def evidence_text(run, table) -> str:
    """The run's evidence readings as markdown: recall per selector and budget, each scorer's
    average precision, the question's attention on the evidence (`experiments.evidence`)."""
    from workbench.experiments.evidence import evidence_recall_table, evidence_tables
    from workbench.report.markdown import markdown_table

    recall = evidence_recall_table(table).reset_index()
    recall.columns = ["selector", *(f"b = {b:g}" for b in recall.columns[1:])]
    n = int(table["n_with_evidence"].max())
    parts = [f"Evidence recall (the share of the gold evidence rows in the pool that a repair recomputes; mean over "
             f"the {n} examples with evidence in the pool):", "", markdown_table(recall.round(3))]
    if "evidence_precision" in table and table["evidence_precision"].notna().any():
        precision = evidence_recall_table(table, "evidence_precision").reset_index()
        precision.columns = recall.columns
        parts += ["", "Evidence precision (the share of a repair's recomputed rows that are evidence; mean over the "
                  "same examples, less those where the repair recomputed no row, which have none):", "",
                  markdown_table(precision.round(3))]
        fewer = table[table["n_with_precision"] < n]
        if not fewer.empty:
            parts += ["", "Precision over fewer than the " + str(n) + " examples: " + "; ".join(
                f"{r.selector} at b = {r.budget:g}: {r.n_with_precision}" for r in fewer.itertuples())]
    ranking, attention = evidence_tables(run)
    if not ranking.empty:
        parts += ["", "Average precision of each scorer's ranking of the pool against the evidence rows (chance: "
                  "their share of the pool; lift: AP / chance):", "", markdown_table(ranking.round(3))]
    if not attention.empty:
        mid = sorted(b for b in attention["budget"].dropna().unique())
        budget = 0.2 if 0.2 in mid else mid[len(mid) // 2]
        at = attention[attention["budget"].isna() | ((attention["budget"] - budget).abs() < 1e-9)]
        top = at["layer"].max()
        compact = at.groupby("cell", sort=False).agg(
            mean_over_layers=("mass_mean", "mean"),
            last_layer=("mass_mean", lambda m: float(m[at.loc[m.index, "layer"] == top].mean()))).reset_index()
        parts += ["", f"The question's attention mass on the evidence rows (mean over its rows and heads) under dense, "
                  f"the splice and each repair at b = {budget:g}: the mean over layers and at the last layer:", "",
                  markdown_table(compact.round(4))]
    return "\n".join(parts)


def check_html_out(path) -> Path:
    """--html must be a new or empty folder, or one an earlier `kvwb summary --html` wrote (its
    figures are refreshed); never a run or anything else."""
    from workbench import runstore

    try:
        out = runstore.check_out(path, resume=True)
    except WorkbenchError as err:
        raise WorkbenchError(str(err).replace("--out", "--html")) from None
    if out.is_dir() and any(out.iterdir()):
        manifest = runstore.load_manifest(out) if (out / runstore.MANIFEST).is_file() else None
        if manifest is None or "figures" not in manifest.details:
            raise WorkbenchError(f"{out} holds a {manifest.kind if manifest else 'saved diagnosis'} run, not figures of "
                                 f"`kvwb summary --html`; choose another folder for --html")
    return out


def write_figures(out: Path, run, table) -> None:
    """The four curves, an index and a manifest, as one folder that appears whole or not at all
    (`runstore.write_run`): a full disk leaves no figure behind."""
    from workbench import plots, runstore

    measure = table.attrs.get("measure", "em")
    titles = {**FIGURES, "gap": FIGURES["gap"] if measure == "em" else FIGURES["gap"].replace("EM", measure)}
    figures = {"accuracy": plots.budget_curve(table, "em", titles["accuracy"]),
               "gap": plots.gap_curve(table, titles["gap"]),
               "flips": plots.budget_curve(table, "flip_rate", FIGURES["flips"]),
               "rows": plots.rows_vs_accuracy(table, FIGURES["rows"])}
    pages = {f"{name}.html": fig.to_html(include_plotlyjs=True) for name, fig in figures.items()}
    title = html.escape(f"kvwb summary: {run.folder.name}")
    links = "".join(f'<li><a href="{name}.html">{html.escape(titles[name])}</a></li>' for name in figures)
    pages["index.html"] = (f"<!doctype html><meta charset=utf-8><title>{title}</title>"
                           f"<h1>{title}</h1><ul>{links}</ul>\n")
    manifest = runstore.new_manifest("report", run.manifest.model,
                                     {"source": str(run.folder), "reference": table.attrs.get("reference")},
                                     figures=[f"{name}.html" for name in figures])
    runstore.write_run(out, runstore.finished(manifest), {}, pages)
