"""The environment a result was computed in: the code that ran, the packages, the hardware, the threads.

    environment() -> {"code":     {"revision": commit or None, "dirty": bool, "diff_sha256": hex or None},
                      "versions": {"python", "torch", "transformers", "numpy"},
                      "device":   {"cpu": model name, "gpu": CUDA device name or None},
                      "threads":  {"torch": torch.get_num_threads(), "KVWB_THREADS": the variable or None}}

`code` is read from the git tree holding the imported `workbench` package (not the working
directory): its commit, whether the package's files differ from it, and a SHA-256 of that
difference (`git diff HEAD` of the package plus its untracked .py files), so two dirty trees
with other edits differ. Outside git every field is None or False. The git part is read once per
process (the imported code does not change under it). Nothing here raises.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the imported workbench package
_PACKAGES = ("kv-repair-workbench", "torch", "transformers", "numpy", "pandas", "pyarrow", "scipy")
_CORE = ("torch", "transformers", "numpy")  # what `environment()["versions"]` holds beside python
# What a resume is warned about and Ray's workers must share: the code and packages, and the hardware,
# since on another CPU a near-tie in a selector's scores can break the other way (10.12w's pairing, RESULTS 12)
WARNED = ("code", "versions", "device")


def package_versions(names=_PACKAGES) -> dict[str, str]:
    """Versions of Python and the packages a result depends on."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _git(args: list[str], cwd: Path) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=10, check=True).stdout


def code_state(package: Path = PACKAGE) -> dict:
    """{"revision", "dirty", "diff_sha256"} of the git tree holding `package` (its files only)."""
    none = {"revision": None, "dirty": False, "diff_sha256": None}
    try:
        revision = _git(["rev-parse", "HEAD"], package).decode().strip()
        diff = _git(["diff", "HEAD", "--binary", "--", "."], package)
        untracked = sorted(p for p in _git(["ls-files", "--others", "--exclude-standard", "-z", "--", "."],
                                           package).decode().split("\0") if p.endswith(".py"))
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return none
    if not diff and not untracked:
        return {**none, "revision": revision}
    digest = hashlib.sha256(diff)
    for path in untracked:
        try:
            content = (package / path).read_bytes()
        except OSError:
            continue
        digest.update(b"\0untracked " + path.encode() + b"\0" + content)
    return {"revision": revision, "dirty": True, "diff_sha256": digest.hexdigest()}


@functools.lru_cache(maxsize=1)
def _workbench_code() -> tuple:
    return tuple(code_state().items())


def workbench_code() -> dict:
    """`code_state()` of the imported workbench package, read once per process."""
    return dict(_workbench_code())


def git_revision() -> str | None:
    """The workbench package's commit ('+dirty' when its files have changes), or None outside git."""
    code = workbench_code()
    return None if code["revision"] is None else code["revision"] + ("+dirty" if code["dirty"] else "")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _torch_state() -> tuple[str | None, int | None]:
    """The CUDA device's name (None without one) and torch's intra-op threads (None without torch)."""
    try:
        import torch
    except ImportError:
        return None, None
    try:
        gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken driver is no reason to fail a run's manifest
        gpu = None
    return gpu, torch.get_num_threads()


def environment() -> dict:
    """What computed a result in this process (see the module docstring)."""
    gpu, threads = _torch_state()
    return {"code": workbench_code(), "versions": package_versions(_CORE),
            "device": {"cpu": cpu_model(), "gpu": gpu},
            "threads": {"torch": threads, "KVWB_THREADS": os.environ.get("KVWB_THREADS")}}
