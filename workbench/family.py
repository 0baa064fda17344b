"""Family adapter: the one place that knows how a supported decoder is laid out.

Supported: the Llama family (Llama incl. llama3 / linear / yarn RoPE scaling, Mistral without
a sliding window, Qwen2, Qwen3 with per-head q/k RMSNorm before RoPE) and Gemma 3 (text).
Every layer is ``norm -> attention(q, k, v, o) -> residual -> norm -> MLP -> residual``; the
adapter exposes that shape and the rest of the workbench never branches on the family.

What Gemma 3 adds, each behind one adapter method:
- layer types: five of six layers attend only within a sliding window (`visible`, `windows`);
- a RoPE base per layer type (`rope_tables`, `rope_table`, `rotate_keys` take the layer);
- q/k RMSNorm before RoPE and the query pre-attention scalar (`project_qkv`, `scaling`);
- norms after attention and around the MLP (`finish_layer`);
- the embedding scale (inside the embedding module) and final logit soft-capping (`logits`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from workbench.errors import WorkbenchError

SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
WINDOWED_FAMILIES = ("gemma3_text",)  # sliding-window layers honoured by splice, repair and signals
# Static RoPE variants: the rotation at position p is a fixed R(p), so R(p + d) = R(d) R(p)
# and a cached key can be moved by a delta rotation. Dynamic/longrope change frequencies
# with the sequence length and would break that.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
NO_ROPE_FAMILIES = ("gpt2", "gpt_bigcode", "opt", "bloom", "mpt", "bert", "t5")
LAYER_TYPES = ("full_attention", "sliding_attention")
MLP_HOOKS = ("mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post")


def check_supported_config(config, where: str) -> None:
    """Raise a WorkbenchError that says why a model cannot be spliced and repaired."""
    family = getattr(config, "model_type", None)
    if family in NO_ROPE_FAMILIES:
        raise WorkbenchError(
            f"{where}: model type {family!r} has no rotary position embeddings; the splice moves "
            f"cached keys by a delta-RoPE, so only RoPE models of the supported families are supported "
            f"({', '.join(SUPPORTED_FAMILIES)})")
    if family == "gemma3":
        raise WorkbenchError(f"{where}: model type 'gemma3' is the multimodal Gemma 3; load its text "
                             f"model (model type 'gemma3_text', Gemma3ForCausalLM)")
    if family not in SUPPORTED_FAMILIES:
        raise WorkbenchError(
            f"{where}: model type {family!r} is not supported; supported families: "
            f"{', '.join(SUPPORTED_FAMILIES)}")
    _check_attention(config, family, where)
    for kind, params in _rope_parameters(config).items():
        rope = (params or {}).get("rope_type", "default")
        if rope not in SUPPORTED_ROPE_TYPES:
            layers = f" ({kind} layers)" if kind else ""
            raise WorkbenchError(
                f"{where}: RoPE type {rope!r}{layers} changes its frequencies with the sequence length, so a "
                f"delta rotation cannot move cached keys; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


def _check_attention(config, family: str, where: str) -> None:
    """Sliding windows only where the adapter honours them; causal attention without soft-capping."""
    window = getattr(config, "sliding_window", None)
    layer_types = tuple(getattr(config, "layer_types", None) or ())
    if family in WINDOWED_FAMILIES:
        unknown = sorted(set(layer_types) - set(LAYER_TYPES))
        if unknown:
            raise WorkbenchError(f"{where}: layers of type {unknown} are not supported; supported: "
                                 f"{', '.join(LAYER_TYPES)}")
        if getattr(config, "use_bidirectional_attention", False):
            raise WorkbenchError(f"{where}: bidirectional attention is not a causal LM; the splice needs causal "
                                 f"attention")
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise WorkbenchError(f"{where}: attention logit soft-capping is not supported")
        return
    if window is not None and (family != "qwen2" or getattr(config, "use_sliding_window", False)):
        raise WorkbenchError(
            f"{where}: sliding-window attention (window {window}) is not supported for {family}: the "
            f"splice and the repair assume every token attends to the whole context")
    if any(kind != "full_attention" for kind in layer_types):
        raise WorkbenchError(f"{where}: layers of type {sorted(set(layer_types))} are not supported; "
                             f"every layer must use full attention")


def _rope_parameters(config) -> dict[str | None, dict]:
    """RoPE parameters by layer type (None: one set for every layer)."""
    params = getattr(config, "rope_parameters", None) or {}
    if params and all(kind in LAYER_TYPES for kind in params):
        return dict(params)
    return {None: params}


@dataclass(frozen=True)
class FamilyAdapter:
    """What the splice, repair and signals need from a supported decoder."""

    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    embed: nn.Module  # token ids -> hidden rows, any embedding scale included
    layers: tuple[nn.Module, ...]
    final_norm: nn.Module
    lm_head: nn.Module
    rotary: nn.Module
    scaling: float  # attention logit scale: head_dim ** -0.5, or Gemma's query_pre_attn_scalar ** -0.5
    rope_kinds: tuple[str | None, ...]  # [layer] the rotary table each layer reads (None: the only one)
    windows: tuple[int | None, ...]  # [layer] sliding window (a key k is seen from q iff q - w < k <= q)
    logit_softcap: float | None = None

    @classmethod
    def from_model(cls, hf_model) -> FamilyAdapter:
        config = hf_model.config
        check_supported_config(config, getattr(config, "name_or_path", "") or "model")
        base = hf_model.model
        attn = base.layers[0].self_attn
        n_layers = len(base.layers)
        kinds = tuple(getattr(config, "layer_types", None) or ("full_attention",) * n_layers)
        windowed = config.model_type in WINDOWED_FAMILIES
        return cls(
            family=config.model_type,
            n_layers=n_layers,
            n_heads=config.num_attention_heads,
            n_kv_heads=config.num_key_value_heads,
            head_dim=attn.head_dim,
            embed=base.embed_tokens,
            layers=tuple(base.layers),
            final_norm=base.norm,
            lm_head=hf_model.lm_head,
            rotary=base.rotary_emb,
            scaling=float(attn.scaling),
            rope_kinds=kinds if windowed else (None,) * n_layers,
            windows=tuple(config.sliding_window if windowed and kind == "sliding_attention" else None
                          for kind in kinds),
            logit_softcap=getattr(config, "final_logit_softcapping", None),
        )

    @property
    def has_windows(self) -> bool:
        """Whether some layer attends only within a sliding window."""
        return any(w is not None for w in self.windows)

    @property
    def has_qk_norm(self) -> bool:
        """Whether attention norms its queries and keys before RoPE (Qwen3, Gemma 3)."""
        return hasattr(self.layers[0].self_attn, "q_norm")

    @property
    def has_post_norms(self) -> bool:
        """Whether attention's and the MLP's outputs are normed before the residual (Gemma 3)."""
        return hasattr(self.layers[0], "post_feedforward_layernorm")

    def project_qkv(self, layer: int, x: torch.Tensor, hook=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer-normed hidden rows -> (q, k, v) before RoPE, q/k norms applied.

        x: [row, hidden] -> q [row, head, d_head], k and v [row, kv_head, d_head]. `hook(name, x)
        -> x`, when given, sees the projections ("attn.hook_q", "attn.hook_k", "attn.hook_v") and,
        where the family has them, the q/k norms' points ("attn.q_norm.hook_normalized", as `norm`)
        and the normed ones ("attn.hook_q_normed", "attn.hook_k_normed").
        """
        attn = self.layers[layer].self_attn
        rows = x.shape[0]
        q = attn.q_proj(x).view(rows, self.n_heads, self.head_dim)
        k = attn.k_proj(x).view(rows, self.n_kv_heads, self.head_dim)
        v = attn.v_proj(x).view(rows, self.n_kv_heads, self.head_dim)
        if hook is not None:
            q, k, v = hook("attn.hook_q", q), hook("attn.hook_k", k), hook("attn.hook_v", v)
        if hasattr(attn, "q_norm"):  # Qwen3, Gemma 3: RMSNorm over d_head, before RoPE
            q = self.norm(attn.q_norm, q, hook, "attn.q_norm.hook_normalized")
            k = self.norm(attn.k_norm, k, hook, "attn.k_norm.hook_normalized")
            if hook is not None:
                q, k = hook("attn.hook_q_normed", q), hook("attn.hook_k_normed", k)
        return q, k, v

    @staticmethod
    def norm(module: nn.Module, x: torch.Tensor, hook=None, name: str = "") -> torch.Tensor:
        """`module(x)` for an RMSNorm; with a hook registered on `name` ("ln1.hook_normalized") or
        on its `hook_scale`, written out as TransformerLens's: `hook_scale` sees rms(x) ([row, 1],
        fp32), `hook_normalized` x / rms(x) in fp32 before the weight. Through `hook_normalized`
        alone these are the family module's operations, bit for bit; a `hook_scale` divides by the
        scale it leaves (the module multiplies by rsqrt: equal up to rounding)."""
        scale_name = name.replace("hook_normalized", "hook_scale")
        if hook is None or (name not in hook and scale_name not in hook):
            return module(x)
        x32 = x.float()
        eps = module.variance_epsilon if hasattr(module, "variance_epsilon") else module.eps
        variance = x32.pow(2).mean(-1, keepdim=True)
        if scale_name in hook:
            normed = x32 / hook(scale_name, (variance + eps).sqrt())
        else:
            normed = x32 * torch.rsqrt(variance + eps)
        normed = hook(name, normed)
        if hasattr(module, "variance_epsilon"):  # the Llama family: the weight over the input's dtype
            return module.weight * normed.to(x.dtype)
        return (normed * (1.0 + module.weight.float())).type_as(x)  # Gemma: 1 + weight, in fp32

    @staticmethod
    def mlp(block: nn.Module, x: torch.Tensor, hook=None) -> torch.Tensor:
        """The block's gated MLP, down(act(gate(x)) * up(x)); with a hook on one of its points,
        written out through "mlp.hook_pre" (gate), "mlp.hook_pre_linear" (up) and "mlp.hook_post"."""
        mlp = block.mlp
        if hook is None or not any(name in hook for name in MLP_HOOKS):
            return mlp(x)
        pre = hook("mlp.hook_pre", mlp.gate_proj(x))
        linear = hook("mlp.hook_pre_linear", mlp.up_proj(x))
        return mlp.down_proj(hook("mlp.hook_post", mlp.act_fn(pre) * linear))

    def finish_layer(self, layer: int, h: torch.Tensor, attn: torch.Tensor, hook=None) -> torch.Tensor:
        """The rest of a decoder layer after attention. h: [row, hidden] (its input);
        attn: [row, head * d_head] (attention output before o_proj) -> [row, hidden].
        `hook(name, x) -> x`, when given, sees what attention and the MLP add to the residual
        stream ("hook_attn_out", "hook_mlp_out", each [row, hidden]), the stream between them
        ("hook_resid_mid"), the MLP's input norm ("ln2.hook_normalized") and the MLP's points;
        on Gemma 3 also the norms of attention's and the MLP's outputs ("ln1_post.hook_normalized",
        "ln2_post.hook_normalized", as TransformerLens's `ln1_post` / `ln2_post`)."""
        block = self.layers[layer]
        out = block.self_attn.o_proj(attn)
        gemma = self.has_post_norms  # Gemma: norms after attention and around the MLP
        if gemma:
            out = self.norm(block.post_attention_layernorm, out, hook, "ln1_post.hook_normalized")
        h = h + (out if hook is None else hook("hook_attn_out", out))
        if hook is not None:
            h = hook("hook_resid_mid", h)
        if gemma:
            mlp = self.mlp(block, self.norm(block.pre_feedforward_layernorm, h, hook, "ln2.hook_normalized"), hook)
            mlp = self.norm(block.post_feedforward_layernorm, mlp, hook, "ln2_post.hook_normalized")
        else:
            mlp = self.mlp(block, self.norm(block.post_attention_layernorm, h, hook, "ln2.hook_normalized"), hook)
        return h + (mlp if hook is None else hook("hook_mlp_out", mlp))

    def _tables(self, like: torch.Tensor, positions: torch.Tensor, kind: str | None):
        """The rotary module's cos, sin at positions ([1, pos]) for one layer kind: [1, pos, d_head]."""
        if kind is None:
            return self.rotary(like, positions)
        return self.rotary(like, positions, kind)

    def _rope_scale(self, kind: str | None) -> float:
        name = "attention_scaling" if kind is None else f"{kind}_attention_scaling"
        return float(getattr(self.rotary, name, 1.0) or 1.0)

    def rope_tables(self, positions: torch.Tensor, like: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """RoPE tables at absolute positions for every layer: [layer] of (cos, sin) [pos, d_head] in
        `like`'s dtype; layers of one kind share one table. The engine applies them (`engine.layers.rope`)."""
        by_kind = {kind: self._kind_table(positions, like, kind) for kind in dict.fromkeys(self.rope_kinds)}
        return [by_kind[kind] for kind in self.rope_kinds]

    def rope_table(self, positions: torch.Tensor, like: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s RoPE table at absolute `positions` ([pos]): (cos, sin) [pos, d_head] in `like`'s dtype."""
        return self._kind_table(positions, like, self.rope_kinds[layer])

    def _kind_table(self, positions: torch.Tensor, like: torch.Tensor, kind: str | None):
        cos, sin = self._tables(like, positions.to(like.device)[None], kind)
        return cos[0], sin[0]

    def rotate_keys(self, keys: torch.Tensor, positions, layer: int | None = None) -> torch.Tensor:
        """Rotate cached (post-RoPE) vectors by RoPE at `positions`: R(d) x for each row's d.

        keys: [..., pos, d_head] of layer `layer`, or with `layer=None` `[layer, ..., pos, d_head]`
        for every layer, each rotated with its own layer's base. positions: [pos] (one rotation per
        row) or a scalar; a negative position undoes a rotation. Computed in fp32 with the
        attention scaling of scaled RoPE variants (yarn) divided out, since cached keys carry it once.
        """
        d = torch.as_tensor(positions, device=keys.device).reshape(1, -1)  # [1, pos] or [1, 1]
        k32 = keys.float()
        if layer is None and len(set(self.rope_kinds)) > 1:
            if keys.shape[0] != self.n_layers:
                raise WorkbenchError(f"keys of every layer must lead with a layer axis of {self.n_layers}, "
                                     f"got shape {tuple(keys.shape)}")
            out = torch.empty_like(k32)
            for kind in dict.fromkeys(self.rope_kinds):
                index = [l for l, k in enumerate(self.rope_kinds) if k == kind]
                out[index] = self._rotate_by(k32[index], d, kind)
            return out.to(keys.dtype)
        kind = self.rope_kinds[0 if layer is None else layer]
        return self._rotate_by(k32, d, kind).to(keys.dtype)

    def _rotate_by(self, k32: torch.Tensor, d: torch.Tensor, kind: str | None) -> torch.Tensor:
        cos, sin = self._tables(k32, d, kind)
        scale = self._rope_scale(kind)
        return apply_rope(k32, cos[0] / scale, sin[0] / scale)  # cos, sin: [pos | 1, d_head]

    def rerotate(self, keys: torch.Tensor, delta: int, layer: int | None = None) -> torch.Tensor:
        """Move post-RoPE keys by `delta` positions: R(p + d) k = R(d) R(p) k. keys as in `rotate_keys`."""
        if delta == 0:
            return keys
        return self.rotate_keys(keys, delta, layer)

    def visible(self, query_pos: torch.Tensor, key_pos: torch.Tensor, layer: int) -> torch.Tensor:
        """`visible_keys` under layer `layer`'s window. query_pos: [..., q]; key_pos: [..., k] -> [..., q, k]."""
        return visible_keys(query_pos, key_pos, self.windows[layer])

    def layer_masks(self, mask: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor) -> list[torch.Tensor]:
        """A causal mask ([..., q, k]) narrowed to each layer's window: [layer] of [..., q, k];
        layers of one window share one mask. query_pos [..., q] and key_pos [..., k] are absolute."""
        by_window = {w: mask if w is None else mask & visible_keys(query_pos, key_pos, w)
                     for w in dict.fromkeys(self.windows)}
        return [by_window[w] for w in self.windows]

    def logits(self, hidden: torch.Tensor, hook=None) -> torch.Tensor:
        """Final norm + LM head (+ soft-capping where the model has it). hidden: [row, hidden] -> [row, vocab].
        `hook(name, x) -> x`, when given, sees "ln_final.hook_normalized" and "hook_unembed" (the
        LM head's output, before any soft-cap, as TransformerLens's unembed)."""
        logits = self.lm_head(self.norm(self.final_norm, hidden, hook, "ln_final.hook_normalized"))
        if hook is not None:
            logits = hook("hook_unembed", logits)
        if self.logit_softcap is not None:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits


def visible_keys(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Which keys each query sees, by absolute position: key <= query, and key > query - window
    under a sliding window. query_pos: [..., q]; key_pos: [..., k] -> bool [..., q, k]."""
    q, k = query_pos[..., :, None], key_pos[..., None, :]
    seen = k <= q
    return seen if window is None else seen & (k > q - window)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The RoPE partner of each dimension (HF's convention: halves, not interleaved pairs)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE's formula, written once: x rotated by (cos, sin), broadcast against x ([..., d_head]).
    The engine's `layers.rope` applies it to rows; `rotate_keys` to cached keys moved by a delta."""
    return x * cos + rotate_half(x) * sin
