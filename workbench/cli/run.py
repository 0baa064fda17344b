"""`kvwb run`: a sweep over a data set into a resumable run folder, then its summary."""

from __future__ import annotations

import sys

from workbench.cli.common import (
    add_dataset_argument, add_dataset_options, add_diagnose_options, add_model_options, answer_limit, command_line,
    dataset_options, diagnose_settings, example_count, floats, load_model, names, number, positive_int, printable, say,
    show, warn,
)
from workbench.cli.summary import render, summarize_run
from workbench.diagnosis import DEFAULT_BUDGETS
from workbench.errors import WorkbenchError

NAME = "run"


def add_arguments(p) -> None:
    add_model_options(p)
    add_dataset_argument(p)
    p.add_argument("--n", type=example_count, default=40, help="examples to diagnose (default 40)")
    p.add_argument("--selectors", type=names, default=None,
                   help="comma-separated selector specs NAME[:UNIT] (coin:NAME: the coin matched to NAME); default: "
                        "the seeds' selectors (selectors.DEFAULT_SPECS; epic, prophetkv, relaxkv and the expensive "
                        "oracle-patch only when named)")
    p.add_argument("--budgets", type=floats, default=DEFAULT_BUDGETS,
                   help=f"fractions of the candidate pool (--pool) to recompute (default {show(DEFAULT_BUDGETS)})")
    p.add_argument("--seed", type=int, default=0,
                   help="run seed: each example's coin draws derive from it and the example id")
    p.add_argument("--max-new-tokens", type=answer_limit, default=24, help="greedy answer limit (default 24)")
    add_dataset_options(p)
    p.add_argument("--attribution", action="store_true",
                   help="also run the attribution-patching check (first-order vs actual) per example")
    add_diagnose_options(p)
    p.add_argument("--reference", default=None,
                   help="selector the summary tests against (default: cacheblend, else random, when the run has "
                        "one; otherwise that comparison is left out)")
    p.add_argument("--out", required=True, help="run folder; an existing run with the same arguments resumes")
    p.add_argument("--preregistration", default=None, metavar="FILE",
                   help="contrast families written before the run ({\"measure\": ..., \"families\": {\"A\": "
                        "{\"A1\": \"X:Y@auc\"}}}): checked against --selectors and --budgets, copied beside the "
                        "manifest before the first example; `kvwb summary RUN --preregistered` tests them")
    ray = p.add_argument_group("executor")
    ray.add_argument("--executor", choices=["local", "ray"], default="local",
                     help="local (default: this process) or ray (one actor per worker loads the model once; each "
                          "example is one task; needs the [ray] extra)")
    ray.add_argument("--address", default=None,
                     help="ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT; one that does not answer "
                          "fails within seconds); default: start a local one")
    ray.add_argument("--workers", type=positive_int, default=None, help="ray: actors, each with its own model (default 2)")
    ray.add_argument("--cpus-per-worker", type=positive_int, default=None,
                     help="ray: CPUs (and torch threads) per worker (default 1)")
    ray.add_argument("--gpus-per-worker", type=number, default=None,
                     help="ray: GPUs per worker (1 pins one GPU each; default 0)")


def sweep_config(args):
    """The SweepConfig the options ask for, validated."""
    from workbench.experiments.sweep import SWEEP_DIAGNOSE, SweepConfig
    from workbench.selectors import default_selectors

    diagnose = SWEEP_DIAGNOSE.with_(selectors=tuple(args.selectors or default_selectors()),
                                    budgets=tuple(args.budgets), seed=args.seed, attribution=args.attribution,
                                    max_new_tokens=args.max_new_tokens, **diagnose_settings(args))
    return SweepConfig(dataset=args.dataset, n=args.n, diagnose=diagnose, dataset_options=dataset_options(args)).checked()


def command(args) -> int:
    """Diagnose every example of a data set into a run folder (resumable; see docs/ARCHITECTURE.md)."""
    from workbench import runstore
    from workbench.experiments.sweep import run_sweep
    from workbench.models import model_name
    from workbench.selectors import parse_selector
    from workbench.tasks import check_dataset

    config = sweep_config(args)
    if args.reference is not None and parse_selector(args.reference).label not in config.diagnose.selectors:
        raise WorkbenchError(f"--reference {args.reference!r} is not among the selectors "
                             f"({', '.join(config.diagnose.selectors)}); leave it out to use a default one")
    check_dataset(config.dataset, n=config.n, **config.dataset_options)  # bad data fails before the model loads
    out = runstore.check_out(args.out, kind="sweep", resume=True)
    runstore.check_resumable(out, "sweep", config.identity(), model_name(args.model))  # before the model loads
    if args.preregistration is not None:  # refused before the model loads
        from workbench.experiments.families import check_preregistration

        folder = runstore.inspect_folder(out) if out.is_dir() else None
        check_preregistration(args.preregistration, out, folder.n_done() if folder is not None else 0,
                              config.diagnose.selectors, config.diagnose.budgets)
    ray = ray_options(args)
    try:
        if args.executor == "ray":
            from workbench.experiments.ray_sweep import import_ray, run_sweep_ray

            import_ray()  # a missing extra fails before any work
            store = run_sweep_ray(args.model, config, out, **ray, device=args.device, dtype=args.dtype, preregistration=args.preregistration)
        else:
            store = run_sweep(load_model(args), config, out, preregistration=args.preregistration)
    except KeyboardInterrupt:
        print(f"kvwb: interrupted: {_standing(out, config.n)}; run the same command to resume: "
              f"{printable(command_line(args), stream=sys.stderr)}", file=sys.stderr)
        return 130
    for name in store.corrupt:
        warn(f"example folder {name} was unreadable; it was moved aside and recomputed")
    if store.failures:
        first = next(iter(store.failures.values()))
        warn(f"{len(store.failures)} example(s) failed and were left out (first {first['example_id']!r}: "
             f"{first['error']}); see {out / runstore.MANIFEST}")
    run, table = summarize_run(out, args.reference)
    say(render(run, table))
    return 0


RAY_OPTIONS = {"workers": 2, "address": None, "cpus_per_worker": 1, "gpus_per_worker": 0}


def ray_options(args) -> dict:
    """The executor's options with their defaults; one given without --executor ray is refused."""
    given = [name for name in RAY_OPTIONS if getattr(args, name) is not None]
    if given and args.executor != "ray":
        raise WorkbenchError(f"--{given[0].replace('_', '-')} applies to --executor ray only: add --executor ray "
                             "or leave it out")
    if (args.gpus_per_worker or 0) < 0:
        raise WorkbenchError(f"--gpus-per-worker must be >= 0, got {args.gpus_per_worker:g}")
    return {name: default if getattr(args, name) is None else getattr(args, name)
            for name, default in RAY_OPTIONS.items()}


def _standing(out, n: int) -> str:
    """Where an interrupted run stands, in words."""
    from workbench import runstore

    folder = runstore.inspect_folder(out) if out.is_dir() else None
    if folder is None or folder.kind != "sweep":
        return f"nothing of the run was written to {out} yet"
    return f"{folder.n_done()} of {n} examples are saved in {out}"
