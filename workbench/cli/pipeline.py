"""`kvwb pipeline`: the multi-agent reuse scenario (KVComm, its gates and policies) into a run
folder, resumable, then its summary tables."""

from __future__ import annotations

from workbench.cli.common import (
    add_dataset_options, add_model_options, answer_limit, dataset_options, example_count, load_model, names,
    positive_int, printable, say, warnings_as_lines,
)

NAME = "pipeline"


def add_arguments(p) -> None:
    from workbench.experiments.pipeline_run import DEFAULT_METHODS, TOPOLOGIES
    from workbench.pipeline.calls import KVCOMM_VARIANTS

    add_model_options(p)
    p.add_argument("--agents", type=positive_int, default=4, help="agents per pipeline, 1 to 5 (default 4)")
    p.add_argument("--topology", choices=sorted(TOPOLOGIES), default="full",
                   help="full: every agent reads every earlier one (BCR's setting, default); chain: only the one before")
    p.add_argument("--dataset", default="synthetic", help="data set spec (default synthetic); each example is a request")
    p.add_argument("--n", type=example_count, default=60, help="requests (default 60)")
    add_dataset_options(p, ("max_passages", "max_passage_tokens"))
    p.add_argument("--methods", type=names, default=DEFAULT_METHODS,
                   help=f"comma-separated reuse methods, run in this order (default {','.join(DEFAULT_METHODS)})")
    p.add_argument("--seed", type=int, default=0, help="run seed of the drawn policies (coin-alloc)")
    p.add_argument("--max-new-tokens", type=answer_limit, default=24, help="each agent's answer limit (default 24)")
    p.add_argument("--repair-on", default=None, metavar="METHOD",
                   help="repair the final call of METHOD (e.g. kvcomm) wherever it was served from a predicted "
                        "cache, with BCR's selectors, cacheblend, densedev and cadence-grad "
                        "(pipeline.repair.REPAIR_SELECTORS) at rho in 0.05..0.4 against the five-draw coin (BCR's "
                        "repair on top; slow)")
    p.add_argument("--kvcomm", choices=KVCOMM_VARIANTS, default="code",
                   help="code: KVComm as its code runs (the gate once per message, the prompt's tail served from "
                        "the pool; default); legacy: the gate on every call, the suffix prefilled exactly (runs "
                        "before issue 28)")
    p.add_argument("--score", choices=["contains", "em"], default="contains",
                   help="what counts as correct in the summary (default contains)")
    p.add_argument("--out", required=True, help="run folder; an existing run with the same settings resumes")


def command(args) -> int:
    """Run every reuse method over the requests into --out (resumable); print the summary tables."""
    from workbench.experiments.pipeline_run import PipelineConfig, run_pipeline
    from workbench.experiments.pipeline_summary import repair_summary, summarize_pipeline
    from workbench.report.markdown import markdown_table
    from workbench.runstore import check_out, load_pipeline
    from workbench.tasks import check_dataset

    config = PipelineConfig(agents=args.agents, topology=args.topology, dataset=args.dataset, n=args.n,
                            dataset_options=dataset_options(args),
                            methods=tuple(args.methods), seed=args.seed, max_new_tokens=args.max_new_tokens,
                            repair_on=args.repair_on, kvcomm=args.kvcomm).checked()
    check_dataset(config.dataset, n=config.n, **config.dataset_options)  # bad data fails before the model loads
    out = check_out(args.out, kind="pipeline", resume=True)
    model = load_model(args)
    with warnings_as_lines():  # a request file that was unreadable, moved aside and recomputed
        run_pipeline(model, config, out)
    run = load_pipeline(out)
    tables = summarize_pipeline(run.requests, run.calls, score=args.score)
    repair = repair_summary(run.repair)
    if not repair.empty:  # the columns BCR's Table 5a reads; the app and the parquet hold the rest
        tables["repair (final calls served from a prediction; b/c against the coin)"] = repair[
            ["selector", "unit", "budget", "n", "em", "flip_rate", "ref_b", "ref_c", "ref_p"]]
    for name, table in tables.items():
        if not table.empty:
            say(f"\n{name}\n" + markdown_table(table))
    print(f"wrote {printable(out)}")
    return 0
