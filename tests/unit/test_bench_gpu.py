"""The GPU benchmark's script and shapes, run on CPU with the tiny shape (CI has no GPU)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.bench_gpu import SHAPES, random_model
from workbench.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shape, billions", [("llama-3.2-1b", 1.24), ("llama-3.1-8b", 8.03)])
def test_the_real_shapes_have_the_published_parameter_counts(shape, billions):
    from transformers import AutoModelForCausalLM, LlamaConfig

    with torch.device("meta"):  # shapes only: no memory, no init
        hf = AutoModelForCausalLM.from_config(LlamaConfig(**SHAPES[shape]))
    n = sum(p.numel() for p in hf.parameters()) / 1e9
    assert n == pytest.approx(billions, abs=0.01)


def test_a_random_model_is_built_on_the_device_in_the_dtype_asked():
    model = random_model("tiny", "cpu", torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.adapter.n_layers == 3
    with pytest.raises(WorkbenchError, match="unknown shape 'llama-70b'"):
        random_model("llama-70b", "cpu", torch.float32)


def test_gpu_sh_runs_end_to_end_on_cpu_and_writes_its_table(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "SHAPES": "tiny",
           "LENGTHS": "800", "DTYPE": "float32", "DEVICE": "cpu", "REPEATS": "1", "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "gpu.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| shape"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    row = dict(zip(columns, (c.strip() for c in lines[lines.index(header) + 2].strip("|").split("|"))))
    assert row["shape"] == "tiny" and int(row["n_tokens"]) > int(row["n_reused"]) > 0
    for column in ("dense_ttft_ms", "assembly_ms", "cadence_grad_ms", "draft_ms", "repair_0.2_ms", "repair_1_ms",
                   "cadence_ttft_ms", "bcr_ttft_ms", "diagnosis_s"):
        assert float(row[column]) > 0, column
    ratio = float(row["bcr_ttft_ms"]) / float(row["dense_ttft_ms"])
    assert float(row["bcr_ttft_vs_dense"]) == pytest.approx(ratio, rel=0.05)
