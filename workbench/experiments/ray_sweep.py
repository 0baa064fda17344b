"""`run_sweep_ray`: the same sweep on a Ray cluster (an optional extra: `pip install
'kv-repair-workbench[ray]'`).

One actor per worker loads the model once (`SweepWorker.__init__`); each example is one task.
A worker diagnoses its example and writes the Diagnosis into the run folder itself, atomically
(`diagnoses/FOLDER/` appears whole or not at all); the driver holds the run's lock, writes the
manifest and rewrites the run's tables as examples come back. The run folder is the local
executor's, byte for byte in layout: resume skips examples any earlier run finished (local or
Ray), the app and `kvwb summary` read it unchanged, and an example that raises is recorded
with its error while the others go on. A worker that dies loses only its example in flight,
recorded as failed; running the same command again recomputes it.

Every worker must see the run folder at the same path (one machine, or a shared file system).

Provenance: the environment a session's examples are recorded under (the manifest's segments)
is the first worker's, read in the worker (its code, packages, CPU or GPU and threads), not the
driver's; workers whose code or package versions differ are refused.
"""

from __future__ import annotations

import math
import os
import signal
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from urllib.parse import urlsplit

from tqdm.auto import tqdm

from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, check_some_done, place_preregistration_of
from workbench.models import load_model, model_identity
from workbench.runstore import DIAGNOSES, SweepStore, check_out, folder_name, run_lock
from workbench.runstore.lock import lock_holder, process_state
from workbench.runstore.environment import WARNED, environment
from workbench.tasks import Example

RAY_MISSING = "the Ray executor needs Ray: pip install 'kv-repair-workbench[ray]' (or pip install ray)"
PROBE_SECONDS = 3.0  # how long a cluster address may take to accept a TCP connection
SCALE_SECONDS = 600.0  # how long a joined cluster that lacks the resources may take to provide them


def import_ray():
    """The `ray` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise WorkbenchError(RAY_MISSING) from None
    return ray


def connect(ray, address: str | None) -> None:
    """`ray.init` at `address` (None: start a local cluster), or a one-line error within seconds.

    A HOST:PORT address, bare or `ray://` (IPv6 in brackets), is probed with a TCP connect first:
    Ray itself retries an unreachable address for minutes before it gives up. Other forms
    (`auto`, another scheme) go to Ray as they are.
    """
    scheme, _, rest = (address or "").rpartition("://")
    if address not in (None, "auto", "local") and scheme in ("", "ray"):
        try:
            parts = urlsplit("//" + rest)
            host, port = parts.hostname, parts.port  # .port raises ValueError outside 0-65535
        except ValueError:
            host = port = None
        if not host or port is None:
            raise WorkbenchError(f"--address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
        try:
            socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
        except OSError as err:
            raise WorkbenchError(f"cannot reach the Ray cluster at {address} ({err.strerror or err}); is it running "
                                 f"(ray start --head)?") from None
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as err:
        hint = " (ray:// addresses need pip install 'ray[client]')" if "ray[client]" in str(err) else ""
        raise WorkbenchError(f"could not connect to Ray at {address}: {str(err).splitlines()[0]}{hint}") from None
    finally:  # ray.init makes SIGTERM exit at once; the run's own handler ends it as interrupted
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)


def resource_wait(ray, workers: int, cpus: float, gpus: float, joined: bool) -> float | None:
    """None when the cluster holds what the workers ask for (`ray.cluster_resources()`); else a
    one-line error with what was asked and what exists, or, for a joined cluster (which may
    autoscale), a message on stderr and the seconds to wait for it. Ray itself waits forever."""
    have = ray.cluster_resources()
    need = {"CPU": workers * cpus, "GPU": workers * gpus}
    if all(need[r] <= float(have.get(r, 0)) for r in need):
        return None
    asked = (f"{workers} workers x {cpus:g} CPUs and {gpus:g} GPUs each ask Ray for {need['CPU']:g} CPUs and "
             f"{need['GPU']:g} GPUs, but the cluster has {float(have.get('CPU', 0)):g} CPUs and "
             f"{float(have.get('GPU', 0)):g} GPUs")
    if not joined:
        raise WorkbenchError(f"{asked}: lower --workers, --cpus-per-worker or --gpus-per-worker")
    print(f"kvwb: {asked}; waiting up to {SCALE_SECONDS:g} s for it to scale up", file=sys.stderr)
    return SCALE_SECONDS


DRIVER_POLL_SECONDS = 2.0  # how often a worker looks whether its driver still lives


def driver_holds(run: Path, driver: tuple[int, str]) -> None:
    """Raise unless `run`'s lock still names `driver` (process id, host) and that process lives: a
    worker's write guard (`Diagnosis.save(guard=...)`), so a worker that outlives its driver, or whose
    run folder was emptied or taken by another writer since, writes nothing."""
    holder = lock_holder(run)
    if holder != tuple(driver) or process_state(*driver) == "gone":
        raise WorkbenchError(f"{run}: the driver (process {driver[0]} on {driver[1]}) no longer holds the run's lock "
                             f"(it names {'no one' if holder is None else 'process %d on %s' % holder}); this "
                             f"worker's example is not written")


def end_with_driver(driver: tuple[int, str], exit=os._exit, poll: float = DRIVER_POLL_SECONDS) -> threading.Thread:
    """A daemon thread that ends this process (`exit(1)`) once the driver's process is gone; a driver on
    another host cannot be watched from here (its lock guards the writes)."""
    pid, host = driver

    def watch() -> None:
        while (state := process_state(pid, host)) == "alive":
            time.sleep(poll)
        if state == "gone":
            exit(1)

    thread = threading.Thread(target=watch, name="kvwb-driver-watch", daemon=True)
    thread.start()
    return thread


# A watcher of its own (a bare interpreter: os and time only), started beside a driver that starts its
# local cluster: it notes every process under the driver whose command line names the cluster's software
# and, once the driver is gone (a SIGKILL runs no cleanup), kills those still running (the agents that
# outlive their node). argv: the driver's process id, the seconds between looks.
REAPER = r"""
import os, signal, sys, time
driver, poll, me = int(sys.argv[1]), float(sys.argv[2]), os.getpid()
def table():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace").lower()
            except OSError:
                continue
            rest = stat[stat.rindex(")") + 2:].split()
            out[int(name)] = (int(rest[1]), rest[19], line)
    return out
