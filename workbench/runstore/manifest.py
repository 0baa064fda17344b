"""`manifest.json`: one builder and one reader for every kind of run folder.

Every manifest has the same keys, whatever wrote it:

    schema          "kvwb-run": the workbench's marker (a folder is the workbench's only if it has one)
    schema_version  2
    kind            "sweep" | "curve" | "fidelity" | "diagnosis" | "report" | "pipeline"
    status          "running" | "complete" | "interrupted" (details.error: the error that ended it, if one did)
    model           LoadedModel.describe() plus its "fingerprint" (None for a report index)
    args            what the run computes: the identity a resume must match
    versions        Python and the packages a result depends on
    git_revision    the imported workbench package's commit, "+dirty" when its files had changes
    environment     what computed it: code (commit, dirty, diff hash), versions, device, threads
                    (`environment.py`); absent in manifests written before it
    start, end      ISO times (end None while running); seconds
    failures        [{example_id, error, traceback}] (sweeps)
    details         what is particular to the kind (the curve's protocol, the fidelity bank, ...)
    segments        (sweeps, pipelines) one per environment a resumed run ran in, each with the
                    examples it computed (`segments.py`); absent in one-shot runs and older ones

Manifests of the first version (schema 1: "started"/"ended"/"git", kind-specific keys at
the top) are read as schema 2 by `read_manifest`. Manifests written before the marker existed
are recognised by their keys (`is_workbench_manifest`).

Writers build and stamp plain dicts (`new_manifest`, `finished`, `resume_manifest`); readers get a
typed, checked `Manifest` (`load_manifest`), whose `to_dict()` is the JSON object it was read as.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from workbench.atomic import write_json
from workbench.errors import WorkbenchError
from workbench.runstore.environment import environment, git_revision, package_versions

MANIFEST = "manifest.json"
SCHEMA = "kvwb-run"
SCHEMA_VERSION = 2
KEYS = ("schema", "schema_version", "kind", "status", "model", "args", "versions", "git_revision", "start", "end",
        "seconds", "failures", "details")
OPTIONAL = ("environment", "segments")  # keys a manifest may lack (written before they existed, or one-shot)
ORDER = (*KEYS[:8], "environment", *KEYS[8:], "segments")  # the writer's order of every key


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_manifest(kind: str, model: dict | None, args: dict, **details) -> dict:
    """A fresh manifest of `kind` (status "running"); `model` is describe() + fingerprint."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "kind": kind, "status": "running", "model": model, "args": args,
            "versions": package_versions(), "git_revision": git_revision(), "environment": environment(),
            "start": now(), "end": None,
            "seconds": None, "failures": [], "details": details}


def finished(manifest: dict, status: str = "complete", seconds: float | None = None, **details) -> dict:
    """The manifest with its end stamped (and details added)."""
    seconds = round(seconds, 2) if isinstance(seconds, float) else seconds  # 98.6, not 98.59604503000003
    return {**manifest, "status": status, "end": now(), "seconds": seconds,
            "details": {**manifest.get("details", {}), **details}}


def interruption(cause: BaseException) -> dict:
    """The details an `interrupted` manifest carries for what ended its session: none for Ctrl-C or
    SIGTERM (a KeyboardInterrupt), else {"error": "Type: message"}."""
    return {} if isinstance(cause, KeyboardInterrupt) else {"error": f"{type(cause).__name__}: {cause}"}


def write_manifest(folder: Path, manifest: dict) -> None:
    write_json(Path(folder) / MANIFEST, manifest)


# What a manifest held before the marker: schema 2 every key but "schema"; schema 1 at least these.
_LEGACY_KEYS = {SCHEMA_VERSION: set(KEYS) - {"schema"}, 1: {"kind", "status", "model", "args", "versions"}}


