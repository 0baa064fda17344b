"""`kvwb answer`: one example's dense, spliced and repaired answers."""

from __future__ import annotations

import textwrap
import time

from workbench.cli.common import (
    add_answer_rule_option, add_dataset_options, add_model_options, answer_limit, load_example_for, printable,
)

NAME = "answer"


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument("--example", default="synthetic#0",
                   help="DATASET#ID: synthetic[:SEED]#ID, ruler:TASK#ID, hotpotqa:PATH#ID, 2wiki:PATH#ID, "
                        "musique:PATH#ID or jsonl:PATH#ID")
    p.add_argument("--max-new-tokens", type=answer_limit, default=24, help="greedy decoding limit (default 24)")
    add_answer_rule_option(p)
    add_dataset_options(p)


def command(args) -> int:
    """Dense, spliced and fully repaired answers of one example, with timings."""
    from workbench.context import build_context
    from workbench.experiments.blank_answers import ENDED_AT_ONCE

    model, example = load_example_for(args)
    t0 = time.perf_counter()
    ctx = build_context(model, example)
    t_build = time.perf_counter() - t0
    err = ctx.check_splice()
    t0 = time.perf_counter()
    fixed = ctx.repair(ctx.reused_positions)
    t_repair = time.perf_counter() - t0

    print(f"example {printable(example.id)}  ({ctx.layout.n_tokens} tokens, {len(example.passages)} passages, "
          f"{ctx.n_reused} reused rows)")
    for i, passage in enumerate(example.passages, 1):
        print(textwrap.fill(printable(passage), 100, initial_indent=f"  [{i}] ", subsequent_indent="      "))
    print(f"  Q: {printable(example.question)}")
    print(f"  gold: {printable(' | '.join(example.gold)) or '(none)'}")
    tol = ctx.splice_tolerance()
    print(f"layer-0 splice vs dense: max |dK| = {err['k']:.1e}, max |dV| = {err['v']:.1e} "
          f"(float rounding allows {tol['k']:.1e} and {tol['v']:.1e})")
    for name, cache in (("dense", ctx.dense), ("spliced", ctx.spliced), ("repaired (all reused rows)", fixed)):
        t0 = time.perf_counter()
        answer = ctx.generate(cache, args.max_new_tokens, stop_at_newline=args.stop_at_newline)
        shown = printable(repr(answer.text)) + ("" if answer.token_ids else f" ({ENDED_AT_ONCE})")
        print(f"  {name:<28} {shown:<40} ({time.perf_counter() - t0:.2f} s to answer)")
    print(f"timings: build context (splice + dense) {t_build:.2f} s, repair of all reused rows {t_repair:.2f} s")
    return 0
