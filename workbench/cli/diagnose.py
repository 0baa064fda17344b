"""`kvwb diagnose`: one example, every signal and selector, optionally saved as a run folder."""

from __future__ import annotations

import argparse

from workbench.cli.common import (
    add_dataset_options, add_diagnose_options, answer_limit, add_model_options, diagnose_settings, floats, load_example_for, names,
    printable, printable_frame, show,
)
from workbench.diagnosis import DEFAULT_BUDGETS

NAME = "diagnose"


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument("--example", default="synthetic#0",
                   help="DATASET#ID, e.g. synthetic#3, ruler:niah_single#3 or jsonl:data.jsonl#q7")
    p.add_argument("--selectors", type=names, default=None,
                   help="comma-separated selector specs NAME[:UNIT] (units: single, chunk, grow); "
                        "default: selectors.DEFAULT_SPECS and the expensive oracle-patch (epic, prophetkv and "
                        "relaxkv only when named)")
    p.add_argument("--budgets", type=floats, default=DEFAULT_BUDGETS,
                   help=f"comma-separated fractions of the candidate pool (--pool) to recompute "
                        f"(default {show(DEFAULT_BUDGETS)})")
    p.add_argument("--seed", type=int, default=0, help="seed of the random selector and the patching sample")
    p.add_argument("--max-new-tokens", type=answer_limit, default=24, help="greedy answer limit (default 24)")
    p.add_argument("--attribution", action=argparse.BooleanOptionalAction, default=True,
                   help="run the attribution-patching check (first-order vs actual patching; default on: "
                        "--no-attribution leaves it out, as `kvwb run` does by default)")
    add_dataset_options(p)
    add_diagnose_options(p)
    p.add_argument("--layer-effects", action="store_true",
                   help="also keep the per-layer recompute effects of every selection (the suffix's residual distance "
                        "from dense and the logit lens of the first answer token per layer: at which layer a repair "
                        "recovers the answer), shown by the explorer and the report")
    p.add_argument("--out", default=None, help="folder to write the Diagnosis to (manifest, diagnosis.json, parquet)")
    p.add_argument("--force", action="store_true", help="replace --out if the workbench wrote it")


def diagnose_config(args):
    """The DiagnoseConfig the options ask for, validated."""
    from workbench.diagnosis import DiagnoseConfig
    from workbench.selectors import default_selectors

    return DiagnoseConfig.of(selectors=args.selectors or default_selectors(expensive=True), budgets=args.budgets,
                             seed=args.seed, max_new_tokens=args.max_new_tokens, attribution=args.attribution,
                             **diagnose_settings(args)).checked()


def command(args) -> int:
    """Diagnose one example: signals, every selector at every budget, outcomes; write it to --out."""
    from workbench import runstore
    from workbench.diagnosis import diagnose
    from workbench.models import model_identity

    config = diagnose_config(args)
    out = runstore.check_out(args.out, kind="diagnosis", force=args.force) if args.out is not None else None
    model, example = load_example_for(args)
    diagnosis = diagnose(model, example, config, layer_effects=args.layer_effects)
    if out is not None:
        runstore.check_out(out, kind="diagnosis", force=args.force)  # it may have appeared while the diagnosis ran
        runstore.write_diagnosis_run(out, diagnosis, model_identity(model))
    answers = diagnosis.answers
    print(f"example {printable(example.id)}: gold {printable(' | '.join(example.gold)) or '(none)'}; "
          f"dense {printable(repr(answers.dense.text))}; spliced {printable(repr(answers.spliced.text))}")
    print(printable_frame(diagnosis.summary()).to_string(index=False))
    print(printable(diagnosis.attribution_text))
    if out is not None:
        print(f"wrote {printable(out)}")
    return 0