def is_workbench_manifest(data) -> bool:
    """Whether parsed JSON is a manifest the workbench wrote: a kind and the marker (schema
    "kvwb-run" with a version) or, for one written before the marker, every key its schema had."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not data["kind"]:
        return False
    if "schema" in data:
        return data["schema"] == SCHEMA and type(data.get("schema_version")) is int
    legacy = _LEGACY_KEYS.get(data.get("schema_version", 1))
    return legacy is not None and legacy <= set(data)


def damaged(writing: bool = False) -> str:
    """What to do about a damaged manifest; `writing`: the command writes there (--out)."""
    return ("the manifest is damaged and the run's other files are untouched: move the folder aside and restore "
            "it (e.g. from docs/records with keep.py restore), or rerun the run's command"
            + (" with a new --out" if writing else " into a new folder") + " to rebuild the run")


def read_manifest(folder: Path, kind: str | None = None, writing: bool = False) -> dict:
    """The manifest of a run folder, upgraded to schema 2; a clear error if it is missing, not a
    JSON object, not the workbench's, of an unknown schema, or (with `kind`) of another kind
    (`writing`: the command writes there, and the error may say --out)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise WorkbenchError(_no_manifest(Path(folder)))
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WorkbenchError(f"{path} is corrupt ({err}); {damaged(writing)}") from None
    if not isinstance(manifest, dict):
        raise WorkbenchError(f"{path} is not a JSON object (it holds a {type(manifest).__name__}); "
                             f"{damaged(writing)}")
    if not is_workbench_manifest(manifest):
        raise WorkbenchError(f"{path} is not a run manifest of the workbench (no {SCHEMA!r} schema and run "
                             f"kind): {folder} is not a run folder")
    version = manifest.get("schema_version", 1)
    if version == 1:
        manifest = _upgrade_v1(manifest)
    elif version != SCHEMA_VERSION:
        raise WorkbenchError(f"{path}: manifest schema version {version!r} is newer than this workbench reads "
                             f"({SCHEMA_VERSION}); update the workbench")
    else:
        manifest = {"schema": SCHEMA, **manifest}  # one written before the marker carries it once rewritten
    if kind is not None and manifest.get("kind") != kind:
        raise WorkbenchError(f"{folder} is a {manifest.get('kind')!r} run, not a {kind!r} run")
    return manifest


def _no_manifest(folder: Path) -> str:
    """Why `folder` has no manifest, in words: it does not exist, it is a file, or it holds none."""
    if not folder.exists():
        return f"{folder} is not a run folder: it does not exist"
    if folder.is_file():
        return (f"{folder} is a file, not a run folder: give the folder that holds it, {folder.parent}"
                if folder.name == MANIFEST else f"{folder} is a file, not a run folder")
    return f"{folder} is not a run folder: it has no {MANIFEST}"


def load_manifest(folder: Path, kind: str | None = None) -> Manifest:
    """The manifest of a run folder as a checked `Manifest` (see `read_manifest` for what is refused)."""
    return Manifest.from_dict(read_manifest(folder, kind), Path(folder) / MANIFEST)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# What each key may hold once upgraded to schema 2: (check, in words).
_FIELD_TYPES = {
    "schema": (lambda v: v == SCHEMA, f"the marker {SCHEMA!r}"),
    "schema_version": (lambda v: v == SCHEMA_VERSION, f"the version {SCHEMA_VERSION}"),
    "kind": (lambda v: isinstance(v, str) and bool(v), "a kind name"),
    "status": (lambda v: isinstance(v, str), "a string"),
    "model": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "args": (lambda v: isinstance(v, dict), "an object"),
    "versions": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "git_revision": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "start": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "end": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "seconds": (lambda v: v is None or _is_number(v), "a number or null"),
    "failures": (lambda v: isinstance(v, list) and all(isinstance(f, dict) for f in v), "a list of objects"),
    "details": (lambda v: isinstance(v, dict), "an object"),
}
_OPTIONAL_TYPES = {
    "environment": (lambda v: isinstance(v, dict), "an object"),
    "segments": (lambda v: isinstance(v, list) and all(isinstance(s, dict) and isinstance(s.get("examples"), list)
                                                       for s in v), "a list of objects with examples"),
}


