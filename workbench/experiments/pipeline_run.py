"""`kvwb pipeline`: every reuse method over the requests of a data set, resumable.

Each method runs the requests in order with its own state (KVComm's anchor pool learns online,
so order matters: BCR Table 6's warm-up). Each finished request is one JSON file, written
atomically; the tables are rebuilt from them.

    runs/NAME/manifest.json                         kind "pipeline", the config, the model
    runs/NAME/requests/METHOD/00012.json            one RequestResult
    runs/NAME/requests.parquet                      one row per (method, request): answer, scores
    runs/NAME/calls.parquet                         one row per (method, request, agent)
    runs/NAME/repair.parquet                        with --repair-on: the final call's repair outcomes

`--kvcomm` (`code`, default: KVComm as its code runs; `legacy`: as the workbench ran it before
issue 28) is part of the run's identity; a run made before the option resumes only as `legacy`.

Resuming rebuilds a stateful method's state by replaying its finished requests before its first
missing one (`run_request(..., replay=...)`: every call's method runs again, no answer is
decoded) and computes every request from there on, so the pool after a resume is the pool an
uninterrupted run would hold. A method with nothing missing, or with no state, replays nothing.
A request file that cannot be read back is moved aside (`.corrupt-NAME-TIME`) with a warning and
counts as missing, as a sweep's damaged example does.

Each request written is listed (as "METHOD/00012") under the manifest's current segment, the
environment (this process's) that computed it; a resume on other code or packages opens a new
segment with a warning (`runstore.segments`). A replayed request is not recomputed and keeps its segment.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from workbench.atomic import write_json, write_parquet
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.seeds import check_seed
from workbench.models import LoadedModel, model_identity
from workbench.pipeline import PipelineSpec, RequestResult, get_method, run_request
from workbench.pipeline.calls import KVCOMM_VARIANTS
from workbench.pipeline.repair import REPAIR
from workbench.runstore import (
    MANIFEST, check_out, finished, interruption, load_manifest, move_aside, resume_manifest, run_lock,
    write_manifest,
)
from workbench.runstore.segments import open_segment, record
from workbench.tasks import data_identity, load_dataset

DEFAULT_METHODS = ("chat-template", "token-matched", "kvcomm", "kvcomm-always", "opengate", "protect-root",
                   "protect-leaf", "coin-alloc", "bcr", "bcr-coin", "kvcomm-0.5", "kvcomm-0.7")
TOPOLOGIES = {"full": PipelineSpec.fully_connected, "chain": PipelineSpec.chain}
REQUESTS = "requests"


@dataclass(frozen=True)
class PipelineConfig:
    """What `kvwb pipeline` runs: a generated pipeline, a data set, the methods, in order."""

    agents: int = 4
    topology: str = "full"
    dataset: str = "synthetic"
    n: int = 60
    methods: tuple[str, ...] = DEFAULT_METHODS
    seed: int = 0
    max_new_tokens: int = 24
    dataset_options: dict = field(default_factory=dict)
    repair_on: str | None = None  # a method whose reused final calls get BCR's repair on top (every selector)
    kvcomm: str = "code"  # KVComm as its code runs, or "legacy" (see `pipeline.calls`)

    def checked(self) -> PipelineConfig:
        if self.topology not in TOPOLOGIES:
            raise WorkbenchError(f"unknown topology {self.topology!r}; use one of {', '.join(TOPOLOGIES)}")
        self.spec()  # the agent count, before any model work
        check_seed(self.seed)
        if self.kvcomm not in KVCOMM_VARIANTS:
            raise WorkbenchError(f"unknown --kvcomm {self.kvcomm!r}; use one of {', '.join(KVCOMM_VARIANTS)}")
        if not self.methods:
            raise WorkbenchError("name at least one reuse method")
        for name in self.methods:
            get_method(name)
        if len(set(self.methods)) != len(self.methods):
            raise WorkbenchError(f"a method is named twice: {', '.join(self.methods)}")
        if self.repair_on is not None and self.repair_on not in self.methods:
            raise WorkbenchError(f"--repair-on {self.repair_on!r} is not one of the methods run "
                                 f"({', '.join(self.methods)})")
        return replace(self, methods=tuple(self.methods))

    def spec(self) -> PipelineSpec:
        return TOPOLOGIES[self.topology](self.agents)

    def identity(self) -> dict:
        """What a resumed run must share. n and the methods may change from one session to the
        next; the manifest keeps the largest n and every method run (`_open`)."""
        identity = {"agents": self.agents, "topology": self.topology, **data_identity(self.dataset, self.dataset_options),
                    "seed": self.seed, "max_new_tokens": self.max_new_tokens, "spec": self.spec().to_dict(),
                    "kvcomm": self.kvcomm}
        if self.repair_on is not None:
            identity.update(repair_on=self.repair_on, repair=REPAIR.to_dict())
        return identity


def request_path(out: Path, method: str, index: int) -> Path:
    return Path(out) / REQUESTS / method / f"{index:05d}.json"


def request_key(method: str, index: int) -> str:
    """How the manifest's segments name a request: "METHOD/00012"."""
    return f"{method}/{index:05d}"


