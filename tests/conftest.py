"""Shared fixtures: tiny random models of every supported family (no downloads) and the
embedded model for the integration tier (marked `slow`, loaded once per session)."""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

# Under pytest-xdist (`make test`: `-n 2`) each worker takes its share of the cores, its
# subprocesses (notebook kernels, the app's server, `kvwb`) too: set before torch is imported.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
WORKER_THREADS = max(1, len(os.sched_getaffinity(0)) // WORKERS)
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(WORKER_THREADS))

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.byte_tokenizer import byte_tokenizer
from workbench.tasks import Example


def tiny_config(family: str, **overrides):
    """A 3-layer, 64-wide config of `family` with grouped-query attention."""
    from transformers import AutoConfig

    common = dict(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                  initializer_range=0.2, tie_word_embeddings=False)
    extra = {
        "llama": dict(rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 128}),
        "mistral": dict(sliding_window=None),
        "qwen2": dict(),
        "qwen3": dict(head_dim=16),
        # Gemma 3: both layer types, a window far shorter than the test contexts, a RoPE base
        # (and a linear scaling) per layer type, and a query scalar that is not head_dim.
        "gemma3_text": dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=16,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                             "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                "rope_theta": 1000000.0}}),
    }[family]
    return AutoConfig.for_model(family, **{**common, **extra, **overrides})