seen = {}
while True:
    now = table()
    if driver not in now:
        break
    below, frontier = set(), [driver]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, (pp, _, _) in now.items() if pp == parent and p not in below and p != me]
        below.update(kids)
        frontier += kids
    seen.update({p: now[p][1] for p in below if "r" + "ay" in now[p][2]})
    time.sleep(poll)
time.sleep(poll)
now = table()
for pid, start in seen.items():
    if pid in now and now[pid][1] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def start_reaper(driver: int, poll: float = DRIVER_POLL_SECONDS):
    """The `REAPER` process watching `driver` (Linux: it reads /proc; elsewhere None)."""
    if not os.path.isdir("/proc"):
        return None
    return subprocess.Popen([sys.executable, "-c", REAPER, str(driver), str(poll)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


class SweepWorker:
    """A Ray actor's state: one loaded model; each call diagnoses one example into the run folder,
    only while its driver holds the run's lock; the actor ends when its driver's process does."""

    def __init__(self, model_spec: str, device: str | None, dtype: str | None, threads: int,
                 driver: tuple[int, str] | None = None):
        import torch

        if driver is not None:
            end_with_driver(driver)
        self.driver = driver
        torch.set_num_threads(max(1, int(threads)))
        self.model = load_model(model_spec, device=device, dtype=dtype)

    def identity(self) -> dict:
        return model_identity(self.model)

    def environment(self) -> dict:
        return environment()

    def examples(self, config: SweepConfig) -> list[Example]:
        return config.load_examples(self.model)

    def run(self, example: Example, config: DiagnoseConfig, folder: str) -> dict:
        """Diagnose `example` and save it to `folder` (atomically); {"error", "traceback"} if it raised."""
        try:
            diagnosis = diagnose(self.model, example, config, progress=False)
        except Exception as err:  # noqa: BLE001 - one bad example must not end the run
            return {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=3)}
        run = Path(folder).parent.parent  # RUN/diagnoses/FOLDER
        try:
            diagnosis.save(folder, overwrite=True, guard=None if self.driver is None else
                           (lambda: driver_holds(run, self.driver)))
        except WorkbenchError as err:
            return {"error": str(err), "traceback": ""}
        return {}


def _start_workers(ray, model_spec: str, workers: int, cpus: float, gpus: float, device, dtype,
                   timeout: float | None) -> tuple[list, dict, dict]:
    """The actors, the model identity they all share and the first one's environment (refused if
    the models, or the code, package versions or hardware, differ: `check_environments`)."""
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(SweepWorker)
    driver = (os.getpid(), socket.gethostname())  # the process that takes the run's lock (`run_lock` writes these)
    actors = [remote.remote(model_spec, device, dtype, max(1, int(cpus)), driver) for _ in range(workers)]
    try:
        identities = ray.get([a.identity.remote() for a in actors], timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise WorkbenchError(f"the Ray cluster did not start the {workers} workers within {timeout:g} s; ask for "
                             f"fewer, or fewer resources each") from None
    prints = {repr(sorted(i["fingerprint"].items())) for i in identities}
    if len(prints) > 1:
        raise WorkbenchError(f"the workers loaded different models ({len(prints)} fingerprints): give every node the "
                             f"same weights, dtype and device kind")
    environments = ray.get([a.environment.remote() for a in actors])
    check_environments(environments, driver=environment()["code"])
    return actors, identities[0], environments[0]


def check_environments(environments: list[dict], driver: dict | None = None) -> None:
    """Refuse workers that run other code, packages or hardware (`runstore.environment.WARNED`): the
    run records the first worker's environment for every example, and on another CPU a near-tie in a
    selector's scores can pick other rows. `driver`: this process's `code`, which the workers must run
    too: Ray puts the driver's working directory on the workers' import path ahead of PYTHONPATH, so a
    run started outside the checkout it imports (a frozen worktree on PYTHONPATH) would run the
    working directory's code in its workers."""
    if driver is not None and any(e.get("code") != driver for e in environments):
        raise WorkbenchError(f"the Ray workers import other workbench code ({environments[0].get('code')}) than this "
                             f"process ({driver}): Ray puts the working directory ({os.getcwd()}) first on the "
                             f"workers' import path; start the run from inside the checkout it should run")
    names = {"code": "workbench code", "versions": "package versions", "device": "CPU or GPU"}
    for key in WARNED:
        what = names.get(key, key)
        seen = sorted({repr(e.get(key)) for e in environments})
        if len(seen) > 1:
            raise WorkbenchError(f"the workers run on different {what} ({'; '.join(seen)}): give every node the same "
                                 "checkout, packages and hardware kind")


def run_sweep_ray(model_spec: str, config: SweepConfig, out: str | Path, *, workers: int = 2,
                  address: str | None = None, cpus_per_worker: float = 1, gpus_per_worker: float = 0,
                  device: str | None = None, dtype: str | None = None, progress: bool = True,
                  preregistration: str | Path | None = None) -> SweepStore:
    """`run_sweep` with `workers` Ray actors, each loading `model_spec` once.

    Connects to `address` ("auto", "HOST:PORT", "ray://HOST:PORT"; a HOST:PORT that does not
    answer fails within seconds) or, with no address, starts a local cluster and stops it at the
    end. If Ray is already initialised in this process, that cluster is used and an address is
    refused. Returns the store, as `run_sweep` does.
    """
    config = config.checked()
    if workers < 1 or not (math.isfinite(cpus_per_worker) and math.isfinite(gpus_per_worker)) or \
            cpus_per_worker <= 0 or gpus_per_worker < 0:
        raise WorkbenchError(f"workers must be >= 1, cpus per worker > 0 and gpus per worker >= 0; got {workers}, "
                             f"{cpus_per_worker}, {gpus_per_worker}")
    ray = import_ray()
    out = check_out(out, kind="sweep", resume=True)
    started_here = not ray.is_initialized()
    reaper = None
    if started_here:
        connect(ray, address)
        reaper = start_reaper(os.getpid())  # the cluster's processes end with this one, even if it is killed
    elif address is not None:
        raise WorkbenchError(f"Ray is already initialised in this process, so address {address!r} cannot be joined: "
                             f"leave it out to use that cluster, or call ray.shutdown() first")
    actors, new, store = [], not out.exists(), None
    try:
        with run_lock(out):  # before any worker starts: a second driver on the folder is refused at once
            wait = resource_wait(ray, workers, cpus_per_worker, gpus_per_worker, joined=address is not None)
            actors, identity, env = _start_workers(ray, model_spec, workers, cpus_per_worker, gpus_per_worker,
                                                   device, dtype, wait)
            examples = ray.get(actors[0].examples.remote(config))
            order = [e.id for e in examples]
            store = SweepStore.open(out, identity, config.identity(), env)
            place_preregistration_of(config, out, store, preregistration)
            todo = [e for e in examples if not store.done(e.id)]
            try:
                _dispatch(ray, actors, store, todo, config.diagnose, out, order, progress)
            except BaseException as err:  # Ctrl-C, SIGTERM, every worker gone: the manifest says so
                store.interrupted(order, err, executor="ray")
                raise
            store.finish("complete", order, executor="ray", workers=workers)
    except BaseException:
        if new and store is None:  # refused before the run's store opened: leave no folder behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        for actor in actors:
            ray.kill(actor)
        if started_here:
            ray.shutdown()
        if reaper is not None:
            reaper.kill()
    check_some_done(store, len(examples))
    return store


def _dispatch(ray, actors: list, store: SweepStore, todo: list[Example], config: DiagnoseConfig, out: Path,
              order: list[str], progress: bool) -> None:
    """Keep every live worker busy with one example; adopt each saved folder as it comes back."""
    idle, queue, pending = list(actors), list(todo), {}
    bar = tqdm(total=len(todo), desc="examples (ray)", unit="example", disable=not progress)
    while queue or pending:
        while idle and queue:
            actor, example = idle.pop(), queue.pop(0)
            folder = out / DIAGNOSES / folder_name(example.id)
            pending[actor.run.remote(example, config, str(folder))] = (actor, example)
        if not pending:
            raise WorkbenchError(f"every worker died; {len(queue)} examples are left: run the same command again "
                                 f"to resume")
        (future,), _ = ray.wait(list(pending), num_returns=1)
        actor, example = pending.pop(future)
        try:
            result = ray.get(future)
        except ray.exceptions.RayActorError as err:  # the worker died: only this example is lost
            store.fail(example.id, f"its worker died ({type(err).__name__}); run the same command again to "
                                   f"recompute it", "")
            bar.update(1)
            continue
        if result.get("error"):
            store.fail(example.id, result["error"], result.get("traceback", ""))
        else:
            store.adopt(example.id, folder_name(example.id), order)
        idle.append(actor)
        bar.update(1)
    bar.close()
