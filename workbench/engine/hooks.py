"""Hook points on every pass of the engine, named and meant as TransformerLens 4's
`TransformerBridge` names them (checked name by name on a full dense pass: tests/unit/test_hooks_tl.py).

    hook_embed                               [cell, row, hidden]     the embedded rows
    blocks.{l}.hook_resid_pre                [cell, row, hidden]     layer l's input
    blocks.{l}.ln1.hook_scale                [cell, row, 1]          rms(x) = sqrt(mean(x^2) + eps) (fp32)
    blocks.{l}.ln1.hook_normalized           [cell, row, hidden]     x / rms(x) before the norm's weight (fp32)
    blocks.{l}.attn.hook_q / hook_k          [cell, row, head | kv_head, d_head]  the projections (before any q/k norm)
    blocks.{l}.attn.hook_v                   [cell, row, kv_head, d_head]
    blocks.{l}.attn.q_norm.hook_scale / _normalized  Qwen3, Gemma 3 only: the q norm over d_head (as ln1),
                                             [cell, row, head, 1 | d_head]; k_norm the same over kv_head
    blocks.{l}.attn.hook_q_normed / _k_normed  after the q/k RMSNorm (Qwen3, Gemma 3 only), before RoPE
    blocks.{l}.attn.hook_rot_q / hook_rot_k  [cell, row, head | kv_head, d_head]  after RoPE (what the cache stores)
    blocks.{l}.attn.hook_attn_scores         [cell, head, row, key]  scaled, masked (-inf) scores before the softmax (fp32)
    blocks.{l}.attn.hook_pattern             [cell, head, row, key]  the softmax (fp32)
    blocks.{l}.attn.hook_z                   [cell, row, head, d_head]  attention output before o_proj
    blocks.{l}.ln1_post.hook_scale / _normalized  Gemma 3 only: the norm of o_proj's output (as ln1)
    blocks.{l}.hook_attn_out                 [cell, row, hidden]     what attention adds (Gemma: after its post-norm)
    blocks.{l}.hook_resid_mid                [cell, row, hidden]     resid_pre + attn_out
    blocks.{l}.ln2.hook_scale / _normalized  the MLP's input norm (as ln1)
    blocks.{l}.mlp.hook_pre                  [cell, row, d_mlp]      gate_proj's output, before the activation
    blocks.{l}.mlp.hook_pre_linear           [cell, row, d_mlp]      up_proj's output
    blocks.{l}.mlp.hook_post                 [cell, row, d_mlp]      act(pre) * pre_linear, down_proj's input
    blocks.{l}.ln2_post.hook_scale / _normalized  Gemma 3 only: the norm of down_proj's output (as ln1)
    blocks.{l}.hook_mlp_out                  [cell, row, hidden]     what the MLP adds (Gemma: after its post-norm)
    blocks.{l}.hook_resid_post               [cell, row, hidden]     layer l's output
    ln_final.hook_scale / hook_normalized    the final norm (as ln1)
    hook_unembed                             [cell, row, vocab]      the LM head's output (before a logit soft-cap)

`ln_final`'s points and `hook_unembed` fire only on the rows whose logits a pass computes (every
row of `Context.run_with_cache`'s pass, each cell's teacher-forced rows in the batched cells, each
decode step's); a repair computes none. `ln1_post` / `ln2_post` exist only on Gemma 3 (its norms after
attention and the MLP), `q_norm` / `k_norm` and `hook_q_normed` / `hook_k_normed` only on families
with q/k norms; the bridge gives those as [batch, head, pos, ...] on Gemma 3 and Qwen3 (TransformerLens's
HookedTransformer its `q_norm` rows flattened, [batch * pos * head, d_head]), the workbench as
[cell, row, head, ...] like `hook_q` (the test transposes).

A hook is called `fn(tensor, hook=point)`, as TransformerLens calls it: it may edit the tensor
in place, return a replacement of the same shape, dtype and device, or return None to keep it.
`hook` is a `HookPoint`: `.name`, `.layer()` (None for the points outside the blocks), `.ctx`
(a dict per point, as TransformerLens's, kept as long as the `Hooks`: one call's groups and decode
steps when a dict is given, every pass of `diagnose`), and the workbench's additions:
the absolute positions of the rows (`positions`, [cell, row], -1 on padding), for
`hook_pattern` / `hook_attn_scores` of the keys (`key_positions`, [cell, key]: absolute positions
0..n-1 in every pass, the batched cells' and decode steps' included, so a repaired position
appears once), `cells` ([cell]: which of the caller's cells each one is; 0 in a serial
repair) and `pass_name` (which of a caller's passes runs: in `diagnose`, "cells" for the splice's and
the repairs' pass with their answers, a signal's record name, such as "saliency" or "draft", for the
passes that compute it; None where no caller names it, `Hooks.in_pass`). The cell axis is the pass's: one cell for a serial repair, every cell of a group in a
batched pass, the cells still decoding in a decode step. A padded row's values are zeros and
whatever a hook writes there is dropped.

Hooks are given as `{name: fn or [fn]}`, as `fwd_hooks=[(name or filter, fn), ...]` (a filter is a
callable `name -> bool`, as in TransformerLens) or as a `Hooks`; they are checked against the
model's names before any model work (`Hooks.of`). A hook that leaves NaN or inf (-inf is allowed
in `hook_attn_scores`, as masking) raises an error naming its point (not checked after a function
marked `fn.reads_only = True`, such as `caching_hooks`'s, which never edits). Without hooks a pass makes
no copy, no call and no check: each point is one `if`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

import torch

from workbench.errors import WorkbenchError

LAYER_HOOKS = ("hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k",
               "attn.hook_v", "attn.q_norm.hook_scale", "attn.q_norm.hook_normalized", "attn.k_norm.hook_scale",
               "attn.k_norm.hook_normalized", "attn.hook_q_normed", "attn.hook_k_normed", "attn.hook_rot_q", "attn.hook_rot_k",
               "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "ln1_post.hook_scale",
               "ln1_post.hook_normalized", "hook_attn_out", "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized",
               "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post", "ln2_post.hook_scale",
               "ln2_post.hook_normalized", "hook_mlp_out", "hook_resid_post")
QK_NORM_HOOKS = ("attn.q_norm.hook_scale", "attn.q_norm.hook_normalized", "attn.k_norm.hook_scale",
                 "attn.k_norm.hook_normalized", "attn.hook_q_normed", "attn.hook_k_normed")  # Qwen3, Gemma 3
POST_NORM_HOOKS = ("ln1_post.hook_scale", "ln1_post.hook_normalized", "ln2_post.hook_scale",
                   "ln2_post.hook_normalized")  # Gemma 3's norms of attention's and the MLP's outputs
FINAL_HOOKS = ("ln_final.hook_scale", "ln_final.hook_normalized", "hook_unembed")
EXPLICIT_ATTENTION = ("attn.hook_attn_scores", "attn.hook_pattern")  # points that write the softmax out


def hook_names(model_or_layers, qk_norm: bool | None = None, post_norms: bool | None = None) -> tuple[str, ...]:
    """Every hook point of a model, in the order a pass reaches them. `model_or_layers`: a
    `FamilyAdapter` (its q/k norms decide their points, its post-norms `ln1_post` / `ln2_post`)
    or a number of layers (`qk_norm` and `post_norms` then say whether they exist; default not)."""
    n_layers = model_or_layers if isinstance(model_or_layers, int) else model_or_layers.n_layers
    if qk_norm is None:
        qk_norm = bool(getattr(model_or_layers, "has_qk_norm", False))
    if post_norms is None:
        post_norms = bool(getattr(model_or_layers, "has_post_norms", False))
    absent = (() if qk_norm else QK_NORM_HOOKS) + (() if post_norms else POST_NORM_HOOKS)
    layer = tuple(n for n in LAYER_HOOKS if n not in absent)
    return ("hook_embed",) + tuple(f"blocks.{l}.{name}" for l in range(n_layers) for name in layer) + FINAL_HOOKS


@dataclass(frozen=True)
class HookPoint:
    """Where a hooked tensor comes from: its name, its layer (`layer()`, None outside the blocks),
    the rows' absolute positions and the pass's `ctx` dict of this point."""

    name: str
    layer_index: int | None
    positions: torch.Tensor  # [cell, row] absolute positions of the rows; -1 on padding
    key_positions: torch.Tensor | None = None  # [cell, key] absolute, for hook_pattern / hook_attn_scores
    cells: torch.Tensor | None = None  # [cell] each cell's index among the caller's cells
    ctx: dict = field(default_factory=dict, compare=False)  # kept per point for the whole pass
    pass_name: str | None = None  # which of a caller's passes this is (`diagnose`: "cells" or a signal's record)

    def layer(self) -> int | None:
        """The block this point sits in (TransformerLens's `hook.layer()`); None for hook_embed,
        ln_final and hook_unembed."""
        return self.layer_index


HookFn = Callable[..., "torch.Tensor | None"]


class Rows:
    """Where the rows of a pass, laid end to end ([token, ...]), sit among its cells ([cell, row, ...])."""

    def __init__(self, positions: torch.Tensor, cell_of: torch.Tensor, row_of: torch.Tensor,
                 cells: torch.Tensor | None = None, missing_axis: int | None = None):
        self.positions = positions  # [cell, row], -1 on padding
        self.cell_of, self.row_of = cell_of, row_of  # [token]
        # [cell]: which of the caller's cells each is (default: 0, 1, ...)
        self.cells = cells if cells is not None else torch.arange(len(positions), device=positions.device)
        # 0: one cell holding every token in order (the tokens lack the cell axis); 1: one token per
        # cell (they lack the row axis). A hook then sees a view of the pass's tensor (copied under grad)
        self.missing_axis = missing_axis

    @classmethod
    def one_cell(cls, positions: torch.Tensor, cells: torch.Tensor | None = None) -> Rows:
        """Rows of a single cell. positions: [row]; cells: [1] its index among the caller's (default 0)."""
        n = positions.numel()
        return cls(positions[None], positions.new_zeros(n), torch.arange(n, device=positions.device), cells, 0)

    @classmethod
    def one_row_each(cls, positions: torch.Tensor, cells: torch.Tensor | None = None) -> Rows:
        """One row per cell (a decode step). positions: [cell]; cells: [cell] their indices."""
        n = positions.numel()
        return cls(positions[:, None], torch.arange(n, device=positions.device), positions.new_zeros(n), cells, 1)

    def point(self, name: str, layer: int | None, key_positions: torch.Tensor | None = None,
              ctx: dict | None = None) -> HookPoint:
        """The HookPoint of `name` on these rows."""
        return HookPoint(name, layer, self.positions, key_positions, self.cells, {} if ctx is None else ctx)

    def to_cells(self, x: torch.Tensor) -> torch.Tensor:
        """[token, ...] -> [cell, row, ...], zeros on padding."""
        if self.missing_axis is not None:  # a copy where autograd may keep x for a backward a hook could spoil
            return x.unsqueeze(self.missing_axis).clone() if x.requires_grad else x.unsqueeze(self.missing_axis)
        out = x.new_zeros(*self.positions.shape, *x.shape[1:])
        out[self.cell_of, self.row_of] = x
        return out

    def from_cells(self, x: torch.Tensor) -> torch.Tensor:
        """[cell, row, ...] -> [token, ...]."""
        if self.missing_axis is not None:
            return x.squeeze(self.missing_axis)
        return x[self.cell_of, self.row_of]


def _describe(value) -> str:
    return type(value).__name__ if not isinstance(value, str) else repr(value)[:40]


def _name_filter(spec, known: tuple[str, ...], what: str) -> list[str]:
    """The names a TransformerLens-style filter picks: a name, a list of names or `name -> bool`."""
    if isinstance(spec, str):
        if spec not in known:
            raise WorkbenchError(f"{what}: unknown hook point {spec!r}; this model has {_known_summary(known)}")
        return [spec]
    if callable(spec):
        try:
            return [name for name in known if spec(name)]
        except Exception as err:  # a filter that fails on a name
            raise WorkbenchError(f"{what}: the names filter raised {type(err).__name__}: {err}") from None
    if isinstance(spec, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in spec):
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise WorkbenchError(f"{what}: unknown hook points {unknown[:4]}; this model has {_known_summary(known)}")
        return [n for n in known if n in set(spec)]
    raise WorkbenchError(f"{what}: expected a hook point name, a list of names or a callable name -> bool, "
                         f"got {_describe(spec)}")


def names_filter(spec, known: tuple[str, ...]) -> list[str]:
    """`names_filter` as TransformerLens takes it (None: every name; a name; a list; `name -> bool`)."""
    return list(known) if spec is None else _name_filter(spec, known, "names_filter")


def _known_summary(known: tuple[str, ...]) -> str:
    layers = sorted({int(n.split(".")[1]) for n in known if n.startswith("blocks.")})
    per_layer = dict.fromkeys(n.split(".", 2)[2] for n in known if n.startswith("blocks.0."))
    top = [n for n in known if not n.startswith("blocks.")]
    return (f"{', '.join(top)} and blocks.0..{layers[-1] if layers else 0}.{{{', '.join(per_layer)}}}")


def _fns(name: str, fn) -> list:
    """A hook point's function(s) as a list, each checked callable."""
    fns = [fn] if callable(fn) else list(fn) if isinstance(fn, (list, tuple)) else None
    if fns is None or not all(callable(f) for f in fns):
        bad = fn if fns is None else next(f for f in fns if not callable(f))
        raise WorkbenchError(f"hook on {name}: expected a function fn(tensor, hook) or a list of them, "
                             f"got {_describe(bad)}")
    return fns


class Hooks:
    """The hooks of a pass, checked once against the model's hook points: `{name: fn or [fn]}`
    or `[(name or filter, fn), ...]` (TransformerLens's `fwd_hooks`)."""

    def __init__(self, hooks, known, shared: Hooks | None = None):
        """known: the model's names (a tuple), its `FamilyAdapter` or its number of layers; `shared`:
        a Hooks whose `.ctx` dicts and pass name these share (`plus`)."""
        known = tuple(known) if isinstance(known, (tuple, list)) else hook_names(known)
        self.known = known
        self.fns: dict[str, list[HookFn]] = {}
        if isinstance(hooks, Mapping):
            pairs = list(hooks.items())
            for name, _ in pairs:
                if not isinstance(name, str):
                    raise WorkbenchError(f"hooks: a hook point name must be a string, got {_describe(name)}")
            unknown = sorted(set(hooks) - set(known))
            if unknown:
                raise WorkbenchError(f"unknown hook points {unknown[:4]}: this model has {_known_summary(known)}")
        elif isinstance(hooks, (list, tuple)):
            pairs = []
            for item in hooks:
                if not (isinstance(item, tuple) and len(item) == 2):
                    raise WorkbenchError(f"fwd_hooks: expected (name or filter, fn) pairs, got {_describe(item)}")
                pairs += [(name, item[1]) for name in _name_filter(item[0], known, "fwd_hooks")]
        else:
            raise WorkbenchError(f"hooks: expected {{name: fn}} or [(name or filter, fn), ...], got {_describe(hooks)}")
        for name, fn in pairs:
            self.fns.setdefault(name, []).extend(_fns(name, fn))
        # each point's `HookPoint.ctx`, and the pass's name ([name], one box), shared with the Hooks built by `plus`
        self.contexts: dict[str, dict] = {} if shared is None else shared.contexts
        self._pass: list[str | None] = [None] if shared is None else shared._pass

    @classmethod
    def of(cls, hooks, model_or_known) -> Hooks | None:
        """Checked hooks, or None when none is registered (the pass then takes no hook branch at
        all). `model_or_known`: a `FamilyAdapter`, a number of layers or the names themselves."""
        if hooks is None or isinstance(hooks, Hooks):
            return hooks or None
        return cls(hooks, model_or_known) or None

    def __bool__(self) -> bool:
        return bool(self.fns)

    def __contains__(self, name: str) -> bool:
        return name in self.fns

    def context(self, name: str) -> dict:
        return self.contexts.setdefault(name, {})

    @property
    def pass_name(self) -> str | None:
        """The name every `HookPoint` of the running pass carries (None outside `in_pass`)."""
        return self._pass[0]

    @contextmanager
    def in_pass(self, name: str):
        """Name the passes run inside this block (`HookPoint.pass_name`); the outer name comes back after."""
        outer, self._pass[0] = self._pass[0], name
        try:
            yield self
        finally:
            self._pass[0] = outer

    def plus(self, *maps) -> Hooks:
        """These hooks, then those of `maps` on a shared point (`compose`), as one Hooks that keeps
        these' `.ctx` dicts and pass name: a reader added for one pass does not reset the caller's state."""
        return Hooks(compose(self, *maps), self.known, shared=self)

    def call(self, name: str, x: torch.Tensor, point: HookPoint) -> torch.Tensor:
        """Run the hooks of `name` on `x` (already [cell, ...]); returns what they leave, checked:
        a tensor of x's shape, dtype and device, with no NaN or inf the hook made."""
        fns = self.fns.get(name, ())
        if self._pass[0] is not None:
            point = replace(point, pass_name=self._pass[0])
        for fn in fns:
            out = fn(x, hook=point)
            if out is not None:
                if not isinstance(out, torch.Tensor):
                    raise WorkbenchError(f"hook on {name} returned {_describe(out)}; expected None or a "
                                         f"torch.Tensor of shape {tuple(x.shape)}")
                if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
                    raise WorkbenchError(f"hook on {name} returned a tensor {tuple(out.shape)} {out.dtype} on "
                                         f"{out.device}; expected {tuple(x.shape)} {x.dtype} on {x.device}")
                x = out
        if any(not getattr(fn, "reads_only", False) for fn in fns):  # a reader leaves what it was given
            _check_finite(name, x)
        return x

    def rows(self, name: str, layer: int | None, x: torch.Tensor, rows: Rows) -> torch.Tensor:
        """Run the hooks of `name` on rows laid end to end (x: [token, ...]); a no-op without one."""
        if name not in self.fns:
            return x
        return rows.from_cells(self.call(name, rows.to_cells(x), rows.point(name, layer, ctx=self.context(name))))


def _check_finite(name: str, x: torch.Tensor) -> None:
    """A one-line error when a hooked tensor holds NaN or inf (-inf is masking in hook_attn_scores)."""
    if not x.is_floating_point():
        return
    bad = x.isnan() | (x == float("inf")) if name.endswith("hook_attn_scores") else ~x.isfinite()
    if bool(bad.any()):
        raise WorkbenchError(f"hook on {name} left {int(bad.sum())} non-finite values (NaN or inf) in its "
                             f"{tuple(x.shape)} tensor; a hook must leave finite activations")


def compose(*maps) -> dict[str, list[HookFn]]:
    """Several hook maps ({name: fn or [fn]}, a `Hooks`, or None) as one: on a shared point the
    earlier map's hooks run first, and each hook sees the tensor as the ones before it left it."""
    out: dict[str, list[HookFn]] = {}
    for hooks in maps:
        if hooks is not None and not isinstance(hooks, (Hooks, Mapping)):
            raise WorkbenchError(f"hooks: expected {{name: fn}} or a Hooks to compose, got {_describe(hooks)}")
        for name, fns in (hooks.fns if isinstance(hooks, Hooks) else hooks or {}).items():
            out.setdefault(name, []).extend(_fns(name, fns))
    return out


def with_reads(hooks: Hooks | None, *maps):
    """The caller's `hooks`, then the readers of `maps` on a shared point: one Hooks that keeps the
    caller's `.ctx` dicts and pass name (`Hooks.plus`), or the maps alone, composed, without hooks."""
    return hooks.plus(*maps) if hooks else compose(*maps)


def named_pass(hooks: Hooks | None, name: str):
    """`hooks.in_pass(name)`, or nothing to do without hooks."""
    return hooks.in_pass(name) if hooks else nullcontext()


def caching_hooks(names: Iterable[str], store: dict[str, torch.Tensor]) -> dict[str, HookFn]:
    """Hooks that keep each named activation in `store` (the last pass's, when several run)."""
    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        store[hook.name] = x.detach()

    keep.reads_only = True  # it never edits: no finite check after it
    return {name: keep for name in names}
