"""The GPU run (issues 16 and 30) rehearsed on CPU with tiny shapes (CI has no GPU): its shapes,
its exactness checks, the wheels it carries and `bench/gpu.sh` end to end, a forced failure
included."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import workbench as wb
from conftest import shifted_splice, small_example
from workbench.bench import gpu_env as env
from workbench.bench import gpu
from workbench.bench.gpu import SHAPES, random_model, shape_config
from workbench.context import context_of_length
from workbench.splice import empty_cache
from workbench.errors import WorkbenchError
from workbench.exactness import SYNC_WARNING, check_exactness, sync_sites

ROOT = Path(__file__).resolve().parents[2]
# torch's once-per-process notice when the CUDA sync debug mode is first set: not a sync.
SYNC_NOTICE = "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
COLUMNS = ("dense_ttft_ms", "hf_sdpa_dense_ttft_ms", "assembly_ms", "cadence_grad_ms", "draft_ms", "repair_0.2_ms",
           "repair_1_ms", "cadence_ttft_ms", "bcr_ttft_ms", "diagnosis_s")


@pytest.mark.parametrize("shape, billions", [("llama-3.2-1b", 1.24), ("llama-3.1-8b", 8.03), ("gemma-3-1b", 1.00)])
def test_the_real_shapes_have_the_published_parameter_counts(shape, billions):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: no memory, no init
        hf = AutoModelForCausalLM.from_config(shape_config(shape))
    n = sum(p.numel() for p in hf.parameters()) / 1e9
    assert n == pytest.approx(billions, abs=0.01)


def test_a_random_model_is_built_on_the_device_in_the_dtype_asked():
    model = random_model("tiny", "cpu", torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.adapter.n_layers == 3
    gemma = random_model("tiny-gemma3", "cpu", torch.float32)
    assert gemma.adapter.has_windows and set(SHAPES) >= {"gemma-3-1b", "tiny-gemma3"}
    with pytest.raises(WorkbenchError, match="unknown shape 'llama-70b'"):
        random_model("llama-70b", "cpu", torch.float32)


def hf_calls(model):
    """A forward pre-hook on `model.hf` and its base model: each call appends `inside[0]` (set while
    the labelled reference runs). Returns (the calls, `inside`, the hooks' remover)."""
    calls = []
    inside = [False]

    def record(module, args, kwargs):
        calls.append(inside[0])

    handles = [m.register_forward_pre_hook(record, with_kwargs=True) for m in (model.hf, model.hf.model)]
    return calls, inside, lambda: [h.remove() for h in handles]


def test_the_ttfts_time_the_engine_and_only_the_labelled_reference_calls_hf(monkeypatch):
    """Issue 44: the selectors' TTFTs and the dense TTFT run the library's answering path (the
    engine's question pass), whose first token is HF's; HF's forward is called only by the
    reference column `hf_sdpa_dense_ttft_ms`."""
    model = random_model("tiny", "cpu", torch.float32)
    ctx = context_of_length(model, 300)
    calls, inside, remove = hf_calls(model)
    try:
        rows = ctx.reused_positions[::4]
        repaired = ctx.repair(rows)
        assert gpu.first_token(model, repaired, ctx.suffix_ids) == ctx.generate(repaired, 1).token_ids[0]
        assert calls == []  # the repaired TTFT's pass: the engine's
        dense = gpu.first_token(model, empty_cache(model), ctx.layout.ids)
        assert calls == []
        inside[0] = True
        assert gpu.hf_sdpa_first_token(model, ctx.layout.ids) == dense and calls == [True, True]
        inside[0] = False
        calls.clear()
        reference = gpu.hf_sdpa_first_token

        def labelled(*args):
            inside[0] = True
            try:
                return reference(*args)
            finally:
                inside[0] = False

        monkeypatch.setattr(gpu, "hf_sdpa_first_token", labelled)
        row = gpu.time_context(model, ctx, repeats=1, diagnosis=False)
    finally:
        remove()
    assert row["cadence_ttft_ms"] > 0 and row["bcr_ttft_ms"] > 0 and row["hf_sdpa_dense_ttft_ms"] > 0
    assert calls and all(calls), calls  # HF ran (the reference: warm-up and one repeat), and only there
    assert len(calls) == 2 * 2  # model.hf and its base model, twice


def test_the_exactness_check_passes_on_a_sound_context_and_fails_a_wrong_splice(tiny_llama):
    ctx = wb.build_context(tiny_llama, small_example())
    report = check_exactness(ctx, max_new_tokens=4)
    assert report["ok"] and set(report["checks"]) == {"splice_layer0", "full_repair", "batched_cells", "host_syncs"}
    assert report["checks"]["full_repair"]["answers"]["equal"]
    broken = check_exactness(shifted_splice(ctx), max_new_tokens=4)
    assert not broken["ok"] and not broken["checks"]["splice_layer0"]["ok"]


def test_only_the_sync_warning_counts_as_a_host_sync_not_the_debug_mode_notice():
    """The first GPU run's bf16 "sync" was torch's notice, said once per process by the first
    set_sync_debug_mode call: it must not count; the sync warning itself must."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(SYNC_NOTICE)
        warnings.warn(SYNC_WARNING)
    assert len(caught) == 2
    assert sync_sites(caught) == [f"test_bench_gpu.py:{caught[1].lineno}"]
    assert sync_sites(caught[:1]) == []


def test_the_carried_wheels_are_the_pure_python_ones_the_bench_path_imports():
    import plotly  # noqa: F401 (the bench path imports these; the test session may not have yet)
    import transformers  # noqa: F401

    carried = env.carried(env.loaded())
    assert {"transformers", "huggingface-hub", "plotly", "tqdm"} <= set(carried)
    assert carried["transformers"] == transformers.__version__
    assert not {"torch", "numpy", "tokenizers", "safetensors", "pandas", "kv-repair-workbench"} & set(carried)
    assert all(env.is_pure(name) for name in carried)
    assert "typer" not in carried  # transformers requires it for its command line; the bench never imports it


def test_the_size_report_adds_the_working_tree(tmp_path):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"x" * (3 << 20))
    text, fits = env.size_report(tmp_path, tree_bytes=2 << 20)
    assert fits and "3.00 MiB  a-1-py3-none-any.whl" in text and "5.00 MiB  with the working tree" in text
    assert not env.size_report(tmp_path, tree_bytes=62 << 20)[1]


def run_gpu_sh(out: Path, **overrides) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "SHAPES": "tiny",
               "DEVICE": "cpu", "REPEATS": "1", "WHEELS": "", "OUT": str(out), **overrides}
    return subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh")], env=environ, capture_output=True, text=True,
                          timeout=300)


def table_rows(text: str) -> list[dict]:
    """The rows of the markdown table whose header starts with `| shape`."""
    lines = text.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("| shape")))
    columns = [c.strip() for c in lines[head].strip("|").split("|")]
    rows = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_gpu_sh_rehearsal_writes_each_part_as_it_ends_and_survives_a_failing_part(tmp_path):
    """The whole script on CPU with tiny shapes; the timing part fails on purpose after its first
    row: the parts before it keep their files, it keeps its row and says why it failed, and the
    Gemma part after it still runs."""
    done = run_gpu_sh(tmp_path, GPU_BENCH_FAIL="timing")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["exactness.json", "gemma.md", "timing.error.txt", "timing.md", "versions.json"]  # no temporaries

    versions = json.loads((tmp_path / "versions.json").read_text())
    assert versions["torch"] == torch.__version__ and versions["distributions"]["transformers"]["version"]
    exact = json.loads((tmp_path / "exactness.json").read_text())
    assert exact["ok"] and set(exact["dtypes"]) == {"bfloat16", "float32"}, exact
    assert all(c["ok"] for report in exact["dtypes"].values() for c in report["checks"].values())

    timing = (tmp_path / "timing.md").read_text()
    rows = table_rows(timing)
    assert len(rows) == 1 and rows[0]["shape"] == "tiny"  # the first row (900 tokens); the 800 never ran
    assert int(rows[0]["n_tokens"]) > int(rows[0]["n_reused"]) > 0
    for column in COLUMNS:
        assert float(rows[0][column]) > 0, column
    ratio = float(rows[0]["bcr_ttft_ms"]) / float(rows[0]["dense_ttft_ms"])
    assert float(rows[0]["bcr_ttft_vs_dense"]) == pytest.approx(ratio, rel=0.05)
    assert "Beside BCR's Table 10" in timing and "542.700" in timing
    assert "dense prefill (ours: HF SDPA forward, reference)" in timing and "a reference only" in timing
    assert "failed on purpose" in (tmp_path / "timing.error.txt").read_text()

    gemma = (tmp_path / "gemma.md").read_text()
    assert "Exactness (ok)" in gemma and table_rows(gemma)[0]["shape"] == "tiny-gemma3"
    assert "failed: timing" in done.stdout


def test_gpu_sh_runs_the_parts_asked_and_compares_versions_with_the_manifest(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "versions.txt").write_text("transformers==0.0.1\n")  # what `make gpu-wheels` found here
    done = run_gpu_sh(tmp_path / "out", PARTS="versions", WHEELS=str(wheels))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["versions.json"]
    versions = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert versions["differ"] == ["transformers"] and "(here: 0.0.1)" in done.stdout


def run_probe(out: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_probe.py"), str(out), *args], env=environ,
                          capture_output=True, text=True, timeout=300)


def test_gpu_probe_rehearsal_times_each_part_of_cadence_grad_and_reruns_the_sync_check(tmp_path):
    """`bench/gpu_probe.py` on CPU (the tiny shape): every part of the scoring is timed and the
    profile written; `--second` profiles the decode; the host-sync check alone, three times, finds
    nothing on CPU."""
    done = run_probe(tmp_path / "first")
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "first" / "probe.md").read_text()
    values = dict(re.findall(r"^- (\w+): ([\d.]+)$", text, re.M))
    for part in ("dense_ttft_ms", "greedy_ms", "greedy_step_ms", "fwd_bwd_ms", "fwd_bwd_6_ms",
                 "saliency_given_6_ms", "saliency_ms", "draft_ms"):
        assert float(values[part]) > 0, part
    assert "profile of decision_saliency" in text and "Self CPU time total" in text

    second = run_probe(tmp_path / "second", "--second")
    assert second.returncode == 0, second.stderr[-3000:]
    text = (tmp_path / "second" / "probe.md").read_text()
    assert "'cuda_syncs': []" in text and "## greedy decode, 4 tokens, tiny" in text and "aten::" in text

    third = run_probe(tmp_path / "third", "--third")
    assert third.returncode == 0, third.stderr[-3000:]
    text = (tmp_path / "third" / "probe.md").read_text()
    assert "## error mode first\n\n```\nnone" in text
    assert text.count("'cuda_syncs': []") == 2 and "warn mode, call 2" in text


@pytest.mark.slow
def test_gpu_probe_graphs_rehearsal_decodes_three_ways_and_times_the_row(tmp_path):
    """`--graphs` on CPU (tiny Llama and Gemma 3 shapes): HF's decode, the engine's and the static
    step give one answer; answer_cells gives the same answers both ways; the timing row follows.
    `--ttft`: the timing row four times, ŷ through HF and the engine in turn; `--diagnosis`: a whole
    Diagnosis four times, the static step off and on in turn, with the same answers."""
    done = run_probe(tmp_path / "graphs", "--graphs")
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "graphs" / "probe.md").read_text()
    for shape in ("tiny", "tiny-gemma3"):
        section = text.split(f"## {shape} at ")[1].split("## ")[0]
        for name in ("hf", "engine", "graphed"):
            assert float(re.search(rf"^- {name}_ms: ([\d.]+) ", section, re.M)[1]) > 0, (shape, name)
        assert "graphed = engine: True" in section and "capture failed: no" in section
        assert re.search(r"the same answers: (\d+) of \1$", section, re.M), section
        assert "cadence_ttft_vs_dense" in section
    ttft = run_probe(tmp_path / "ttft", "--ttft", "--shapes", "tiny")
    assert ttft.returncode == 0, ttft.stderr[-3000:]
    rows = re.findall(r"^\| (hf|graphed) \| ([\d.]+) \|", (tmp_path / "ttft" / "probe.md").read_text(), re.M)
    assert [how for how, _ in rows] == ["hf", "graphed", "hf", "graphed"] and all(float(v) > 0 for _, v in rows)
    whole = run_probe(tmp_path / "diagnosis", "--diagnosis", "--shapes", "tiny")
    assert whole.returncode == 0, whole.stderr[-3000:]
    line = re.search(r"uncaptured ([\d.]+), ([\d.]+) s, captured ([\d.]+), ([\d.]+) s \(in turn\); the same answer in "
                     r"(\d+) of (\d+) outcomes", (tmp_path / "diagnosis" / "probe.md").read_text())
    assert line and all(float(t) > 0 for t in line.groups()[:4]) and line[5] == line[6], line


def test_gpu_probe_keeps_the_python_stack_of_a_sync_warning_only():
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "bench" / "gpu_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    probe._StackedWarning.kept.clear()

    def raise_two():
        warnings.warn(SYNC_NOTICE)
        warnings.warn(SYNC_WARNING)

    original = warnings.WarningMessage
    warnings.WarningMessage = probe._StackedWarning
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            raise_two()
    finally:
        warnings.WarningMessage = original
    assert len(caught) == 2 and len(probe._StackedWarning.kept) == 1
    assert "in raise_two" in probe._StackedWarning.kept[0]


@pytest.mark.parametrize("argv, message", [
    (["timing", "--shapes", "tiny,llama-70b"], "unknown shapes llama-70b"),
    (["gemma", "--shape", "gemma-9"], "unknown shapes gemma-9"),
    (["exactness", "--shape", "tiny", "--dtypes", "float32,int8"], "--dtypes: unknown int8"),
])
def test_kvwb_bench_gpu_refuses_an_unknown_shape_or_dtype_in_one_line_before_any_work(tmp_path, capsys, argv,
                                                                                      message):
    """The parts' options are parsed by `kvwb bench gpu` (not by gpu_run): bad ones end in one line,
    and nothing is written."""
    from workbench.cli.main import main

    assert main(["bench", "gpu", *argv, "--out", str(tmp_path / "part.md")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
