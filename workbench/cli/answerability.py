"""`kvwb answerability`: dense and splice accuracy on the first n examples of a data set."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.common import (
    add_answer_rule_option, add_dataset_argument, add_dataset_options, add_model_options, answer_limit, dataset_options, example_count,
    load_model, printable, say, warnings_as_lines,
)

NAME = "answerability"


def add_arguments(p) -> None:
    add_model_options(p)
    add_dataset_argument(p)
    p.add_argument("--n", type=example_count, default=30, help="examples to answer (default 30)")
    p.add_argument("--max-new-tokens", type=answer_limit, default=24, help="greedy answer limit (default 24)")
    add_answer_rule_option(p)
    p.add_argument("--csv", default=None, help="also write the per-example table to this .csv file (never inside "
                                              "a run folder); each finished example is kept in CSV.partial.jsonl "
                                              "until then, and the same command resumes from it")
    p.add_argument("--force", action="store_true", help="replace --csv if it exists (a plain file, not a run's)")
    add_dataset_options(p)


def partial_path(csv: str) -> Path:
    """Where `--csv CSV` keeps its finished rows until the table is written."""
    return Path(f"{csv}.partial.jsonl")


def summary_line(s: dict, label: str) -> str:
    """One measure's dense and splice rates, the gap and its paired test, as one line."""
    low, high = s["dense_low_high"]
    test = (f"b / c = {s['b']} / {s['c']}, exact p = {s['p']:.3g}" if s["b"] is not None
            else f"sign-flip p = {s['p']:.3g}")
    return (f"dense {label} {s['dense_em']:.3f} [{low:.3f}, {high:.3f}], splice {label} {s['spliced_em']:.3f}, gap "
            f"{s['gap']:+.3f} ({test})")


def command(args) -> int:
    """Where a model answers: dense and splice exact match and retrieval (the task's string match) of
    the first n examples, each gap with its paired test, and how often the splice's answer ran on past
    dense's, before a selector study is set on that data (no signals, no repairs)."""
    import pandas as pd

    from workbench.atomic import write_text
    from workbench.experiments.answerability import answerability, answerability_summary
    from workbench.experiments.blank_answers import blank_sentence, blank_table
    from workbench.experiments.gap_anatomy import anatomy_sentence, splice_anatomy
    from workbench.runstore import check_out
    from workbench.tasks import check_dataset

    if args.csv:  # the same rule as every --out: never inside a run, an existing file only with --force
        check_out(args.csv, force=args.force, file_suffixes=(".csv",), option="--csv")
    options = dataset_options(args)
    check_dataset(args.dataset, n=args.n, **options)  # bad data fails before the model loads
    model = load_model(args)
    checkpoint = partial_path(args.csv) if args.csv else None
    if checkpoint is not None and checkpoint.is_file():
        say(f"resuming from {printable(checkpoint)}")
    with warnings_as_lines():  # an answer limit shorter than the golds need: one `kvwb: warning:` line
        table = answerability(model, args.dataset, args.n, args.max_new_tokens, checkpoint=checkpoint,
                              stop_at_newline=args.stop_at_newline, **options)
    s = answerability_summary(table)
    say(f"{printable(args.dataset)} {printable(str(options or ''))}: n = {s['n']}, median {s['median_tokens']:.0f} "
        f"tokens{'' if args.stop_at_newline else ', answers scored whole'}; the splice changes the output on {s['flips']:.0%} and runs on past dense's answer on "
        f"{s['ran_on']:.0%}")
    for measure, label in (("em", "EM"), ("retrieved", "retrieved")):
        say("  " + summary_line(answerability_summary(table, measure), label))
    anatomy = anatomy_sentence(splice_anatomy(table), hint=False)
    if anatomy:
        say("  " + anatomy)
    blank = blank_sentence(blank_table(pd.DataFrame(), table), whole=not args.stop_at_newline, read=False)
    if blank:
        say("  " + blank)
    if args.csv:
        write_text(args.csv, table.to_csv(index=False), make_folders=True)
        checkpoint.unlink(missing_ok=True)  # the table is whole: its rows live in the CSV now
        say(f"wrote {printable(args.csv)}")
    return 0