@dataclass(frozen=True)
class Manifest:
    """A run's manifest.json read back (schema 2 keys, see the module docstring), typed and checked."""

    schema: str
    schema_version: int
    kind: str
    status: str
    model: dict | None  # LoadedModel.describe() + "fingerprint"; None for a report index
    args: dict
    versions: dict | None
    git_revision: str | None
    start: str | None
    end: str | None
    seconds: float | None
    failures: tuple[dict, ...]
    details: dict
    environment: dict | None = None  # None: written before environments were recorded
    segments: tuple[dict, ...] | None = None  # sweeps and pipelines; None: one-shot or older

    @classmethod
    def from_dict(cls, data: dict, source: Path | str = MANIFEST) -> Manifest:
        """A schema-2 manifest dict (as `read_manifest` returns it) checked key by key; `source`
        names the file in the one-line error."""
        for key, (ok, wanted) in _FIELD_TYPES.items():
            if key not in data or not ok(data[key]):
                held = "nothing" if key not in data else f"{type(data[key]).__name__} {_short(data[key], 40)}"
                raise WorkbenchError(f"{source} is malformed: its {key!r} holds {held}, not {wanted}; {damaged()}")
        for key, (ok, wanted) in _OPTIONAL_TYPES.items():
            if key in data and not ok(data[key]):
                raise WorkbenchError(f"{source} is malformed: its {key!r} holds {type(data[key]).__name__} "
                                     f"{_short(data[key], 40)}, not {wanted}; {damaged()}")
        segments = data.get("segments")
        return cls(**{key: data[key] for key in KEYS if key != "failures"}, failures=tuple(data["failures"]),
                   environment=data.get("environment"), segments=None if segments is None else tuple(segments))

    def to_dict(self) -> dict:
        """The manifest as its JSON object (keys in the writer's order; an optional key it lacked, left out)."""
        out = {key: getattr(self, key) for key in ORDER if key not in OPTIONAL or getattr(self, key) is not None}
        return {**out, "failures": list(self.failures),
                **({"segments": list(self.segments)} if self.segments is not None else {})}

    def environment_of(self, example_id: str) -> dict | None:
        """The environment that computed `example_id`: its segment's, else (no segments) the run's."""
        if self.segments is None:
            return self.environment
        return next((s.get("environment") for s in self.segments if example_id in s["examples"]), None)

    @property
    def model_name(self) -> str | None:
        return (self.model or {}).get("name")

    @property
    def fingerprint(self) -> dict | None:
        return (self.model or {}).get("fingerprint")

    @property
    def is_complete(self) -> bool:
        return self.status == "complete"

    @property
    def dataset(self) -> str | None:
        """The data set spec the run read (sweeps, pipelines, fidelity), else None."""
        return self.args.get("dataset")

    @property
    def n(self) -> int | None:
        """How many examples (requests) the run was asked for, when its args say."""
        n = self.args.get("n")
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    @property
    def diagnose_config(self) -> dict:
        """The DiagnoseConfig (as a dict) a sweep ("diagnose") or a saved diagnosis ("config") ran; else {}."""
        config = self.args.get("diagnose", self.args.get("config"))
        return config if isinstance(config, dict) else {}

    @property
    def selectors(self) -> tuple[str, ...]:
        return tuple(map(str, self.diagnose_config.get("selectors") or ()))

    @property
    def budgets(self) -> tuple[float, ...]:
        return tuple(self.diagnose_config.get("budgets") or ())

    @property
    def seed(self):
        return self.diagnose_config.get("seed")

    @property
    def methods(self) -> tuple[str, ...]:
        """A pipeline run's reuse methods."""
        return tuple(map(str, self.args.get("methods") or ()))

    @property
    def failures_by_id(self) -> dict[str, dict]:
        """The failed examples by id (sweeps)."""
        return {str(f.get("example_id")): f for f in self.failures}


def _upgrade_v1(old: dict) -> dict:
    """A first-version manifest in schema 2's keys (the rest goes under details)."""
    renamed = {"started": "start", "ended": "end", "git": "git_revision"}
    manifest = {renamed.get(k, k): v for k, v in old.items()}
    details = {k: manifest.pop(k) for k in list(manifest) if k not in KEYS}
    seconds = manifest.get("seconds")
    if isinstance(seconds, dict):  # the fidelity probe's {total, setup, per_example}
        details["seconds"], manifest["seconds"] = seconds, seconds.get("total")
    upgraded = {key: manifest.get(key) for key in KEYS}
    upgraded.update(schema=SCHEMA, schema_version=SCHEMA_VERSION, failures=manifest.get("failures") or [],
                    details={**(manifest.get("details") or {}), **details, "upgraded_from_schema": 1})
    return upgraded


