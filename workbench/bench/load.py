"""Under load: how much one workbench process slows down while a second one runs beside it.

Each measurement runs in fresh processes, because the OpenMP wait policy is read once, when
torch loads. The measured process times a dense prefill plus greedy answer of a synthetic
example (the small-op-heavy part of every Diagnosis: one-token decode steps); the second
process runs the same work in a loop for as long as the first needs. The figure is the
slowdown: the median time with the neighbour over the median time alone, per setting.

    python -m workbench.bench.load time  MODEL REPEATS   (prints the median seconds as JSON)
    python -m workbench.bench.load spin  MODEL           (runs until killed)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pandas as pd

from workbench.threads import available_cores

POLICIES = ("", "ACTIVE", "PASSIVE")  # "": the OpenMP runtime's default (workbench.threads)


def _workload(model_name: str):
    from workbench import build_context, load_example, load_model
    from workbench.splice import prefill

    model = load_model(model_name)
    ctx = build_context(model, load_example("synthetic#0"))
    ids = ctx.layout.ids[: ctx.layout.suffix_start]  # [context]

    def once():
        ctx.generate(prefill(model, ids), max_new_tokens=16)
    return once


def _time_child(model_name: str, repeats: int) -> None:
    once = _workload(model_name)
    once()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_s": statistics.median(times)}))


def _spin_child(model_name: str) -> None:
    once = _workload(model_name)
    print("ready", flush=True)
    while True:
        once()


def _env(policy: str, threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_WAIT_POLICY=policy, KVWB_THREADS=str(threads))
    env.pop("OMP_NUM_THREADS", None)
    return env


def _timed(model_name: str, policy: str, threads: int, repeats: int) -> float:
    out = subprocess.run([sys.executable, "-m", "workbench.bench.load", "time", model_name, str(repeats)],
                         env=_env(policy, threads), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_s"]


def _neighbour(model_name: str, policy: str, threads: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "workbench.bench.load", "spin", model_name],
                            env=_env(policy, threads), stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()  # "ready": the neighbour's model is loaded and it is working
    return proc


def load_slowdown(model_name: str, threads=(2, 1), policies=POLICIES, repeats: int = 5) -> pd.DataFrame:
    """One row per (policy, threads): alone, beside a second process, and the slowdown."""
    from tqdm.auto import tqdm

    rows = []
    threads = [t for t in threads if t <= available_cores()] or [1]  # KVWB_THREADS is bounded by the cores
    settings = [(p, t) for p in policies for t in threads]
    for policy, n in tqdm(settings, desc="under load", unit="setting"):
        alone = _timed(model_name, policy, n, repeats)
        neighbour = _neighbour(model_name, policy, n)
        try:
            loaded = _timed(model_name, policy, n, repeats)
        finally:
            neighbour.kill()
            neighbour.wait()
        rows.append({"OMP_WAIT_POLICY": policy or "runtime default", "threads": n, "alone s": round(alone, 3),
                     "beside a second process s": round(loaded, 3), "slowdown": round(loaded / alone, 2)})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    if sys.argv[1] == "time":
        _time_child(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "spin":
        _spin_child(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
