"""What computed each committed record: the commit and versions its manifest records.

A manifest written since the environment was recorded holds `environment` (the imported package's
commit, whether it was dirty, the versions) and, per session that computed examples, a `segment`
with its own environment: each distinct one is named. An older manifest holds only `git_revision` (the
commit of the checkout the package was imported from) and `versions`, both as of its first start:
a resumed session's are not recorded, and the line says so. A folder of CSVs (10.12's grid) has no
manifest: "not recorded".
"""

from __future__ import annotations

import pandas as pd

from workbench.results.registry import frame, register_table
from workbench.runstore.manifest import MANIFEST, read_manifest

CORE = ("python", "torch", "transformers", "numpy")


def _commit(code: dict) -> str:
    revision = (code or {}).get("revision")
    if not revision:
        return "unknown"
    return f"`{revision[:7]}`" + (" (dirty)" if code.get("dirty") else "")


def _versions(versions: dict) -> str:
    return ", ".join(f"{k} {versions[k]}" for k in CORE if k in (versions or {}))


def provenance(manifest: dict | None) -> tuple[str, str]:
    """(commit, versions) of a record's manifest as the records' README states them."""
    if manifest is None:
        return "not recorded (CSVs, no manifest)", "not recorded"
    envs = [s.get("environment") for s in manifest.get("segments") or () if s.get("environment")]
    envs = envs or ([manifest["environment"]] if manifest.get("environment") else [])
    if envs:
        commits = list(dict.fromkeys(_commit(e.get("code")) for e in envs))
        versions = list(dict.fromkeys(_versions(e.get("versions")) for e in envs))
        return " + ".join(commits), "; ".join(versions)
    first = manifest.get("git_revision") or ""
    commit = (f"`{first[:7]}`" + (" (dirty)" if first.endswith("+dirty") else "") + " at its first start; a resumed "
              "session's code not recorded") if first else "not recorded"
    versions = _versions(manifest.get("versions"))
    return commit, f"{versions} (first start)" if versions else "not recorded"


@register_table("records-provenance", "docs/records/README.md: the commit and versions that computed each record")
def records_provenance(records) -> pd.DataFrame:
    """One row per record folder (a manifest's record, or a folder of CSVs), by name."""
    rows = []
    for folder in sorted(p for p in records.folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        manifest = read_manifest(folder) if (folder / MANIFEST).is_file() else None
        if manifest is None and not any(folder.glob("*.csv")):
            continue
        commit, versions = provenance(manifest)
        rows.append({"record": f"`{folder.name}`", "computed by": commit, "versions": versions})
    return frame(rows)