def read_request(path: Path) -> RequestResult:
    return RequestResult.from_dict(json.loads(Path(path).read_text()))


def set_aside_unreadable(out: Path, methods: list[str], n: int) -> list[str]:
    """Move every request file of `methods` (indices < n) that cannot be read back aside, with a
    warning, so that it is recomputed; returns what was moved."""
    moved = []
    for method in methods:
        for index in range(n):
            path = request_path(out, method, index)
            if not path.is_file():
                continue
            try:
                read_request(path)
            except (ValueError, KeyError, TypeError, AttributeError) as err:  # JSON, UTF-8 or a field
                aside = move_aside(path)
                moved.append(f"{method}/{path.name}")
                warnings.warn(f"{path} was unreadable ({type(err).__name__}: {err}); it was moved aside as "
                              f"{aside.name} and is recomputed", WorkbenchWarning, stacklevel=2)
    return moved


def run_pipeline(model: LoadedModel, config: PipelineConfig, out: str | Path, progress: bool = True) -> dict:
    """Run every method over the first `config.n` requests into `out` (resuming a compatible run);
    returns the manifest. It says "complete" when every method the run holds has every request
    it holds, else "interrupted" (with the error, if one ended the session)."""
    config = config.checked()
    examples = load_dataset(config.dataset, n=config.n, tokenizer=model.tokenizer,
                            max_positions=model.max_positions, **config.dataset_options)
    count = len(examples)  # this session's requests: fewer than n for a short data set or one `#ID`
    spec, out = config.spec(), check_out(out, kind="pipeline", resume=True)
    with run_lock(out):
        manifest = _open(out, model, config)
        held = manifest["args"]  # every method and request the run holds, this session's and earlier ones'
        try:
            if held["n"] > count:
                examples = load_dataset(config.dataset, n=held["n"], tokenizer=model.tokenizer,
                                        max_positions=model.max_positions, **config.dataset_options)
            set_aside_unreadable(out, held["methods"], len(examples))
            manifest = open_segment(manifest, [request_key(m, i) for m in held["methods"] for i in range(len(examples))
                                               if request_path(out, m, i).is_file()], out)
            write_manifest(out, manifest)
            for method in config.methods:
                info, state = get_method(method), get_method(method).make_state()
                state.kvcomm = config.kvcomm
                missing = [i for i in range(count) if not request_path(out, method, i).is_file()]
                if not missing:
                    continue
                # a stateful method replays what comes before its first missing request and computes the
                # rest (a later request's record came from a pool that held the missing one); others only fill gaps
                todo = range(count) if info.stateful else missing
                bar = tqdm(todo, desc=method, unit="request", disable=not progress)
                for index in bar:
                    example, path = examples[index], request_path(out, method, index)
                    done = read_request(path) if index < missing[0] and path.is_file() else None
                    if done is not None and done.example_id != example.id:
                        raise WorkbenchError(f"{path} holds request {done.example_id!r}, not {example.id!r}: the "
                                             f"data set changed under the run; use a new --out")
                    result = run_request(model, spec, example, method, state, config.max_new_tokens, config.seed,
                                         replay=done, repair=REPAIR if method == config.repair_on else None)
                    if done is None:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        write_json(path, result.to_dict())
                        record(manifest, request_key(method, index))
                        write_manifest(out, manifest)
                write_tables(out, held["methods"], examples)  # readable while the next method runs
            write_tables(out, held["methods"], examples)
        except BaseException as err:  # interrupted or failed: the manifest says so, then the tables keep what finished
            write_manifest(out, finished(manifest, "interrupted", **interruption(err)))
            try:
                write_tables(out, held["methods"], examples)
            except Exception:  # noqa: BLE001 - the error that ended the session is the one to raise
                pass
            raise
        whole = all(request_path(out, m, i).is_file() for m in held["methods"] for i in range(len(examples)))
        manifest = finished(manifest, "complete" if whole else "interrupted", n_requests=len(examples))
        write_manifest(out, manifest)
    return manifest


