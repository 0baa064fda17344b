"""A resumable run's segments: one per environment it ran in, each listing what it computed.

    "segments": [{"environment": environment() or None, "started": ISO time, "examples": [id, ...]}, ...]

A sweep (example ids) and a pipeline ("METHOD/00012" per request) hold them. `open_segment`
starts a session: it continues the last segment when the environment is the same, else appends
a new one, with a warning when the `code`, `versions` or `device` differ. `record` lists each result as it
is saved under the current (last) segment, and takes a recomputed one out of the segment that
made it before. A run made before segments resumes as one segment of unknown environment (None)
holding what it had done; a result saved but never listed (the process died between the two
writes) belongs to the last segment recorded.
"""

from __future__ import annotations

import warnings

from workbench.errors import WorkbenchWarning
from workbench.runstore.environment import WARNED, environment
from workbench.runstore.manifest import identity_differences, now


def differences(recorded: dict | None, current: dict) -> list[str]:
    """How the `code`, `versions` and `device` of a recorded environment differ from `current`, in words."""
    if recorded is None:
        return ["the environment of its earlier examples was not recorded"]
    return identity_differences({k: recorded.get(k) for k in WARNED}, {k: current.get(k) for k in WARNED})


def open_segment(manifest: dict, done, where, current: dict | None = None) -> dict:
    """The manifest with its segments brought up to date for a session computing in `current`
    (default: this process's `environment()`); `done` is every result the run holds now."""
    current = environment() if current is None else current
    done = list(done)
    held = set(done)
    segments = [{**s, "examples": [i for i in s.get("examples") or [] if i in held]}
                for s in manifest.get("segments") or []]
    if not segments:  # a run made before segments (or a new one): one segment, what it has done
        segments = [{"environment": manifest.get("environment"), "started": manifest.get("start"), "examples": []}]
    listed = {i for s in segments for i in s["examples"]}
    segments[-1]["examples"] += [i for i in done if i not in listed]
    segments = [s for s in segments if s["examples"]]  # a segment that kept nothing says nothing
    if segments and segments[-1]["environment"] == current:
        return {**manifest, "segments": segments}
    diffs = differences(segments[-1]["environment"], current) if segments else []
    if diffs:
        warnings.warn(f"{where} resumes on other code, packages or hardware than its last session; each example keeps "
                      f"the environment that computed it (the manifest's segments; on another CPU a near-tie in a "
                      f"selector's scores can pick other rows). Differences: " + "; ".join(diffs),
                      WorkbenchWarning, stacklevel=3)
    return {**manifest, "segments": [*segments, {"environment": current, "started": now(), "examples": []}]}


def record(manifest: dict, result_id: str, computed: bool = True) -> None:
    """List `result_id` under the current segment (in place), out of any earlier one; with
    `computed=False` (it failed), only take it out."""
    segments = manifest.get("segments")
    if not segments:
        return
    for segment in segments:
        if result_id in segment["examples"]:
            segment["examples"].remove(result_id)
    if computed:
        segments[-1]["examples"].append(result_id)
    manifest["segments"] = [s for s in segments[:-1] if s["examples"]] + [segments[-1]]


def hardware(segments) -> dict[str, int]:
    """{CPU (and GPU, where one ran) that computed them: examples} over a manifest's `segments`, most first;
    an unrecorded environment counts as "not recorded"."""
    counts: dict[str, int] = {}
    for segment in segments or ():
        device = (segment.get("environment") or {}).get("device") or {}
        name = device.get("cpu") or "not recorded"
        name += f" + {device['gpu']}" if device.get("gpu") else ""
        counts[name] = counts.get(name, 0) + len(segment.get("examples") or [])
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def hardware_sentence(segments, name=str) -> str:
    """"computed on A (k examples), B (m examples): …" where a run's segments name several CPUs, else "";
    `name` writes a CPU's name (the app escapes it: it is data)."""
    machines = hardware(segments)
    if len(machines) < 2:
        return ""
    return ("computed on " + ", ".join(f"{name(cpu)} ({k} examples)" for cpu, k in machines.items())
            + ": on another CPU a selector's near-tie can pick other rows (the manifest's segments)")

