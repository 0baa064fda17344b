"""The Ray executor on a real local cluster (2 CPUs, 2 workers) with the tiny model saved to a
folder: the same outcomes as the local executor, one run store, resume across executors, and a
failing example recorded while the others go on, and a worker killed mid-run losing only its
example in flight."""

import json
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import tiny_model
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.models import load_model
from workbench.runstore import load_sweep

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (make test installs it)")
from workbench.experiments.ray_sweep import run_sweep_ray  # noqa: E402

pytestmark = pytest.mark.slow

DIAGNOSE = DiagnoseConfig(selectors=("none", "random", "cadence-grad", "bcr:single"), budgets=(0.3,),
                          max_new_tokens=3, attribution=False)
KEYS = ["example_id", "selector", "budget", "draw"]
COMPARED = ["answer", "flip", "flip_strict", "n_recomputed", "em"]


def data(path: Path, ids, long_id=None) -> str:
    base = {"passages": ["Varek Olundi is coached by Mira Tessk.", "Mira Tessk was born in Tressamor."],
            "question": "Where was Varek Olundi's coach born?", "answers": ["Tressamor"]}
    rows = [{**base, "id": i} for i in ids]
    if long_id:
        rows.append({**base, "id": long_id, "passages": [base["passages"][0], "x " * 3000]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    model = tiny_model("llama")
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return folder


def test_ray_runs_equal_local_runs_and_share_one_run_store(cluster, model_folder, tmp_path):
    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ["a", "b", "c"], long_id="toolong"), n=4,
                         diagnose=DIAGNOSE)
    torch.set_num_threads(1)
    run_sweep(load_model(str(model_folder)), config, tmp_path / "local", progress=False)
    store = run_sweep_ray(str(model_folder), config, tmp_path / "ray", workers=2, progress=False)
    assert store.n_done == 3 and list(store.failures) == ["toolong"]
    assert "longer than the model's maximum" in store.failures["toolong"]["error"]

    local, remote = load_sweep(tmp_path / "local"), load_sweep(tmp_path / "ray")
    assert remote.manifest.status == "complete" and remote.manifest.details["executor"] == "ray"
    assert remote.example_ids == local.example_ids == ["a", "b", "c"]
    merged = local.outcomes.merge(remote.outcomes, on=KEYS, suffixes=("_local", "_ray"))
    assert len(merged) == len(local.outcomes) == len(remote.outcomes)
    for column in COMPARED:
        assert (merged[f"{column}_local"] == merged[f"{column}_ray"]).all(), column
    picks = {key: pd.concat([run.diagnosis(i).selections for i in run.example_ids]) for key, run in
             (("local", local), ("ray", remote))}
    assert [list(p) for p in picks["local"]["positions"]] == [list(p) for p in picks["ray"]["positions"]]

    # resume: a local run on the Ray run's folder recomputes nothing but the failed example
    again = run_sweep(load_model(str(model_folder)), config, tmp_path / "ray", progress=False)
    assert again.n_done == 3 and list(again.failures) == ["toolong"]
    assert load_sweep(tmp_path / "ray").outcomes.equals(remote.outcomes)


def test_ray_refuses_bad_worker_settings_before_any_work(tmp_path):
    from workbench.errors import WorkbenchError

    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=DIAGNOSE)
    with pytest.raises(WorkbenchError, match="workers must be >= 1"):
        run_sweep_ray("nowhere", config, tmp_path / "r", workers=0, progress=False)
    assert not (tmp_path / "r").exists()


def test_an_address_beside_a_cluster_already_initialised_is_refused(cluster, tmp_path):
    from workbench.errors import WorkbenchError

    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=DIAGNOSE)
    with pytest.raises(WorkbenchError, match="already initialised in this process"):
        run_sweep_ray("nowhere", config, tmp_path / "r", address="127.0.0.1:6379", progress=False)
    assert not (tmp_path / "r").exists() and ray.is_initialized()


def test_a_second_driver_on_the_same_run_folder_is_refused(cluster, model_folder, tmp_path):
    from workbench.errors import WorkbenchError
    from workbench.runstore import run_lock

    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=DIAGNOSE)
    out = tmp_path / "ray"
    with run_lock(out):  # the first driver
        with pytest.raises(WorkbenchError, match=f"is being written by process {os.getpid()}"):
            run_sweep_ray(str(model_folder), config, out, workers=1, progress=False)
        assert [p.name for p in out.iterdir()] == [".lock"]  # the second wrote nothing


def test_kvwb_run_with_the_ray_executor(cluster, model_folder, tmp_path, capsys):
    from workbench.cli.main import main as kvwb

    spec = data(tmp_path / "d.jsonl", ["a", "b"])
    argv = ["run", "--model", str(model_folder), "--dataset", spec, "--n", "2", "--selectors", "none,random",
            "--budgets", "0.3", "--max-new-tokens", "3", "--executor", "ray", "--workers", "2",
            "--out", str(tmp_path / "run")]
    assert kvwb(argv) == 0
    out = capsys.readouterr().out
    assert "2 examples (0 failed)" in out
    assert load_sweep(tmp_path / "run").manifest.details["executor"] == "ray"


