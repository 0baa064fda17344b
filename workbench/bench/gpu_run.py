"""The parts of the GPU run (issue 30), each writing its own file as it goes; run as commands of
`kvwb bench gpu` (`workbench/cli/bench.py` parses their options into the `args` each takes):

    kvwb bench gpu versions  --out OUT/versions.json --manifest .whl/versions.txt
    kvwb bench gpu exactness --out OUT/exactness.json --shape llama-3.2-1b
    kvwb bench gpu timing    --out OUT/timing.md --shapes llama-3.1-8b,llama-3.2-1b
    kvwb bench gpu gemma     --out OUT/gemma.md --shape gemma-3-1b --length 4096
    kvwb bench gpu wheels    --requirements .whl/carry.txt --manifest .whl/versions.txt
    kvwb bench gpu sizes     .whl

`bench/gpu.sh` runs the first four in that order, one process each under its own time limit.
A part rewrites its file atomically after each unit of work (a dtype, a row), so whatever it
finished survives a later failure, a kill at its time limit or a crash. `--time-limit` is the
part's own deadline: nothing new is started after it. `GPU_BENCH_FAIL=part[,part]` makes those
parts fail on purpose once their first unit is written (the rehearsal's test of all this).
`wheels` and `sizes` serve `make gpu-wheels` here, not the device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pandas as pd
import torch

from workbench.bench import gpu_env as env
from workbench.atomic import write_json, write_text
from workbench.bench.ratios import machine
from workbench.bench.gpu import TABLE10, random_model, time_context, timing_rows
from workbench.context import context_of_length
from workbench.exactness import check_exactness
from workbench.report import markdown_table


def _maybe_fail(part: str) -> None:
    """Fail here when GPU_BENCH_FAIL names `part` (after its first unit of work is written)."""
    if part in os.environ.get("GPU_BENCH_FAIL", "").split(","):
        raise RuntimeError(f"part {part!r} failed on purpose (GPU_BENCH_FAIL)")


REFERENCE_NOTE = ("Every time is the library's own path (the engine) but `hf_sdpa_dense_ttft_ms`: HF's SDPA forward "
                  "of the same tokens, a reference only (`bench.gpu.hf_sdpa_first_token`).")


def _header(args) -> str:
    import transformers

    return (f"`{args.command_text}`\n\n"
            f"random weights ({args.dtype}, {args.device}); machine: {machine()}; "
            f"transformers {transformers.__version__}\n\n{REFERENCE_NOTE}\n")


def versions(args) -> dict:
    """Every version the run uses (torch, CUDA, the GPU and each distribution the bench path
    loads), against the versions here when the manifest travelled."""
    import transformers  # noqa: F401 (loaded like the bench path loads it)

    expected = env.read_manifest(args.manifest) if args.manifest and args.manifest.exists() else {}
    report = {"python": sys.version.split()[0], "executable": sys.executable, "torch": torch.__version__,
              "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              **env.differences(expected, args.site, names=env.loaded())}
    for name, row in report["distributions"].items():
        mark = "carried" if row["carried"] else "image"
        same = "" if row["here"] in (None, row["version"]) else f"   (here: {row['here']})"
        print(f"{name:28s} {row['version'] or 'MISSING':18s} {mark}{same}")
    print(f"python {report['python']}, torch {report['torch']}, CUDA {report['cuda']}, GPU {report['gpu']}")
    for line in report["unmet"]:
        print("unmet:", line)
    write_json(args.out, report)
    _maybe_fail("versions")
    return report


def _verdicts(report: dict) -> str:
    """One line per check of an exactness report."""
    return "\n".join(f"- {report['dtype']} {name}: {'ok' if c['ok'] else 'FAILED'} "
                     f"{ {k: v for k, v in c.items() if k != 'ok'} }" for name, c in report["checks"].items())


def exactness(args) -> dict:
    """`check_exactness` on one shape in each dtype, the file rewritten after each."""
    result = {"shape": args.shape, "device": args.device, "ok": True, "dtypes": {}, "skipped": []}
    deadline = time.monotonic() + args.time_limit
    for dtype in args.dtypes:
        if time.monotonic() > deadline:
            result["skipped"].append(dtype)
            continue
        start = time.monotonic()
        model = random_model(args.shape, args.device, getattr(torch, dtype))
        report = check_exactness(context_of_length(model, args.length))
        report["seconds"] = time.monotonic() - start
        result["dtypes"][dtype] = report
        result["ok"] = result["ok"] and report["ok"]
        print(_verdicts(report), flush=True)
        write_json(args.out, result)
        del model
        _free()
        _maybe_fail("exactness")
    result["ok"] = result["ok"] and not result["skipped"]
    write_json(args.out, result)
    return result


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _table10(done: pd.DataFrame) -> str:
    """Our first row (the first shape at the longest length) beside BCR's Table 10."""
    first = done.iloc[0]
    head = f"ours: {first['shape']} at {first['n_tokens']} tokens (ms)"
    rows = [{"figure": fig, "BCR Table 10: A100, 8B, 4096 (ms)": bcr, head: float(first[col])}
            for fig, bcr, col in TABLE10]
    return "Beside BCR's Table 10:\n\n" + markdown_table(pd.DataFrame(rows)) + "\n"


