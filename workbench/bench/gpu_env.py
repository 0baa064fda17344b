"""The Python environment of the GPU benchmark (issue 30): which distributions the bench path
loads, which of them travel as wheels, and what a device's environment differs in.

The device image has its own torch and transformers (2.11 and 5.17 when last seen); the project
is developed on others (2.13 and 5.24). What travels (`carried`), at the versions installed
here: the pure-Python distributions the workbench requires (transformers, plotly, tqdm) and the
pure-Python ones they require, directly or not, of those the bench path imports. Not what it
never imports (typer, click and rich serve transformers' command line), nor any compiled
distribution (each is built for one Python; the device's own serve, transformers' ranges admit
them), nor a pure one pinned to a compiled one (pydantic and its core). `make gpu-wheels`
downloads them; `bench/gpu.sh` installs them, and its `versions` part reports every version it
runs with against the ones here and any requirement of a carried distribution left unmet.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SELF = "kv-repair-workbench"
LIMIT_BYTES = 64 << 20  # what one device call carries: the working tree and the wheels together


def _dist(name: str):
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def loaded() -> dict[str, str]:
    """Canonical name -> version of every distribution with a top-level module imported now (the
    workbench aside: it runs from the working tree)."""
    owners = md.packages_distributions()
    names = {canonicalize_name(d) for m in list(sys.modules) if "." not in m for d in owners.get(m, [])} - {SELF}
    return {n: d.version for n in sorted(names) if (d := _dist(n)) is not None}


def is_pure(name: str) -> bool:
    """Installed from a wheel for every Python and platform (py3-none-any)."""
    dist = _dist(name)
    tags = [line.split(":", 1)[1].strip() for line in ((dist and dist.read_text("WHEEL")) or "").splitlines()
            if line.startswith("Tag:")]
    return bool(tags) and all(t.endswith("-none-any") for t in tags)


def requirements(name: str) -> list[Requirement]:
    """What an installed distribution requires, without extras, for this Python."""
    env = {**default_environment(), "extra": ""}
    dist = _dist(name)
    return [r for r in map(Requirement, (dist and dist.requires) or []) if r.marker is None or r.marker.evaluate(env)]


def closure(roots, through=lambda name: True) -> set[str]:
    """The installed distributions `roots` require, directly or not, themselves included,
    following only distributions for which `through` holds."""
    seen, todo = set(), [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or _dist(name) is None or not through(name):
            continue
        seen.add(name)
        todo += [canonicalize_name(r.name) for r in requirements(name)]
    return seen


def _travels(name: str) -> bool:
    """Pure Python, and pinned to no compiled distribution (which would stay behind)."""
    return is_pure(name) and not any(
        any(s.operator in ("==", "===") for s in r.specifier) and not is_pure(r.name) for r in requirements(name))


def carried(on_path: dict[str, str]) -> dict[str, str]:
    """Name -> version of what travels, given what the bench path loaded (`loaded()` after it ran)."""
    roots = [n for n in (canonicalize_name(r.name) for r in requirements(SELF)) if n in on_path and is_pure(n)]
    names = closure(roots, _travels) & set(on_path)
    return {n: md.version(n) for n in sorted(names)}


def differences(expected: dict[str, str], site: str | None = None, names=()) -> dict:
    """On the device: each distribution of `expected` (name -> version here) and of `names` with
    the version installed there and whether it came from `site` (the carried wheels); those whose
    version differs from here; the requirements of the carried ones the environment does not meet."""
    rows, unmet = {}, []
    for name in sorted(set(expected) | {canonicalize_name(n) for n in names}):
        dist, want = _dist(name), expected.get(name)
        where = str(dist.locate_file("")) if dist is not None else ""
        rows[name] = {"version": dist.version if dist else None, "here": want,
                      "carried": bool(site) and where.startswith(site)}
        for req in requirements(name) if rows[name]["carried"] else []:
            have = _dist(req.name)
            if have is None or not req.specifier.contains(have.version, prereleases=True):
                unmet.append(f"{name} requires {req}, found {have.version if have else 'nothing'}")
    differ = sorted(n for n, r in rows.items() if r["here"] is not None and r["version"] != r["here"])
    return {"distributions": rows, "differ": differ,
            "unmet": unmet}


def read_manifest(path: Path) -> dict[str, str]:
    """`name==version` lines (the manifest `make gpu-wheels` writes) as a dict."""
    lines = [line.strip() for line in Path(path).read_text().splitlines() if "==" in line]
    return dict(line.split("==", 1) for line in lines)


def size_report(folder: Path, tree_bytes: int) -> tuple[str, bool]:
    """Each wheel in `folder` with its size, their total and the total with the working tree
    (`tree_bytes`), and whether that fits what one device call carries."""
    wheels = sorted(Path(folder).glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    lines = [f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}" for w in wheels]
    fits = total + tree_bytes <= LIMIT_BYTES
    lines += [f"{total / 2**20:7.2f} MiB  {len(wheels)} wheels in {folder}",
              f"{(total + tree_bytes) / 2**20:7.2f} MiB  with the working tree ({tree_bytes / 2**20:.2f} MiB): "
              f"{'fits' if fits else 'OVER'} the {LIMIT_BYTES >> 20} MiB a device call carries"]
    return "\n".join(lines), fits
