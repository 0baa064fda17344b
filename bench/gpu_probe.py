"""What the first GPU run (docs/BENCHMARKS.md, "GPU: the first run") left open, in short device calls:

1. the host-sync check of the batched repair with torch's sync debug mode set to "error", so a
   sync inside the layer loop raises with its Python traceback;
2. what CADENCE-Grad's scoring time is made of: the greedy ŷ decode (per step) against the
   teacher-forced forward + backward with ŷ given, beside dense TTFT and BCR's draft;
3. a torch.profiler table of decision_saliency with ŷ given.

    python bench/gpu_probe.py OUT_DIR [--shapes llama-3.2-1b,llama-3.1-8b] [--length 4096]

`--second`: check_exactness as the first run ran it (llama-3.2-1b, 2048 tokens, bf16) with the
Python stack of every sync warning kept, then a profile of the greedy decode (4 tokens) on
llama-3.1-8b at 4096 tokens. `--third`: the host-sync check alone on one context, in "error"
mode, then twice in "warn" mode. (These found that the first run's bf16 "sync" was the debug
mode's own once-per-process notice; `exactness.sync_sites` now tells the two apart.)

`--graphs`: the decode step captured as a CUDA graph (`engine.decode`), per shape (default
llama-3.2-1b, llama-3.1-8b, gemma-3-1b at 4096 tokens): ŷ over the splice (24 tokens) through
HF's eager modules, the engine's uncaptured step and its captured one, their tokens and times;
answer_cells' batched decode with and without the capture; then the timing row of
`bench/gpu.sh` (CADENCE-Grad's TTFT ÷ dense) with the captured decode. `--ttft`: that timing row
four times in one process per shape, ŷ decoded through HF's eager modules and through the
captured step in turn (hf, graphed, hf, graphed), so the two are compared within one process.
`--diagnosis`: a whole Diagnosis (the timing row's: default selectors, four budgets) per shape,
with the capture off and on in turn, twice, in one process, and whether their answers agree.
These three take `--dtype` (default bfloat16).

Writes OUT_DIR/probe.md as it goes. On CPU it runs with the tests' tiny shape (a rehearsal).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

from workbench import exactness
from workbench.bench.gpu import _median_ms, first_token, random_model, time_context
from workbench.bench.ratios import _time
from workbench.context import context_of_length
from workbench.decode import continue_greedy
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.engine.answers import answer_cells
from workbench.engine.decode import GRAPHS_ENV
from workbench.kv import KVCache
from workbench.selectors import default_selectors
from workbench.signals.attention import draft_attention
from workbench.splice import empty_cache
from workbench.signals.saliency import cache_gradients, decision_saliency

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # HF's steps: the tests' oracle
from hf_oracle import hf_continue_greedy  # noqa: E402


def sync_inputs(ctx) -> tuple[list[torch.Tensor], list[int]]:
    """check_exactness's row sets and the answer its host-sync check decodes against."""
    dense_ids = ctx.generate(ctx.dense, 8).token_ids
    return exactness.check_row_sets(ctx), exactness.answer_every_cell_leaves(ctx.model, dense_ids)


def sync_traceback(ctx) -> str:
    """The traceback of the first host sync inside the batched repair's layer loop, or 'none'."""
    original = torch.cuda.set_sync_debug_mode
    torch.cuda.set_sync_debug_mode = lambda mode: original("error" if mode == "warn" else mode)
    try:
        exactness.host_syncs(ctx, *sync_inputs(ctx), 8)
        return "none"
    except RuntimeError:
        return "".join(traceback.format_exc().splitlines(keepends=True)[-40:])
    finally:
        torch.cuda.set_sync_debug_mode = original
        if torch.cuda.is_available():
            original("default")