def jsonish(value):
    """The value as it reads back from JSON (tuples become lists), for comparing arguments."""
    return json.loads(json.dumps(value, default=str))


def identity_differences(recorded: dict, current: dict, prefix: str = "") -> list[str]:
    """What differs between a run's recorded identity and the current one, in words: one entry per
    differing leaf, nested dicts named by dotted keys (`diagnose.seed: 0 in the run vs 7 now`)."""
    diffs = []
    for key in sorted(set(recorded) | set(current)):
        old, new = jsonish(recorded.get(key)), jsonish(current.get(key))
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            diffs += identity_differences(old, new, f"{prefix}{key}.")
        else:
            diffs.append(f"{prefix}{key}: {_short(old)} in the run vs {_short(new)} now")
    return diffs


def _short(value, limit: int = 100) -> str:
    """A value's repr, cut to `limit` characters (a pipeline's whole spec is long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Fingerprint keys that earlier versions did not record: a run they made is compared without them.
ADDED_FINGERPRINT_KEYS = ("weights_sha256",)
# Argument keys that earlier versions did not record (the code of each selector, of each record they
# read): likewise, and recorded from then on.
ADDED_ARGS = ("selector_code", "signal_code")


def resume_manifest(folder: Path, kind: str, model_identity: dict, args: dict, fixed=None) -> dict:
    """The manifest a run starts with: the one already in `folder`, marked running again and with
    `args` written in, when it was made with the same model (fingerprint) and arguments; else a
    new one. `fixed` names the argument keys that must match (default: all of `args`), so that a
    run may grow (`n`, more methods). Raises a WorkbenchError listing every difference.

    A fingerprint written by an earlier version lacks the weights' content hash: it is compared on
    the keys it has (as that version did), and the run records the hash from then on, so every
    later resume is checked by content."""
    if not (Path(folder) / MANIFEST).is_file():
        return new_manifest(kind, model_identity, args)
    manifest = read_manifest(folder, kind=kind, writing=True)
    recorded_print, current_print = (manifest.get("model") or {}).get("fingerprint"), model_identity.get("fingerprint")
    upgraded = isinstance(recorded_print, dict) and isinstance(current_print, dict) and any(
        key in current_print and key not in recorded_print for key in ADDED_FINGERPRINT_KEYS)
    if upgraded:
        current_print = {k: v for k, v in current_print.items() if k in recorded_print or k not in ADDED_FINGERPRINT_KEYS}
    recorded = {"model": recorded_print, **(manifest.get("args") or {})}
    current = {"model": current_print, **{k: v for k, v in args.items() if k in recorded or k not in ADDED_ARGS}}
    if fixed is not None:
        keep = {"model", *fixed}
        recorded = {k: v for k, v in recorded.items() if k in keep}
        current = {k: v for k, v in current.items() if k in keep}
    _refuse_other_settings(folder, kind, identity_differences(recorded, current))
    if upgraded:
        manifest = {**manifest, "model": {**(manifest.get("model") or {}), "fingerprint": model_identity["fingerprint"]}}
    return {**manifest, "status": "running", "end": None, "args": {**(manifest.get("args") or {}), **args}}


def _refuse_other_settings(folder, kind: str, diffs: list[str]) -> None:
    if diffs:
        raise WorkbenchError(f"{folder} holds a {kind} run made with other settings; use a new --out or the same "
                             f"settings. Differences: " + "; ".join(diffs))


def check_resumable(folder: Path, kind: str, args: dict, model_name: str | None = None) -> None:
    """Before a model loads: refuse `folder` where it holds a `kind` run made with other `args` or
    another model (by its name; `resume_manifest` compares the fingerprint once it has loaded)."""
    if not (Path(folder) / MANIFEST).is_file():
        return
    manifest = read_manifest(folder, kind=kind, writing=True)
    recorded = manifest.get("args") or {}
    diffs = identity_differences(recorded, {k: v for k, v in args.items() if k in recorded or k not in ADDED_ARGS})
    name = (manifest.get("model") or {}).get("name")
    if model_name is not None and name is not None and name != model_name:
        diffs.insert(0, f"model: {name!r} in the run vs {model_name!r} now")
    _refuse_other_settings(folder, kind, diffs)
