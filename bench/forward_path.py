"""Issue 44's benchmarks of the one forward path ("Exactness and speed"), as ratios in alternating rounds.

    diagnosis --old TREE --new TREE   a whole Diagnosis, default selectors and budgets (SmolLM2-135M, RULER niah_single at
                                      about 600, 600 and 1,000 tokens), old tree against new, in two
                                      worker processes (one cannot import two versions of the
                                      workbench), each loaded once; per round each example runs in
                                      both, the order swapped every round; ratio new / old per pair
    prefill                           the engine's full prefill (`splice.prefill`) against HF's SDPA
                                      forward of the same ids (cache kept, one logit row), per length
    hooks                             a pass with an empty hook dict against one with no hooks
                                      argument; `ctx.run_with_cache` (every name) against
                                      `ctx.run_with_hooks` (no hooks), the question alone and after a
                                      full repair
    hooks-split                       where run_with_cache's cost over a full repair goes: each
                                      names_filter (the attention maps, the final points) against the
                                      bare pass, and the floor of writing the maps alone

Each prints markdown (median and range of the per-round ratios, and each side's median seconds).
Threads: `KVWB_THREADS` as set when run. Run on a quiet machine; see docs/BENCHMARKS.md.

    KVWB_THREADS=2 .venv/bin/python bench/forward_path.py diagnosis --old /tmp/old44b --new /tmp/new44
    KVWB_THREADS=1 PYTHONPATH=/tmp/new44 .venv/bin/python bench/forward_path.py prefill
    KVWB_THREADS=2 PYTHONPATH=/tmp/new44 .venv/bin/python bench/forward_path.py hooks
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (example index, ruler target_tokens): two of about 600 context tokens and one of about 1,000
EXAMPLES = ((0, 560), (1, 560), (2, 960))
TASK = "ruler:niah_single"
STUDIES = "workbench.cli answerability"  # the background study queues a paused block stops


def _clock(fn) -> float:
    """Seconds `fn()` takes (`workbench.bench.ratios._time`: CUDA synchronised where present)."""
    from workbench.bench.ratios import _time

    return _time(fn)


def _summary(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"


def _model():
    from workbench.models import load_model

    return load_model("smollm2-135m", device="cpu")


# --- diagnosis: a worker per tree --------------------------------------------------------------

def worker() -> int:
    """Load the model and the examples, then diagnose example i for each line "i" read on stdin,
    answering one JSON line: seconds, tokens, and the outcomes' answers (to check both trees agree)."""
    from workbench.diagnosis import DiagnoseConfig, diagnose
    from workbench.tasks import load_example

    from workbench.selectors import default_selectors

    model = _model()
    examples = [load_example(f"{TASK}#{i}", tokenizer=model.tokenizer, target_tokens=t) for i, t in EXAMPLES]
    config = DiagnoseConfig.of(selectors=default_selectors())  # the 12 default specs (no oracle-patch), default budgets
    print(json.dumps({"ready": True, "workbench": os.path.dirname(sys.modules["workbench"].__file__)}), flush=True)
    quick = config.with_(budgets=(0.1,), attribution=False)  # a warm-up through every selector's code
    for line in sys.stdin:
        i, *mode = line.split()
        i, box = int(i), {}
        cfg = quick if mode == ["quick"] else config
        seconds = _clock(lambda: box.setdefault("d", diagnose(model, examples[i], cfg, progress=False)))
        d = box["d"]
        outcomes = d.tables["outcomes"]
        answers = [str(a) for a in outcomes["answer"]] if "answer" in outcomes else []
        print(json.dumps({"i": i, "s": seconds, "n_tokens": d.context.n_tokens, "rows": len(outcomes),
                          "dense": d.answers.dense.text, "answers": answers,
                          "repairs_s": d.timing.repairs_s, "signals_s": d.timing.signals_s}), flush=True)
    return 0