def _open(out: Path, model: LoadedModel, config: PipelineConfig) -> dict:
    """The run's manifest (resumed when the settings match). `n` and the methods may change; the
    manifest keeps the largest n and every method any session ran, so its tables keep them all."""
    identity = config.identity()
    held, fixed = {"n": config.n, "methods": list(config.methods)}, identity
    if (out / MANIFEST).is_file():
        before = load_manifest(out, kind="pipeline").args
        held = {"n": max(config.n, before.get("n", 0)),
                "methods": list(dict.fromkeys([*before.get("methods", []), *config.methods]))}
        if "kvcomm" not in before:  # made before the option: its KVComm is "legacy"
            if config.kvcomm != "legacy":
                raise WorkbenchError(f"{out} holds a pipeline run made before --kvcomm existed (its KVComm is "
                                     f"'legacy'); resume it with --kvcomm legacy or use a new --out")
            fixed = {k: v for k, v in identity.items() if k != "kvcomm"}
    manifest = resume_manifest(out, "pipeline", model_identity(model), {**identity, **held}, fixed=fixed)
    manifest["details"] = {k: v for k, v in manifest.get("details", {}).items() if k != "error"}  # an earlier session's
    write_manifest(out, manifest)  # first: a folder with a manifest is a run, whatever else it holds yet
    (out / REQUESTS).mkdir(parents=True, exist_ok=True)
    return manifest


def write_tables(out: Path, methods: list[str], examples) -> None:
    """requests.parquet and calls.parquet from every finished request file of `methods`."""
    requests, calls, repair = [], [], []
    for method in methods:
        for index, example in enumerate(examples):
            path = request_path(out, method, index)
            if not path.is_file():
                continue
            result = read_request(path)
            em, f1, contains = example.score(result.answer)
            requests.append({"method": method, "index": index, "example_id": example.id, "answer": result.answer,
                             "gold": " | ".join(example.gold), "em": em, "f1": f1,
                             "contains": contains,
                             "n_calls": len(result.calls), "n_reused": sum(c.reused for c in result.calls)})
            repair += [{"method": method, "index": index, **row} for row in result.repair]
            for c in result.calls:
                finite = [e for e in c.gate_entropy if e == e]
                calls.append({"method": method, "index": index, "example_id": example.id, "agent": c.agent,
                              "role": c.role, "depth": c.depth, "n_tokens": c.n_tokens, "reused": c.reused,
                              "n_slots": len(c.n_anchors), "max_entropy": max(finite) if finite else float("nan"),
                              "threshold": max((t for t in c.gate_threshold if t == t), default=float("nan")),
                              "min_anchors": min(c.n_anchors) if c.n_anchors else 0,
                              "confidence": c.confidence, "n_repaired": c.n_repaired,
                              "template_differs": c.template_differs,
                              "output": c.output, "seconds": c.seconds})
    if requests:
        write_parquet(Path(out) / "requests.parquet", pd.DataFrame(requests))
        write_parquet(Path(out) / "calls.parquet", pd.DataFrame(calls))
    if repair:
        write_parquet(Path(out) / "repair.parquet", pd.DataFrame(repair))
