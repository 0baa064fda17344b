"""Throughput scaling (issue 16): examples per hour of the default sweep with the local executor
and with the Ray executor at each worker count, measured one after another in one process on the
same examples, each into a fresh run folder.

Each figure is the wall time a user waits for `kvwb run`: the model load (the local executor's;
for Ray, the local cluster's start and every actor's load) and every example. The local
executor runs torch's threads (the cores); each Ray worker runs one thread on its one CPU.

    table = executor_throughput("smollm2-135m", n=6, workers=(1, 2))
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from workbench.diagnosis import DiagnoseConfig
from workbench.errors import WorkbenchError
from workbench.experiments.ray_sweep import run_sweep_ray
from workbench.experiments.sweep import SWEEP_DIAGNOSE, SweepConfig, run_sweep
from workbench.models import load_model


def executor_throughput(model_spec: str, n: int = 6, workers=(1, 2), dataset: str = "synthetic",
                        diagnose: DiagnoseConfig = SWEEP_DIAGNOSE, progress: bool = True) -> pd.DataFrame:
    """One row per executor setting: workers, threads each, seconds, examples per hour and the
    ratio to the local executor's (the default sweep's Diagnosis unless `diagnose` says otherwise).
    Raises if any example fails (a throughput of failures means nothing); bad worker counts are
    refused before the local sweep runs."""
    bad = [w for w in workers if isinstance(w, bool) or not isinstance(w, int) or w < 1]
    if bad or not workers:
        raise WorkbenchError(f"Ray worker counts (--workers) must be integers >= 1, got {list(workers)}")
    config = SweepConfig(dataset=dataset, n=n, diagnose=diagnose).checked()
    rows = []

    def timed(executor: str, count: int, threads: int, run) -> None:
        start = time.perf_counter()
        store = run()
        if store.failures:
            raise WorkbenchError(f"failed examples in the {executor} run ({count} workers), {len(store.failures)} of {n}; the first: "
                                 f"{next(iter(store.failures.values()))['error']}")
        rows.append({"executor": executor, "workers": count, "threads_each": threads,
                     "seconds": time.perf_counter() - start})

    with tempfile.TemporaryDirectory(prefix="kvwb-executors-") as tmp:
        timed("local", 1, torch.get_num_threads(),
              lambda: run_sweep(load_model(model_spec), config, Path(tmp) / "local", progress=progress))
        for count in workers:
            timed("ray", count, 1, lambda: run_sweep_ray(model_spec, config, Path(tmp) / f"ray-{count}", workers=count,
                                                        cpus_per_worker=1, progress=progress))
    table = pd.DataFrame(rows)
    table["examples_per_hour"] = n * 3600 / table["seconds"]
    table["vs_local"] = table["examples_per_hour"] / table["examples_per_hour"].iloc[0]
    return table