def parts(ctx, y: list[int]) -> dict:
    """dense TTFT; greedy ŷ (`y`, 24 tokens at most) and its steps; forward + backward with ŷ given
    (all of it, and its first 6 tokens); decision_saliency with ŷ given; BCR's draft."""
    model = ctx.model
    row = {"n_tokens": ctx.layout.n_tokens, "answer_tokens": len(y)}
    with torch.inference_mode():  # the engine's dense prefill and first token, as bench/gpu.py's dense_ttft_ms
        row["dense_ttft_ms"] = _median_ms(lambda: first_token(model, empty_cache(model), ctx.layout.ids))
    row["greedy_ms"] = _median_ms(lambda: ctx.generate(ctx.spliced, 24))
    row["greedy_step_ms"] = row["greedy_ms"] / max(1, len(y))
    row["fwd_bwd_ms"] = _median_ms(lambda: cache_gradients(model, ctx.spliced, ctx.suffix_ids, y))
    row["fwd_bwd_6_ms"] = _median_ms(lambda: cache_gradients(model, ctx.spliced, ctx.suffix_ids, y[:6]))
    row["saliency_given_6_ms"] = _median_ms(lambda: decision_saliency(ctx, answer_ids=y[:6]))
    row["saliency_ms"] = _median_ms(lambda: decision_saliency(ctx))
    row["draft_ms"] = _median_ms(lambda: draft_attention(ctx))
    return row


def profile(ctx, y6) -> str:
    """torch.profiler's tables (by CPU total, then by self device time) of decision_saliency, ŷ = y6 given."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    decision_saliency(ctx, answer_ids=y6)
    with torch.profiler.profile(activities=activities) as prof:
        decision_saliency(ctx, answer_ids=y6)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return (prof.key_averages().table(sort_by="cpu_time_total", row_limit=18, max_name_column_width=60) + "\n"
            + prof.key_averages().table(sort_by=sort, row_limit=12, max_name_column_width=60))


class _StackedWarning(warnings.WarningMessage):
    """A warning that keeps the Python stack it was raised from (sync warnings only)."""
    kept: list = []

    def __init__(self, message, *args, **kwargs):
        super().__init__(message, *args, **kwargs)
        if exactness.SYNC_WARNING in str(message):
            _StackedWarning.kept.append("".join(traceback.format_stack()[-14:-1]))


def second(emit, cuda: bool) -> None:
    """check_exactness with the stack of every sync warning kept; the 8B greedy decode, timed and profiled."""
    device = "cuda" if cuda else "cpu"
    warnings.WarningMessage = _StackedWarning
    model = random_model("llama-3.2-1b" if cuda else "tiny", device, torch.bfloat16)
    report = exactness.check_exactness(context_of_length(model, 2048 if cuda else 600))
    emit(f"## check_exactness, bf16: host_syncs {report['checks']['host_syncs']}")
    for stack in dict.fromkeys(_StackedWarning.kept):
        emit(f"```\n{stack}\n```")
    del model
    shape = "llama-3.1-8b" if cuda else "tiny"
    model = random_model(shape, device, torch.bfloat16)
    ctx = context_of_length(model, 4096 if cuda else 600)
    hf = ctx.spliced.to_hf
    emit(f"- to_hf: {_median_ms(hf):.3f} ms; generate 4: {_median_ms(lambda: ctx.generate(ctx.spliced, 4)):.3f} ms; "
         f"generate 1: {_median_ms(lambda: ctx.generate(ctx.spliced, 1)):.3f} ms")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        ctx.generate(ctx.spliced, 4)
        if cuda:
            torch.cuda.synchronize()
    emit(f"## greedy decode, 4 tokens, {shape}\n\n```\n"
         + prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60) + "\n```")


def third(emit, cuda: bool) -> None:
    """host_syncs three times on one bf16 context: sync mode "error" (the traceback), then "warn" twice."""
    warnings.WarningMessage = _StackedWarning
    model = random_model("llama-3.2-1b" if cuda else "tiny", "cuda" if cuda else "cpu", torch.bfloat16)
    ctx = context_of_length(model, 2048 if cuda else 600)
    emit(f"## error mode first\n\n```\n{sync_traceback(ctx)}\n```")
    row_sets, wrong = sync_inputs(ctx)
    for i in range(2):
        _StackedWarning.kept.clear()
        emit(f"- warn mode, call {i + 1}: {exactness.host_syncs(ctx, row_sets, wrong, 8)}")
        for stack in dict.fromkeys(_StackedWarning.kept):
            emit(f"```\n{stack}\n```")


DECODES = ("hf", "engine", "graphed")  # HF's steps (the tests' oracle), the engine's eager steps, captured


def _graphs(on: bool) -> None:
    """Capture decode steps or not; off, every decode steps through the engine's eager `Decoder`."""
    os.environ[GRAPHS_ENV] = "1" if on else "0"


