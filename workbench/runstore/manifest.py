"""`manifest.json`: one builder and one reader for every kind of run folder.

Every manifest has the same keys, whatever wrote it:

    schema_version  2
    kind            "sweep" | "curve" | "fidelity" | "diagnosis" | "report"
    status          "running" | "complete" | "interrupted"
    model           LoadedModel.describe() plus its "fingerprint" (None for a report index)
    args            what the run computes: the identity a resume must match
    versions        Python and the packages a result depends on
    git_revision    the workbench checkout's commit, "+dirty" when it had changes
    start, end      ISO times (end None while running); seconds
    failures        [{example_id, error, traceback}] (sweeps)
    details         what is particular to the kind (the curve's protocol, the fidelity bank, ...)

Manifests of the first version (schema 1: "started"/"ended"/"git", kind-specific keys at
the top) are read as schema 2 by `read_manifest`.
"""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from workbench.atomic import write_json
from workbench.errors import WorkbenchError

MANIFEST = "manifest.json"
SCHEMA_VERSION = 2
KEYS = ("schema_version", "kind", "status", "model", "args", "versions", "git_revision", "start", "end",
        "seconds", "failures", "details")
_PACKAGES = ("kv-repair-workbench", "torch", "transformers", "numpy", "pandas", "pyarrow", "scipy")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a result depends on."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_revision() -> str | None:
    """The workbench checkout's commit (with '+dirty' when it has changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


def new_manifest(kind: str, model: dict | None, args: dict, **details) -> dict:
    """A fresh manifest of `kind` (status "running"); `model` is describe() + fingerprint."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "status": "running", "model": model, "args": args,
            "versions": package_versions(), "git_revision": git_revision(), "start": now(), "end": None,
            "seconds": None, "failures": [], "details": details}


def finished(manifest: dict, status: str = "complete", seconds: float | None = None, **details) -> dict:
    """The manifest with its end stamped (and details added)."""
    return {**manifest, "status": status, "end": now(), "seconds": seconds,
            "details": {**manifest.get("details", {}), **details}}


def write_manifest(folder: Path, manifest: dict) -> None:
    write_json(Path(folder) / MANIFEST, manifest)


def read_manifest(folder: Path, kind: str | None = None) -> dict:
    """The manifest of a run folder, upgraded to schema 2; a clear error if it is missing, not a
    JSON object, of an unknown schema, or (with `kind`) of another kind."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise WorkbenchError(f"{folder} is not a run folder: it has no {MANIFEST}")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WorkbenchError(f"{path} is corrupt ({err}); remove the folder or pass a new --out") from None
    if not isinstance(manifest, dict):
        raise WorkbenchError(f"{path} is not a JSON object (it holds a {type(manifest).__name__}); "
                             f"remove the folder or pass a new --out")
    version = manifest.get("schema_version", 1)
    if version == 1:
        manifest = _upgrade_v1(manifest)
    elif version != SCHEMA_VERSION:
        raise WorkbenchError(f"{path}: manifest schema version {version!r} is newer than this workbench reads "
                             f"({SCHEMA_VERSION}); update the workbench")
    if kind is not None and manifest.get("kind") != kind:
        raise WorkbenchError(f"{folder} is a {manifest.get('kind')!r} run, not a {kind!r} run")
    return manifest


def _upgrade_v1(old: dict) -> dict:
    """A first-version manifest in schema 2's keys (the rest goes under details)."""
    renamed = {"started": "start", "ended": "end", "git": "git_revision"}
    manifest = {renamed.get(k, k): v for k, v in old.items()}
    details = {k: manifest.pop(k) for k in list(manifest) if k not in KEYS}
    seconds = manifest.get("seconds")
    if isinstance(seconds, dict):  # the fidelity probe's {total, setup, per_example}
        details["seconds"], manifest["seconds"] = seconds, seconds.get("total")
    upgraded = {key: manifest.get(key) for key in KEYS}
    upgraded.update(schema_version=SCHEMA_VERSION, failures=manifest.get("failures") or [],
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


def resume_manifest(folder: Path, kind: str, model_identity: dict, args: dict, fixed=None) -> dict:
    """The manifest a run starts with: the one already in `folder`, marked running again and with
    `args` written in, when it was made with the same model (fingerprint) and arguments; else a
    new one. `fixed` names the argument keys that must match (default: all of `args`), so that a
    run may grow (`n`, more methods). Raises a WorkbenchError listing every difference."""
    if not (Path(folder) / MANIFEST).is_file():
        return new_manifest(kind, model_identity, args)
    manifest = read_manifest(folder, kind=kind)
    recorded = {"model": (manifest.get("model") or {}).get("fingerprint"), **(manifest.get("args") or {})}
    current = {"model": model_identity.get("fingerprint"), **args}
    if fixed is not None:
        keep = {"model", *fixed}
        recorded = {k: v for k, v in recorded.items() if k in keep}
        current = {k: v for k, v in current.items() if k in keep}
    diffs = identity_differences(recorded, current)
    if diffs:
        raise WorkbenchError(f"{folder} holds a {kind} run made with other settings; use a new --out or the same "
                             f"settings. Differences: " + "; ".join(diffs))
    return {**manifest, "status": "running", "end": None, "args": {**(manifest.get("args") or {}), **args}}
