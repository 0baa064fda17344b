"""`kvwb fidelity`: the fidelity-vs-consumability probe into a run folder."""

from __future__ import annotations

from workbench.cli.common import (
    MAX_EXAMPLES, add_model_options, answer_limit, bounded_int, count, floats, ints, load_model, names, number, printable, printable_frame, show,
    thread_count,
)
from workbench.experiments.fidelity import FidelityArgs

NAME = "fidelity"
LISTS = ("cosines", "alphas", "layers", "bank_ranks", "bank_alphas", "pool_sizes", "proj_cos", "subspaces")


def add_arguments(p) -> None:
    d = FidelityArgs()
    add_model_options(p)
    p.add_argument("--out", required=True, help="run folder to write (must be new or empty)")
    p.add_argument("--n", type=bounded_int(0, MAX_EXAMPLES, "examples; a larger set is several runs"), default=d.n, help=f"questions (default {d.n})")
    p.add_argument("--seed", type=int, default=d.seed, help="task set, noise and pool seed (default 0)")
    p.add_argument("--force", action="store_true", help="replace --out if the workbench wrote it")
    p.add_argument("--dataset", default=None,
                   help="data set spec instead of the built-in one-fact task set (e.g. jsonl:PATH); "
                        "examples whose passages hold no gold answer are skipped")
    p.add_argument("--cosines", type=floats, default=d.cosines,
                   help=f"noise: target key cosines in (0, 1] (default {show(d.cosines)})")
    p.add_argument("--alphas", type=floats, default=d.alphas,
                   help=f"genuine: weights from masked (0) to native (1) (default {show(d.alphas)})")
    p.add_argument("--layer-cos", type=number, default=d.layer_cos,
                   help=f"layer sweep: the matched key cosine of both corruptions (default {d.layer_cos})")
    p.add_argument("--layers", type=ints, default=None,
                   help="layer sweep: numbers of leading layers replaced (default 0,1,2,4,8,16,... and all)")
    p.add_argument("--bank-ranks", type=ints, default=d.bank_ranks,
                   help=f"bank: neighbour ranks k (default {show(d.bank_ranks)})")
    p.add_argument("--bank-alphas", type=floats, default=d.bank_alphas,
                   help=f"bank: weights toward the neighbour (default {show(d.bank_alphas)})")
    p.add_argument("--bank-size", type=count, default=d.bank_size,
                   help=f"bank: passages whose rows form the bank (default {d.bank_size})")
    p.add_argument("--pool-sizes", type=ints, default=d.pool_sizes,
                   help=f"augmentation: sender pool sizes N (default {show(d.pool_sizes)})")
    p.add_argument("--proj-cos", type=floats, default=d.proj_cos,
                   help=f"projection: target key cosines (default {show(d.proj_cos)})")
    p.add_argument("--subspaces", type=names, default=d.subspaces,
                   help=f"projection: any of {show(d.subspaces)} (default all)")
    p.add_argument("--max-new-tokens", type=answer_limit, default=d.max_new_tokens,
                   help=f"greedy decoding limit (default {d.max_new_tokens}; raise it for longer answers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="torch CPU threads (default: torch's choice); 1 is much faster on a busy machine")


def command(args) -> int:
    """Run the fidelity-vs-consumability probe, write the run folder, print the anchors and conditions."""
    import pandas as pd
    import torch

    from workbench.experiments.fidelity import run_fidelity, validate
    from workbench.experiments.fidelity_tables import KEY_COLUMNS
    from workbench.runstore import check_out, load_fidelity
    from workbench.tasks import load_dataset

    settings = {name: getattr(args, name) for name in
                (*LISTS, "layer_cos", "bank_size", "dataset", "max_new_tokens")}
    validate(FidelityArgs(n=args.n, seed=args.seed, **settings))  # everything that needs no model
    if args.dataset:
        load_dataset(args.dataset, args.n)  # a bad data set fails before the model loads
    out = check_out(args.out, kind="fidelity", force=args.force)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = load_model(args)
    out = run_fidelity(model, out, n=args.n, seed=args.seed, progress=not args.no_progress, force=args.force,
                       **settings)
    run = load_fidelity(out)
    n_examples = run.manifest.details.get("n_examples")
    print(f"wrote {printable(out)} ({n_examples} examples, {run.manifest.seconds or 0:.0f} s)")
    shown = run.tables["conditions"][[*KEY_COLUMNS, "key_cos", "transfer", "low", "high"]]
    with pd.option_context("display.max_rows", 500, "display.width", 160):
        print(printable_frame(shown).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(printable_frame(run.tables["augmentation"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0
