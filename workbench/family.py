"""Family adapter: the one place that knows how a Llama-family decoder is laid out.

Supported: Llama (incl. llama3 / linear / yarn RoPE scaling), Mistral (without a sliding
window), Qwen2, Qwen3 (per-head q/k RMSNorm before RoPE). All share the decoder-layer shape
``input_layernorm -> self_attn(q,k,v,o) -> residual -> post_attention_layernorm -> mlp``,
so the adapter exposes that shape and the rest of the workbench never branches on family.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from workbench.errors import WorkbenchError

SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
# Static RoPE variants: the rotation at position p is a fixed R(p), so R(p + d) = R(d) R(p)
# and a cached key can be moved by a delta rotation. Dynamic/longrope change frequencies
# with the sequence length and would break that.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
NO_ROPE_FAMILIES = ("gpt2", "gpt_bigcode", "opt", "bloom", "mpt", "bert", "t5")


def check_supported_config(config, where: str) -> None:
    """Raise a WorkbenchError that says why a model cannot be spliced and repaired."""
    family = getattr(config, "model_type", None)
    if family in NO_ROPE_FAMILIES:
        raise WorkbenchError(
            f"{where}: model type {family!r} has no rotary position embeddings; the splice moves "
            f"cached keys by a delta-RoPE, so only RoPE models of the Llama family are supported "
            f"({', '.join(SUPPORTED_FAMILIES)})")
    if family not in SUPPORTED_FAMILIES:
        raise WorkbenchError(
            f"{where}: model type {family!r} is not supported; supported families: "
            f"{', '.join(SUPPORTED_FAMILIES)}")
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or ()
    if window is not None and (family != "qwen2" or getattr(config, "use_sliding_window", False)):
        raise WorkbenchError(
            f"{where}: sliding-window attention (window {window}) is not supported: the splice and "
            f"the repair assume every token attends to the whole context")
    if any(kind != "full_attention" for kind in layer_types):
        raise WorkbenchError(f"{where}: layers of type {sorted(set(layer_types))} are not supported; "
                             f"every layer must use full attention")
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in SUPPORTED_ROPE_TYPES:
        raise WorkbenchError(
            f"{where}: RoPE type {rope!r} changes its frequencies with the sequence length, so a "
            f"delta rotation cannot move cached keys; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


@dataclass(frozen=True)
class FamilyAdapter:
    """What the splice, repair and signals need from a Llama-family model."""

    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    embed: nn.Module
    layers: tuple[nn.Module, ...]
    final_norm: nn.Module
    lm_head: nn.Module
    rotary: nn.Module
    scaling: float  # attention logit scale, head_dim ** -0.5

    @classmethod
    def from_model(cls, hf_model) -> FamilyAdapter:
        config = hf_model.config
        check_supported_config(config, getattr(config, "name_or_path", "") or "model")
        base = hf_model.model
        attn = base.layers[0].self_attn
        return cls(
            family=config.model_type,
            n_layers=len(base.layers),
            n_heads=config.num_attention_heads,
            n_kv_heads=config.num_key_value_heads,
            head_dim=attn.head_dim,
            embed=base.embed_tokens,
            layers=tuple(base.layers),
            final_norm=base.norm,
            lm_head=hf_model.lm_head,
            rotary=base.rotary_emb,
            scaling=float(attn.scaling),
        )

    def project_qkv(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer-normed hidden rows -> (q, k, v) before RoPE, q/k norms applied.

        x: [row, hidden] -> q [row, head, d_head], k and v [row, kv_head, d_head]
        """
        attn = self.layers[layer].self_attn
        rows = x.shape[0]
        q = attn.q_proj(x).view(rows, self.n_heads, self.head_dim)
        k = attn.k_proj(x).view(rows, self.n_kv_heads, self.head_dim)
        v = attn.v_proj(x).view(rows, self.n_kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over d_head, before RoPE
            q, k = attn.q_norm(q), attn.k_norm(k)
        return q, k, v

    def cos_sin(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE tables at absolute positions: cos, sin [pos, d_head] in `like`'s dtype."""
        cos, sin = self.rotary(like, positions.to(like.device)[None])
        return cos[0], sin[0]

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Apply RoPE at `positions`. x: [row, head, d_head]; positions: [row]."""
        cos, sin = self.cos_sin(positions, x)
        return x * cos[:, None] + rotate_half(x) * sin[:, None]

    def rotate_keys(self, keys: torch.Tensor, positions) -> torch.Tensor:
        """Rotate cached (post-RoPE) vectors by RoPE at `positions`: R(d) x for each row's d.

        keys: [..., pos, d_head]; positions: [pos] (one rotation per row) or a scalar (one for
        all rows); a negative position undoes a rotation. Computed in fp32 with the attention
        scaling of scaled RoPE variants (yarn) divided out, since cached keys carry it once.
        """
        d = torch.as_tensor(positions, device=keys.device).reshape(1, -1)  # [1, pos] or [1, 1]
        k32 = keys.float()
        cos, sin = self.rotary(k32, d)
        scale = float(getattr(self.rotary, "attention_scaling", 1.0) or 1.0)
        cos, sin = cos[0] / scale, sin[0] / scale  # [pos | 1, d_head]
        return (k32 * cos + rotate_half(k32) * sin).to(keys.dtype)

    def rerotate(self, keys: torch.Tensor, delta: int) -> torch.Tensor:
        """Move post-RoPE keys by `delta` positions: R(p + d) k = R(d) R(p) k. keys: [..., pos, d_head]."""
        if delta == 0:
            return keys
        return self.rotate_keys(keys, delta)

    @contextmanager
    def record_attention_inputs(self, keep=None) -> Iterator[list[list[torch.Tensor]]]:
        """Record each layer's attention input (the layer-normed hidden rows) during the forwards
        run inside the block. Yields a list per layer of `[row, hidden]` tensors, one per forward
        of batch 1; `keep(x)` picks the rows to keep from `x` `[seq, hidden]` (default: all).
        """
        recorded: list[list[torch.Tensor]] = [[] for _ in range(self.n_layers)]

        def hook(layer: int):
            def pre_hook(module, args, kwargs):
                x = (args[0] if args else kwargs["hidden_states"])[0]  # [seq, hidden]
                recorded[layer].append(x if keep is None else keep(x))
            return pre_hook

        handles = [layer.self_attn.register_forward_pre_hook(hook(l), with_kwargs=True)
                   for l, layer in enumerate(self.layers)]
        try:
            yield recorded
        finally:
            for handle in handles:
                handle.remove()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head. hidden: [row, hidden] -> [row, vocab]."""
        return self.lm_head(self.final_norm(hidden))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The RoPE partner of each dimension (HF's convention: halves, not interleaved pairs)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