def tiny_model(family: str, seed: int = 0, dtype=torch.float32, attn: str = "sdpa", **overrides) -> wb.LoadedModel:
    """`tiny_config(family)` with random weights; `attn="eager"`: HF's eager attention (it returns weights)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(tiny_config(family, **overrides), attn_implementation=attn)
    name = f"tiny-{family}" if attn == "sdpa" else f"tiny-{attn}-{family}"
    return wb.wrap_model(hf.to(dtype), byte_tokenizer(), name=name)


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
DEFAULT_THREADS = torch.get_num_threads() if WORKERS == 1 else WORKER_THREADS


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test's thread count, set before any of its fixtures is built (a module's fixtures too,
    which an autouse fixture would follow). Tiny models run many small ops: one thread avoids OpenMP
    fork/join stalls (300x slower when another process holds a core). The embedded model's matmuls
    gain from all threads."""
    torch.set_num_threads(DEFAULT_THREADS if item.get_closest_marker("slow") else 1)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` (`make test`) with this suite's work units, each run whole on one worker:
    a module (its module fixtures built once), all of tests/app (they share `app_world`, ~20 s of
    CPU), and each notebook alone (the longest tests, nothing shared). Units go out in collection
    order (`--no-loadscope-reorder`): the app's and the notebooks' first, many short modules last."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module.startswith("tests/app/"):
                return "tests/app"
            return nodeid if nodeid.startswith(NOTEBOOK_RUNS) else module

    return SuiteUnits(config, log)


NOTEBOOK_RUNS = "tests/notebooks/test_notebooks.py::test_notebook_runs_top_to_bottom"


def run_cli(argv) -> int:
    """`kvwb ARGV` in this process: its exit code, whether returned or raised by argparse."""
    from workbench.cli import main

    try:
        return main([str(a) for a in argv])
    except SystemExit as stop:
        return stop.code


def small_example(n_passages: int = 3, example_id: str = "t0") -> Example:
    passages = [
        "Varek Olundi is coached by Mira Tessk.",
        "Mira Tessk was born in the city of Tressamor.",
        "Hollen Brave plays for the Quill Hawks.",
        "Ostra Vey founded the Lumen Guild in 1841.",
    ][:n_passages]
    return Example(example_id, passages, "In which city was the coach of Varek Olundi born?", ("Tressamor",))


def ended_at_once(model) -> dict:
    """Hooks under which every answer of the splice and the repairs ends its turn at once (the
    end-of-turn logit raised on the cells' pass); dense's own answer is untouched."""
    from workbench.engine.decode import stop_token_ids

    end = min(stop_token_ids(model))

    def hook(logits, hook):
        if hook.pass_name != "cells":
            return None
        logits[..., end] += 1e4
        return logits
    return {"hook_unembed": hook}


def same_layer_effects(batched, serial) -> None:
    """Equal up to batched-vs-serial rounding: the same rows in the same order and top tokens; log-probs
    within 1e-4 relative; distances (already relative to dense's norm) within 1e-4 relative plus 1e-5
    absolute (a distance near 0 is a difference of two near-equal residuals, whose rounding, ~1e-7 of
    the residual's norm, dominates it); ranks within 1 on at most 1% of rows, equal elsewhere: a
    rank counts the logits above the answer's, and one may lie within rounding of it (on SmolLM2,
    dense's lens at layer 22: another token 2e-6 from the answer's logit, rank 8943 against 8944)."""
    assert list(batched.columns) == list(serial.columns) and len(batched) == len(serial)
    for column in batched.columns.drop(["residual_distance", "logprob", "rank"]):
        assert batched[column].tolist() == serial[column].tolist(), column
    np.testing.assert_allclose(batched["residual_distance"], serial["residual_distance"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batched["logprob"], serial["logprob"], rtol=1e-4, atol=1e-6)
    off = (batched["rank"] - serial["rank"]).abs()
    # the splice's and dense's rows repeat beside each selection: count each (cache, layer) once
    shared = batched["cache"] != "repaired"
    distinct = batched[~shared | ~batched.duplicated(["cache", "layer"])]
    assert off.max() <= 1 and (off[distinct.index] > 0).sum() <= len(distinct) // 100, batched[off > 0]


@contextmanager
def hf_forward_calls(model: wb.LoadedModel):
    """The class names of HF's modules whose forward runs inside the block (the HF model, its base
    model, its decoder layers and their attention): HF's modules load the model and are the tests'
    oracle, so a workbench pass should leave this list empty."""
    hf, calls = model.hf, []
    modules = [hf, hf.model, *model.adapter.layers, *(layer.self_attn for layer in model.adapter.layers)]
    handles = [m.register_forward_pre_hook(lambda module, args: calls.append(type(module).__name__)) for m in modules]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def shifted_splice(ctx: wb.Context) -> wb.Context:
    """`ctx` with the second passage's keys rotated one position too far: a wrong splice."""
    keys = ctx.spliced.keys.clone()
    second = ctx.layout.passages[1]
    keys[:, :, second.start:second.end] = ctx.model.adapter.rerotate(keys[:, :, second.start:second.end], 1)
    return wb.Context(ctx.model, ctx.example, ctx.layout, wb.KVCache(keys, ctx.spliced.values), ctx.dense)


def transformer_bridge(model: wb.LoadedModel, folder: Path, name: str | None = None):
    """TransformerLens 4's `TransformerBridge` over a copy of `model`'s weights (booting swaps the
    attention modules in place); its tokenizer saved to `folder` (the bridge needs a real name_or_path)."""
    import copy

    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    hf = copy.deepcopy(model.hf)
    hf.config.architectures = hf.config.architectures or [type(hf).__name__]  # a config built in code names none
    model.tokenizer.save_pretrained(folder)
    return TransformerBridge.boot_transformers(name or model.name, hf_model=hf,
                                               tokenizer=AutoTokenizer.from_pretrained(folder))


@pytest.fixture(scope="session", params=FAMILIES)
def tiny(request) -> wb.LoadedModel:
    return tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_llama() -> wb.LoadedModel:
    return tiny_model("llama")


@pytest.fixture(scope="session")
def smol() -> wb.LoadedModel:
    """The embedded SmolLM2-135M (converted once into $KVWB_CACHE)."""
    return wb.load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def gemma3() -> wb.LoadedModel:
    """The second embedded model, Gemma 3 270M (`make test` prepares it; converted once)."""
    return wb.load_model("gemma3-270m", device="cpu")


EVIDENCE_PASSAGES = ["Varek Olundi is coached by Selma Tarrow.", "Selma Tarrow was born in the city of Tressamor.",
                     "Hollen Brave plays for the Quill Hawks."]


@pytest.fixture(scope="session")
def evidence_run(tmp_path_factory) -> Path:
    """A tiny sweep (the llama) of three examples: evidence in passages 1 and 2 (in the pool), in
    passage 0 only (outside the `changed` pool: no recall), and none defined; its folder."""
    import json

    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig, run_sweep

    folder = tmp_path_factory.mktemp("ev")
    p = EVIDENCE_PASSAGES
    lines = [{"id": "in_pool", "passages": p, "question": "Where was Varek's coach born?",
              "answers": ["Tressamor"], "evidence": [[1, 0, len(p[1])], [2, 0, 10]]},
             {"id": "first_only", "passages": p, "question": "Who coaches Varek?", "answers": ["Selma"],
              "evidence": [[0, 0, len(p[0])]]},
             {"id": "none", "passages": p, "question": "Who plays for the Quill Hawks?", "answers": ["Hollen"]}]
    data = folder / "d.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    config = SweepConfig(dataset=f"jsonl:{data}", n=3, diagnose=DiagnoseConfig(
        selectors=("none", "full", "cacheblend", "random"), budgets=(0.2, 0.5), coin_draws=2, max_new_tokens=3,
        attribution=False))
    run_sweep(tiny_model("llama"), config, folder / "run", progress=False)
    return folder / "run"


def scripted_cells(first: int, script) -> dict:
    """A hook_unembed that makes every answer of the splice and the repairs `script` (its tokens), where
    the row at position `first` (the suffix's last) predicts answer token 0; dense's is untouched."""
    def hook(logits, hook):
        if hook.pass_name != "cells":
            return None
        j = hook.positions - first  # [cell, row]: the answer token each row predicts
        for k, token in enumerate(script):
            logits[..., token] += 1e4 * (j == k).to(logits.dtype)
        return logits
    return {"hook_unembed": hook}


RECITED_NEEDLE = "The key of rook is 4417."
RECITED_LINE = {"id": "r", "passages": [RECITED_NEEDLE + " The grass is green.", "The sky is blue. Here we go."],
                "question": "What is the key of rook?", "answers": ["4417"], "evidence": [[0, 0, len(RECITED_NEEDLE)]]}
RECITED_SAID = " grass is green"  # the filler beside the needle, outside the evidence


@pytest.fixture(scope="session")
def recited_run(tmp_path_factory) -> Path:
    """A tiny sweep (the llama) of one example whose splice and repairs (none, cacheblend at b = 0.2) are
    scripted to answer RECITED_SAID, reciting the passages outside the evidence; dense's answer is the
    model's own. Its folder (under a `runs` folder of its own)."""
    import json

    import workbench as wb
    from workbench.byte_tokenizer import byte_tokenizer
    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig, run_sweep
    from workbench.tasks import Example

    root = tmp_path_factory.mktemp("recited")
    data = root / "d.jsonl"
    data.write_text(json.dumps(RECITED_LINE) + "\n")
    model = tiny_model("llama")
    example = Example(id="r", passages=RECITED_LINE["passages"], question=RECITED_LINE["question"],
                      gold=RECITED_LINE["answers"], meta={"evidence": RECITED_LINE["evidence"]})
    first = wb.build_context(model, example).layout.n_tokens - 1  # the suffix's last row predicts token 0
    script = byte_tokenizer()(RECITED_SAID, add_special_tokens=False)["input_ids"]

    config = SweepConfig(dataset=f"jsonl:{data}", n=1, diagnose=DiagnoseConfig(
        selectors=("none", "cacheblend"), budgets=(0.2,), max_new_tokens=len(script), attribution=False))
    run_sweep(model, config, root / "runs" / "recited", progress=False, hooks=scripted_cells(first, script))
    return root / "runs" / "recited"


@pytest.fixture(scope="session")
def app_world(tmp_path_factory):
    """The app tests' run folders, once per session (tests/app/app_world.py; tests/app is on the path
    when its tests run)."""
    from app_world import build_world

    return build_world(tmp_path_factory.mktemp("app"))


@pytest.fixture(scope="session")
def restore_record(tmp_path_factory):
    """`restore_record(NAME, runs)`: the committed record docs/records/NAME restored by keep.py (once
    per session, ~6 s for a 200-example record) and copied to runs/NAME, which it returns."""
    records = str(Path(__file__).resolve().parents[1] / "docs" / "records")
    if records not in sys.path:
        sys.path.insert(0, records)
    import keep  # docs/records is no package

    restored = tmp_path_factory.mktemp("restored")

    def restore(name: str, runs: Path) -> Path:
        if not (restored / name).exists():
            keep.restore(name, runs=restored)
        return Path(shutil.copytree(restored / name, Path(runs) / name))

    return restore