def _contexts(emit, cuda: bool, shapes: list[str], length: int, deadline: float, dtype: torch.dtype):
    """(shape, model, context of `length` tokens) per shape in `dtype`; a shape is not started
    after `deadline` (time.monotonic())."""
    for shape in shapes:
        if time.monotonic() > deadline:
            emit(f"- {shape}: not run (deadline)")
            continue
        model = random_model(shape, "cuda" if cuda else "cpu", dtype)
        yield shape, model, context_of_length(model, length)
        if cuda:
            torch.cuda.empty_cache()


def graphs(emit, cuda: bool, shapes: list[str], length: int, deadline: float, dtype: torch.dtype) -> None:
    """ŷ decoded three ways, answer_cells' decode with and without the capture, and the timing row
    with the captured decode, per shape (see the module docstring)."""
    for shape, model, ctx in _contexts(emit, cuda, shapes, length, deadline, dtype):
        with torch.inference_mode():
            out = model.hf(input_ids=ctx.suffix_ids.to(model.device)[None], cache=ctx.spliced.to_hf(),
                           use_cache=True, logits_to_keep=1)
        logits, prefilled = out.logits[0, -1], KVCache.from_hf(out.cache)

        def decode(way: str):
            if way == "hf":  # the reference: HF's own steps on a fresh HF cache
                return hf_continue_greedy(model, logits, prefilled.to_hf(), 24)
            _graphs(way == "graphed")
            return continue_greedy(model, logits, prefilled, 24)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            answers = {way: decode(way).token_ids for way in DECODES}
        failed = [str(w.message) for w in caught if "could not be captured" in str(w.message)]
        times = {way: _median_ms(lambda way=way: decode(way)) for way in DECODES}
        lead = next((i for i, (a, b) in enumerate(zip(answers["hf"], answers["graphed"])) if a != b),
                    min(len(answers["hf"]), len(answers["graphed"])))
        emit(f"## {shape} at {ctx.layout.n_tokens} tokens ({str(model.dtype).removeprefix('torch.')}): ŷ over the splice\n\n"
             + "\n".join(f"- {name}_ms: {times[name]:.3f} ({times[name] / max(1, len(answers[name])):.3f} a token, "
                         f"{len(answers[name])} tokens)" for name in DECODES)
             + f"\n- graphed = engine: {answers['graphed'] == answers['engine']}; graphed = hf for the first {lead} "
               f"of {len(answers['hf'])} tokens\n- capture failed: {failed or 'no'}")
        row_sets = exactness.check_row_sets(ctx)
        leave = exactness.answer_every_cell_leaves(model, ctx.generate(ctx.dense, 8).token_ids)

        def cells(graphed: bool):
            _graphs(graphed)
            return answer_cells(model, ctx.spliced, ctx.layout.ids, row_sets, ctx.suffix_ids, leave, 24)

        same = [a.answer == b.answer for a, b in zip(cells(True), cells(False))]
        emit(f"- answer_cells, {len(row_sets)} cells decoding on: captured {_median_ms(lambda: cells(True)):.3f} ms, "
             f"uncaptured {_median_ms(lambda: cells(False)):.3f} ms; the same answers: {sum(same)} of {len(same)}")
        _graphs(True)
        if time.monotonic() < deadline:
            row = time_context(model, ctx, repeats=3, diagnosis=False)
            emit("- timing row with the captured decode: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))


TTFT_KEYS = ("dense_ttft_ms", "cadence_grad_ms", "cadence_ttft_ms", "cadence_ttft_vs_dense", "draft_ms",
             "bcr_ttft_ms", "bcr_ttft_vs_dense", "repair_0.2_ms")


def ttft(emit, cuda: bool, shapes: list[str], length: int, deadline: float, dtype: torch.dtype) -> None:
    """The timing row per shape, ŷ through HF and through the captured step in turn (module docstring)."""
    for shape, model, ctx in _contexts(emit, cuda, shapes, length, deadline, dtype):
        emit(f"## {shape} at {ctx.layout.n_tokens} tokens ({str(model.dtype).removeprefix('torch.')}): ŷ through HF, then captured, twice\n\n"
             f"| decode | {' | '.join(TTFT_KEYS)} |\n|---|{'---|' * len(TTFT_KEYS)}")
        for how in ("hf", "graphed", "hf", "graphed"):
            _graphs(how == "graphed")
            row = time_context(model, ctx, repeats=3, diagnosis=False)
            emit(f"| {how} | " + " | ".join(f"{row[k]:.3f}" for k in TTFT_KEYS) + " |")


def diagnoses(emit, cuda: bool, shapes: list[str], length: int, deadline: float, dtype: torch.dtype) -> None:
    """A whole Diagnosis per shape, the capture off then on (module docstring)."""
    config = DiagnoseConfig(selectors=default_selectors(), budgets=(0.1, 0.2, 0.3, 0.5), attribution=False)
    warm_up = DiagnoseConfig(selectors=default_selectors()[:2], budgets=(0.1,), attribution=False)
    for shape, model, ctx in _contexts(emit, cuda, shapes, length, deadline, dtype):
        diagnose(model, ctx.example, warm_up, progress=False)  # first calls' lazy set-up, out of the timing
        seconds, answers = {False: [], True: []}, {}
        for on in (False, True, False, True):
            _graphs(on)
            done = []
            seconds[on].append(_time(lambda: done.append(diagnose(model, ctx.example, config, progress=False))))
            answers[on] = done[0].outcomes["answer"].tolist()
        same = sum(a == b for a, b in zip(answers[False], answers[True]))
        emit(f"- {shape} at {ctx.layout.n_tokens} tokens: a whole Diagnosis, uncaptured "
             f"{', '.join(f'{t:.1f}' for t in seconds[False])} s, captured {', '.join(f'{t:.1f}' for t in seconds[True])}"
             f" s (in turn); the same answer in {same} of {len(answers[True])} outcomes")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--shapes", default=None)
    p.add_argument("--length", type=int, default=None)
    p.add_argument("--deadline-s", type=float, default=200.0)
    p.add_argument("--second", action="store_true")
    p.add_argument("--third", action="store_true")
    p.add_argument("--graphs", action="store_true")
    p.add_argument("--ttft", action="store_true")
    p.add_argument("--diagnosis", action="store_true")
    p.add_argument("--dtype", default="bfloat16", help="of --graphs, --ttft and --diagnosis")
    a = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    device, shapes = ("cuda", a.shapes or "llama-3.2-1b,llama-3.1-8b") if cuda else ("cpu", a.shapes or "tiny")
    length = a.length or (4096 if cuda else 600)
    a.out.mkdir(parents=True, exist_ok=True)
    report = a.out / "probe.md"
    start, lines = time.monotonic(), [f"# GPU probe ({device}, torch {torch.__version__})\n"]

    def emit(text: str):
        print(text, flush=True)
        lines.append(text)
        report.write_text("\n".join(lines) + "\n")

    if a.graphs or a.ttft or a.diagnosis:
        mode = graphs if a.graphs else ttft if a.ttft else diagnoses
        shapes = a.shapes or ("llama-3.2-1b,llama-3.1-8b,gemma-3-1b" if cuda else "tiny,tiny-gemma3")
        mode(emit, cuda, shapes.split(","), length, start + a.deadline_s, getattr(torch, a.dtype))
        emit(f"done in {time.monotonic() - start:.0f} s")
        return 0
    if a.second or a.third:
        (second if a.second else third)(emit, cuda)
        emit(f"done in {time.monotonic() - start:.0f} s")
        return 0
    for i, shape in enumerate(shapes.split(",")):
        if time.monotonic() - start > a.deadline_s:
            emit(f"- {shape}: not run (deadline)")
            continue
        model = random_model(shape, device, torch.bfloat16)
        ctx = context_of_length(model, length)
        if i == 0 and cuda:
            emit(f"## {shape}: the bf16 sync\n\n```\n{sync_traceback(ctx)}\n```")
        y = list(ctx.generate(ctx.spliced, 24).token_ids)  # ŷ, decoded once
        row = parts(ctx, y)
        emit(f"## {shape} at {length} tokens (bf16)\n\n" + "\n".join(f"- {k}: {v:.3f}" if isinstance(v, float)
                                                                    else f"- {k}: {v}" for k, v in row.items()))
        if i == 0:
            emit(f"## {shape}: profile of decision_saliency, ŷ given (6 tokens)\n\n```\n{profile(ctx, y[:6])}\n```")
        del model, ctx
        if cuda:
            torch.cuda.empty_cache()
    emit(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