def sweep_until_first_saved(model_folder, config, out):
    """Start a 2-worker Ray sweep in a thread; once its first example is saved and the driver has
    written the run's tables with it, return the thread, its result (store or error) and the two
    worker processes (psutil). (Waiting for the worker's folder alone raced the driver on a loaded
    machine: killed before the driver adopted it, the run had the example on disk but no tables.)"""
    psutil = pytest.importorskip("psutil")
    result = {}

    def sweep():
        try:
            result["store"] = run_sweep_ray(str(model_folder), config, out, workers=2, progress=False)
        except BaseException as err:  # noqa: BLE001 - reported by the callers' assertions
            result["error"] = err

    thread = threading.Thread(target=sweep)
    thread.start()
    deadline = time.time() + 120
    while not ((out / "diagnoses").is_dir() and any(p.name[0] != "." for p in (out / "diagnoses").iterdir())
               and (out / "examples.parquet").is_file()):
        assert time.time() < deadline and thread.is_alive(), result
        time.sleep(0.05)
    ours = os.getpid()  # this test's cluster: its raylet is our child, the workers the raylet's
    workers = [p for p in psutil.process_iter(["cmdline"]) if "SweepWorker" in " ".join(p.info["cmdline"] or [])
               and ours in {q.pid for q in p.parents()}]
    assert len(workers) == 2, [w.info["cmdline"] for w in workers]
    return thread, result, workers


def test_a_worker_that_dies_loses_only_its_example_in_flight(cluster, model_folder, tmp_path):
    """SIGKILL one worker process once the first example is saved: the run goes on with the other
    worker, records exactly the killed worker's example as failed, and a rerun recomputes it."""
    ids = [f"q{i}" for i in range(8)]
    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ids), n=len(ids), diagnose=DIAGNOSE)
    out = tmp_path / "ray"
    thread, result, workers = sweep_until_first_saved(model_folder, config, out)
    workers[0].kill()
    thread.join(300)
    assert "error" not in result, result.get("error")
    store = result["store"]
    assert len(store.failures) == 1 and store.n_done == len(ids) - 1
    assert "worker died" in next(iter(store.failures.values()))["error"]
    again = run_sweep(load_model(str(model_folder)), config, out, progress=False)
    assert again.n_done == len(ids) and not again.failures


def test_a_run_whose_workers_all_die_ends_interrupted_with_its_cause(cluster, model_folder, tmp_path):
    """SIGKILL both workers: the run stops with a one-line error, and its manifest says
    `interrupted` with that error (it stayed `running` before), keeping what was saved."""
    from workbench.errors import WorkbenchError

    ids = [f"q{i}" for i in range(8)]
    config = SweepConfig(dataset=data(tmp_path / "d.jsonl", ids), n=len(ids), diagnose=DIAGNOSE)
    out = tmp_path / "ray"
    thread, result, workers = sweep_until_first_saved(model_folder, config, out)
    for worker in workers:
        worker.kill()
    thread.join(300)
    assert isinstance(result.get("error"), WorkbenchError) and "every worker died" in str(result["error"])
    run = load_sweep(out)
    assert run.manifest.status == "interrupted" and run.manifest.end is not None
    assert run.manifest.details["error"].startswith("WorkbenchError: every worker died")
    assert 1 <= len(run.example_ids) < len(ids)
    again = run_sweep(load_model(str(model_folder)), config, out, progress=False)
    assert again.n_done == len(ids) and not again.failures and load_sweep(out).manifest.status == "complete"


def test_executor_throughput_times_local_and_each_worker_count(cluster, model_folder, tmp_path):
    from workbench.bench.executors import executor_throughput
    from workbench.errors import WorkbenchError

    spec = data(tmp_path / "d.jsonl", ["a", "b"])
    table = executor_throughput(str(model_folder), n=2, workers=(1, 2), dataset=spec, diagnose=DIAGNOSE, progress=False)
    assert list(table["executor"]) == ["local", "ray", "ray"] and list(table["workers"]) == [1, 1, 2]
    assert (table["seconds"] > 0).all() and table["vs_local"].iloc[0] == 1.0
    assert table["examples_per_hour"].tolist() == pytest.approx((2 * 3600 / table["seconds"]).tolist())
    with pytest.raises(WorkbenchError, match=r"failed examples in the local run \(1 workers\), 1 of 2"):  # a throughput of failures means nothing
        executor_throughput(str(model_folder), n=2, workers=(1,), dataset=data(tmp_path / "e.jsonl", ["a"], "long"),
                            diagnose=DIAGNOSE, progress=False)


def test_workers_on_other_code_packages_or_hardware_are_refused():
    from workbench.errors import WorkbenchError
    from workbench.experiments.ray_sweep import check_environments
    from workbench.runstore.environment import environment

    here = environment()
    check_environments([here, dict(here)])  # the same: nothing to say
    for key, value, said in (("code", {"revision": "b" * 40}, "workbench code"),
                             ("versions", {"torch": "0.0"}, "package versions"),
                             ("device", {"cpu": "Another CPU", "gpu": None}, "CPU or GPU")):
        with pytest.raises(WorkbenchError, match=f"different {said}"):
            check_environments([here, {**here, key: value}])


def test_workers_that_import_other_code_than_the_driver_are_refused():
    """Ray puts the driver's working directory first on its workers' import path: a run started in one
    checkout with another on PYTHONPATH (a frozen worktree) would run the first's code in its workers."""
    from workbench.errors import WorkbenchError
    from workbench.experiments.ray_sweep import check_environments
    from workbench.runstore.environment import environment

    here = environment()
    check_environments([here, dict(here)], driver=here["code"])  # the workers run the driver's code
    with pytest.raises(WorkbenchError, match="working directory"):
        check_environments([here, dict(here)], driver={**here["code"], "revision": "b" * 40})