def _spawn(tree: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker"], env=env, cwd=tree,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = json.loads(proc.stdout.readline())
    if not ready["workbench"].startswith(os.path.abspath(tree)):
        raise SystemExit(f"worker for {tree} imported the workbench from {ready['workbench']}")
    return proc


def _ask(proc: subprocess.Popen, i: int, mode: str = "") -> dict:
    proc.stdin.write(f"{i} {mode}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _studies(signal: str) -> str:
    """Pause (STOP) or resume (CONT) the background study queues; returns the UTC time and load."""
    subprocess.run(["pkill", f"-{signal}", "-f", STUDIES], check=False)
    stamp = f"{signal} {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.2f}"
    print(stamp, file=sys.stderr, flush=True)
    return stamp


def diagnosis(args) -> int:
    blocks = list(args.blocks)  # seconds each paused block may last; the queues run between blocks
    procs = {"old": _spawn(args.old), "new": _spawn(args.new)}
    pairs = 0
    try:
        for name in ("old", "new"):  # warm-up, before any pause: one Diagnosis of the first example in each tree
            _ask(procs[name], 0, "quick" if args.quick_warmup else "")
        if args.pause:
            _studies("STOP")
        block_start = time.perf_counter()
        times = {(name, i): [] for name in procs for i in range(len(EXAMPLES))}
        ratios = {i: [] for i in range(len(EXAMPLES))}
        last, pair_s = {}, {}
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for i in args.examples:
                shortest = min(t for _, t in EXAMPLES)  # an unseen example: the longest pair scaled by its length, + 20%
                guess = pair_s.get(i, 1.2 * max(pair_s.values(), default=0.0) * EXAMPLES[i][1] / shortest)
                if pairs and time.perf_counter() - block_start + 1.1 * guess > blocks[0]:  # the pair would overrun
                    blocks.pop(0)
                    if not blocks:
                        raise StopIteration
                    if args.pause:
                        _studies("CONT")
                        time.sleep(args.gap_s)
                        _studies("STOP")
                    block_start = time.perf_counter()
                pair_start = time.perf_counter()
                got = {name: _ask(procs[name], i) for name in order}
                for name in order:
                    times[(name, i)].append(got[name]["s"])
                    last[(name, i)] = got[name]
                ratios[i].append(got["new"]["s"] / got["old"]["s"])
                pair_s[i], pairs = max(pair_s.get(i, 0.0), time.perf_counter() - pair_start), pairs + 1
                print(f"round {r + 1} example {i}: old {got['old']['s']:.2f} s, new {got['new']['s']:.2f} s "
                      f"(load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    except StopIteration:
        pass
    finally:
        if args.pause:
            _studies("CONT")
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    print(f"Whole Diagnosis, default selectors and budgets, {TASK}, {pairs} old/new pairs after a warm-up "
          f"(KVWB_THREADS={os.environ.get('KVWB_THREADS', 'unset')})\n")
    print("| example | tokens | cells (outcome rows) | old s (median, range) | new s (median, range) "
          "| new ÷ old per round (median, range) | same answers |")
    print("|---|---|---|---|---|---|---|")
    for i in (i for i in range(len(EXAMPLES)) if ratios[i]):
        o, n = last[("old", i)], last[("new", i)]
        same = o["answers"] == n["answers"] and o["dense"] == n["dense"]
        to, tn = times[("old", i)], times[("new", i)]
        print(f"| {TASK}#{i} | {n['n_tokens']} | {n['rows']} | {statistics.median(to):.2f} ({min(to):.2f}–{max(to):.2f}) "
              f"| {statistics.median(tn):.2f} ({min(tn):.2f}–{max(tn):.2f}) | {_summary(ratios[i])} | {same} |")
    every = [x for i in ratios for x in ratios[i]]
    print(f"\nAll pairs: new ÷ old {_summary(every)} over {len(every)} pairs")
    return 0


def _pairs(label: str, a_fn, b_fn, rounds: int, warm: bool = True) -> str:
    """A and B alternately (which runs first swapped each round) after a warm-up of each; a table row
    "| label | A s | B s | A / B per round |" (medians and ranges), each round's seconds on stderr."""
    if warm:
        a_fn(), b_fn()
    t_a, t_b, ratios = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            a, b = _clock(a_fn), _clock(b_fn)
        else:
            b, a = _clock(b_fn), _clock(a_fn)
        t_a.append(a), t_b.append(b), ratios.append(a / b)
        print(f"{label} round {r + 1}: {a:.3f} s / {b:.3f} s", file=sys.stderr, flush=True)
    return (f"| {label} | {statistics.median(t_a):.3f} ({min(t_a):.3f}–{max(t_a):.3f}) "
            f"| {statistics.median(t_b):.3f} ({min(t_b):.3f}–{max(t_b):.3f}) | {_summary(ratios)} |")


# --- prefill: the engine against HF's SDPA forward ----------------------------------------------

def prefill_ratios(args) -> int:
    import torch

    from workbench.context import build_context
    from workbench.splice import prefill
    from workbench.tasks import load_example

    model = _model()
    print(f"Engine prefill ÷ HF SDPA forward, {args.rounds} alternating rounds after a warm-up, "
          f"torch threads {torch.get_num_threads()} (KVWB_THREADS={os.environ.get('KVWB_THREADS', 'unset')})\n")
    print("| tokens | engine s (median, range) | HF s (median, range) | engine ÷ HF per round (median, range) "
          "| max abs K diff |")
    print("|---|---|---|---|---|")
    for n in args.lengths:
        ex = load_example(f"{TASK}#0", tokenizer=model.tokenizer, target_tokens=n)
        ids = build_context(model, ex).layout.ids[:n]  # [pos]
        if len(ids) < n:
            raise SystemExit(f"example has {len(ids)} tokens, fewer than {n}")

        def hf():
            with torch.inference_mode():
                return model.hf(input_ids=ids[None], use_cache=True, logits_to_keep=1).cache

        def engine():
            return prefill(model, ids)

        ref, got = hf(), engine()  # warm-up, and a check that both computed the same keys
        diff = max(float((got.keys[l] - ref.layers[l].keys[0]).abs().max()) for l in range(got.keys.shape[0]))
        print(_pairs(str(n), engine, hf, args.rounds, warm=False) + f" {diff:.1e} |", flush=True)
    return 0


# --- hooks: none registered, and run_with_cache ------------------------------------------------

def hooks(args) -> int:
    import torch

    from workbench.context import build_context
    from workbench.splice import prefill
    from workbench.tasks import load_example

    model = _model()
    ctx = build_context(model, load_example(f"{TASK}#2", tokenizer=model.tokenizer, target_tokens=960))
    ids = ctx.layout.ids  # [pos]
    every = ctx.reused_positions  # [n_reused]: a full repair
    print(f"Hooks, {args.rounds} alternating rounds after a warm-up, {TASK}#2, {len(ids)} tokens "
          f"(question {len(ctx.suffix_ids)}, reused {len(every)}), torch threads {torch.get_num_threads()} "
          f"(KVWB_THREADS={os.environ.get('KVWB_THREADS', 'unset')})\n")
    print("| pass | A s (median, range) | B s (median, range) | A ÷ B per round (median, range) |")
    print("|---|---|---|---|")
    print(_pairs("prefill: A hooks={} / B no hooks argument", lambda: prefill(model, ids, hooks={}),
                 lambda: prefill(model, ids), args.rounds), flush=True)
    print(_pairs("full repair: A ctx.repair(rows, hooks={}) / B ctx.repair(rows)",
                 lambda: ctx.repair(every, hooks={}), lambda: ctx.repair(every), args.rounds), flush=True)
    print(_pairs("question: A run_with_cache() / B run_with_hooks()", lambda: ctx.run_with_cache(),
                 lambda: ctx.run_with_hooks(), args.rounds), flush=True)
    print(_pairs("full repair + question: A run_with_cache(rows) / B run_with_hooks(rows)",
                 lambda: ctx.run_with_cache(every), lambda: ctx.run_with_hooks(every), args.rounds), flush=True)
    return 0


def hooks_split(args) -> int:
    """Where `run_with_cache`'s cost over a full repair goes: each names_filter against the bare pass,
    and the floor of the attention maps alone (writing that many fresh fp32 maps, a softmax over half)."""
    import torch

    from workbench.context import build_context
    from workbench.tasks import load_example

    model = _model()
    ctx = build_context(model, load_example(f"{TASK}#2", tokenizer=model.tokenizer, target_tokens=960))
    every = ctx.reused_positions  # [n_reused]: a full repair
    maps, final = ("hook_attn_scores", "hook_pattern"), ("hook_unembed", "ln_final.hook_normalized")
    filters = {"every name": None,
               "every name but the attention maps": lambda n: not n.endswith(maps),
               "every name but ln_final and hook_unembed": lambda n: n not in final,
               "neither": lambda n: not n.endswith(maps) and n not in final}
    print(f"run_with_cache(rows) by names_filter ÷ run_with_hooks(rows), {args.rounds} alternating rounds, "
          f"{TASK}#2, {len(ctx.layout.ids)} tokens, torch threads {torch.get_num_threads()}\n")
    print("| names_filter | A s (median, range) | bare s (median, range) | A ÷ bare per round (median, range) |")
    print("|---|---|---|---|")
    for label, keep in filters.items():
        print(_pairs(label, lambda keep=keep: ctx.run_with_cache(every, names_filter=keep),
                     lambda: ctx.run_with_hooks(every), args.rounds), flush=True)
    n_layers, n_heads = model.adapter.n_layers, model.adapter.n_heads
    shape = (1, n_heads, len(every) + len(ctx.suffix_ids), len(ctx.layout.ids))
    write, soft = [], []
    for _ in range(args.rounds):
        maps_kept = []
        write.append(_clock(lambda: maps_kept.extend(torch.empty(shape).fill_(1.0) for _ in range(2 * n_layers))))
        soft.append(_clock(lambda: [m.softmax(-1) for m in maps_kept[:n_layers]]))
        del maps_kept
    gb = 2 * n_layers * torch.Size(shape).numel() * 4 / 1e9
    print(f"\nfloor: writing {2 * n_layers} fresh fp32 maps {list(shape)} ({gb:.2f} GB) {statistics.median(write):.3f} s, "
          f"a softmax over {n_layers} of them {statistics.median(soft):.3f} s (medians of {args.rounds})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("worker")
    p = sub.add_parser("diagnosis")
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=lambda x: [float(v) for v in x.split(",")], default=[600.0],
                   help="seconds of each timing block (no round starts that would overrun it)")
    p.add_argument("--examples", type=lambda x: [int(v) for v in x.split(",")], default=list(range(len(EXAMPLES))),
                   help="indices into EXAMPLES to time, in this order each round")
    p.add_argument("--quick-warmup", action="store_true", help="warm up at one budget without the attribution check")
    p.add_argument("--pause", action="store_true", help="pause the study queues during each block, resume between")
    p.add_argument("--gap-s", type=float, default=120.0, help="seconds the queues run between blocks")
    p = sub.add_parser("prefill")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[1024, 4096])
    p.add_argument("--rounds", type=int, default=5)
    p = sub.add_parser("hooks")
    p.add_argument("--rounds", type=int, default=5)
    p = sub.add_parser("hooks-split")
    p.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    return {"worker": lambda: worker(), "diagnosis": lambda: diagnosis(args), "prefill": lambda: prefill_ratios(args),
            "hooks": lambda: hooks(args), "hooks-split": lambda: hooks_split(args)}[args.what]()


if __name__ == "__main__":
    sys.exit(main())