def timing_text(rows: list[dict], shapes: list[str], header: str) -> str:
    """The timing part's markdown: the rows done, sorted, beside Table 10, and the rows skipped."""
    done = pd.DataFrame([r for r in rows if "skipped" not in r])
    skipped = [f"- {r['shape']} at {r['n_asked']} tokens: {r['skipped']}" for r in rows if "skipped" in r]
    parts = [header]
    if len(done):
        parts += [_table10(done), markdown_table(done.assign(order=done["shape"].map(shapes.index))
                                                 .sort_values(["order", "n_tokens"]).drop(columns=["order", "n_asked"]))
                  + "\n"]
    if skipped:
        parts.append("Not run:\n\n" + "\n".join(skipped) + "\n")
    return "\n".join(parts)


def timing(args) -> list[dict]:
    """The timing table (`bench.gpu.timing_rows`), rewritten after each row."""
    shapes, lengths = list(args.shapes), list(args.lengths)
    rows, header = [], _header(args)
    for row in timing_rows(shapes, lengths, args.device, getattr(torch, args.dtype), args.repeats,
                           not args.no_diagnosis, time.monotonic() + args.time_limit):
        rows.append(row)
        write_text(args.out, timing_text(rows, shapes, header))
        if "skipped" not in row:
            _maybe_fail("timing")
    print(timing_text(rows, shapes, header))
    return rows


def gemma(args) -> str:
    """A sliding-window shape: exactness, then one timing row, each written when done."""
    model = random_model(args.shape, args.device, getattr(torch, args.dtype))
    ctx = context_of_length(model, args.length)
    report = check_exactness(ctx)
    text = f"{_header(args)}\nExactness ({'ok' if report['ok'] else 'FAILED'}):\n\n{_verdicts(report)}\n"
    write_text(args.out, text)
    print(text, flush=True)
    _maybe_fail("gemma")
    row = {"shape": args.shape, **time_context(model, ctx, args.repeats, diagnosis=not args.no_diagnosis)}
    table = markdown_table(pd.DataFrame([row])) + "\n"
    write_text(args.out, f"{text}\n{table}")
    print(table)
    return text


def wheels(args) -> dict[str, str]:
    """Run the bench path on the tiny shapes (CPU), then name what travels and write the manifest."""
    for shape in ("tiny", "tiny-gemma3"):
        model = random_model(shape, "cpu", torch.float32)
        ctx = context_of_length(model, 800)
        check_exactness(ctx)
        time_context(model, ctx, repeats=1)
    import transformers  # noqa: F401

    on_path = env.loaded()
    carry = env.carried(on_path)
    lines = [f"{n}=={v}" for n, v in carry.items()]
    write_text(args.requirements, "\n".join(lines) + "\n")
    write_text(args.manifest, "\n".join(f"{n}=={v}" for n, v in {**on_path, **carry}.items()) + "\n")
    print("\n".join(lines))
    return carry


def sizes(args) -> bool:
    """The wheels' sizes, against what a device call carries with the working tree."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True, cwd=args.root).stdout.decode().split("\0")
    tree = sum(p.stat().st_size for f in files if f and (p := args.root / f).is_file())
    text, fits = env.size_report(args.folder, tree)
    print(text)
    return fits
