"""`kvwb prepare`: convert the embedded model once."""

from __future__ import annotations

from workbench.cli.common import printable

NAME = "prepare"


def add_arguments(p) -> None:
    p.add_argument("--model", default="smollm2-135m", help="embedded model name (default smollm2-135m)")


def command(args) -> int:
    """Convert the embedded model's GGUF to safetensors once (later loads take seconds)."""
    from workbench.models import embedded_gguf_path, embedded_model_dir, embedded_model_ready, prepare_embedded_model

    if not embedded_model_ready(args.model):
        embedded_gguf_path(args.model)  # an unknown name or a missing package fails before anything is printed
        print(printable(f"kvwb: converting {args.model} to safetensors under {embedded_model_dir(args.model)} "
                        f"(once, about a minute)"), flush=True)
    print(printable(prepare_embedded_model(args.model)))
    return 0
