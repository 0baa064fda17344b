"""Caches for the fidelity probe: masking, calibrated noise, interpolation, layer corruption,
bank retrieval, subspace projection and augmentation.

Every substitute is a `KVCache` over the reader's handed-off span [0, suffix_start)
(`[layer, kv_head, pos, d_head]`, keys after RoPE). The *substituted rows* of an example are
[start, suffix_start): the fact-bearing passage and whatever follows it in the span (the rows
that masking the fact can change). Rows before `start` (the chat prefix, earlier passages) are
never touched. Cosines are per key (or value) vector over `d_head`, averaged over the
substituted rows, the kv heads and the replaced layers, always against the reader's native
cache (its own prefill of the unmasked text).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.errors import WorkbenchError
from workbench.family import FamilyAdapter
from workbench.kv import KVCache, assemble
from workbench.layout import Layout
from workbench.models import LoadedModel
from workbench.splice import prefill_many
from workbench.tasks import Example, contains_answer, normalize_answer

MASK_TEXT = " unknown"  # the fact's tokens are replaced by the first token of this text
SUBSPACES = ("wk_colspace", "bank_span")

# --------------------------------------------------------------------------- masking


def mask_token_id(tokenizer) -> int:
    """The token that stands in for every token of the masked fact (first token of MASK_TEXT)."""
    ids = tokenizer(MASK_TEXT, add_special_tokens=False)["input_ids"]
    if not ids:
        raise WorkbenchError(f"the tokenizer encodes the mask text {MASK_TEXT!r} to nothing")
    return int(ids[0])


def _occurrences(text: str, needle: str) -> list[tuple[int, int]]:
    low, sub, spans, at = text.lower(), needle.lower(), [], 0
    while sub and (at := low.find(sub, at)) >= 0:
        spans.append((at, at + len(sub)))
        at += 1
    return spans


def find_fact_passage(example: Example) -> int | None:
    """The passage holding a gold answer: meta["answer_passage"] if it does, else the first that does."""
    holds = [any(_occurrences(p, g) for g in example.gold) for p in example.passages]
    hint = example.meta.get("answer_passage")
    if isinstance(hint, int) and 0 <= hint < len(holds) and holds[hint]:
        return hint
    return holds.index(True) if True in holds else None


def mask_fact(tokenizer, layout: Layout, example: Example, passage: int,
              mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids of the layout with every token overlapping a gold answer in `passage` replaced by
    `mask_id` (same length), and the absolute positions replaced. ([pos], [n_fact])"""
    seg = layout.passages[passage]
    enc = tokenizer(seg.text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != layout.ids[seg.start:seg.end].tolist():
        raise WorkbenchError(f"example {example.id}: re-tokenizing passage {passage} with offsets "
                             f"does not give the layout's ids; cannot locate the fact's tokens")
    spans = [s for g in example.gold for s in _occurrences(seg.text, g)]
    hit = [j for j, (a, b) in enumerate(enc["offset_mapping"]) if any(a < e and b > s for s, e in spans)]
    if not hit:
        raise WorkbenchError(f"example {example.id}: no gold answer in passage {passage} to mask")
    rows = seg.start + torch.tensor(hit, dtype=torch.long)
    ids = layout.ids.clone()
    ids[rows] = mask_id
    masked_text = normalize_answer(tokenizer.decode(ids[seg.start:seg.end]))
    if any(normalize_answer(g) and normalize_answer(g) in masked_text for g in example.gold):
        raise WorkbenchError(f"example {example.id}: the fact survives masking (mask text {MASK_TEXT!r})")
    return ids, rows


# --------------------------------------------------------------------------- cosines


def row_cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine of each vector over the last dim, in fp32. [..., d] -> [...]"""
    return F.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-12)


@dataclass(frozen=True)
class Fidelity:
    """Mean cosines of a substitute against the native cache over the replaced rows and layers."""

    key: float  # all substituted rows
    value: float
    key_fact: float  # only the rows of the masked fact's tokens
    key_floor: float  # keys against the masked (floor) cache instead of the native one


def fidelity(sub: KVCache, native: KVCache, floor: KVCache, start: int, fact_rows: torch.Tensor,
             layers: int | None = None) -> Fidelity:
    """Cosines over rows [start, end) of the first `layers` layers (all by default); 1.0 for none."""
    n = native.n_layers if layers is None else layers
    if n == 0:
        return Fidelity(1.0, 1.0, 1.0, float(row_cosines(floor.keys[:, :, start:], native.keys[:, :, start:]).mean()))
    sk, sv = sub.keys[:n, :, start:], sub.values[:n, :, start:]
    nk, nv = native.keys[:n, :, start:], native.values[:n, :, start:]
    fk = row_cosines(sk[:, :, fact_rows - start], nk[:, :, fact_rows - start])
    return Fidelity(float(row_cosines(sk, nk).mean()), float(row_cosines(sv, nv).mean()),
                    float(fk.mean()), float(row_cosines(sk, floor.keys[:n, :, start:]).mean()))


# --------------------------------------------------------------------------- noise


def calibrate(x: torch.Tensor, direction: torch.Tensor, target: float, iters: int = 40) -> torch.Tensor:
    """x + sigma_l * direction with one sigma per layer (dim 0), found by bisection (on log sigma)
    so that the mean cosine to x over each layer's vectors equals `target`. x, direction: [L, ..., d].

    Along a ray x + s*e the angle to x grows monotonically with s, so the bisection is exact up to
    float error. A target below what the largest scale tried reaches (cos(x, e), about 0 for random
    e) ends at that limit.
    """
    if target >= 1.0:
        return x.clone()
    x32, e32 = x.float(), direction.float()
    dims = tuple(range(1, x.dim() - 1))
    n_layers = x.shape[0]
    scale = x32.flatten(1).norm(dim=1) / e32.flatten(1).norm(dim=1).clamp_min(1e-30)  # [L]
    shape = (n_layers,) + (1,) * (x.dim() - 1)
    lo, hi = (scale * 1e-7).clamp_min(1e-30).log(), (scale * 1e4).clamp_min(1e-30).log()
    for _ in range(iters):
        mid = (lo + hi) / 2
        cos = row_cosines(x32, x32 + mid.exp().view(shape) * e32).mean(dims)
        too_far = cos < target
        hi = torch.where(too_far, mid, hi)
        lo = torch.where(too_far, lo, mid)
    return (x32 + ((lo + hi) / 2).exp().view(shape) * e32).to(x.dtype)


def gaussian(shape, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float32)


def noisy_cache(native: KVCache, start: int, target: float, generator: torch.Generator,
                key_dir: torch.Tensor | None = None, value_dir: torch.Tensor | None = None) -> KVCache:
    """Isotropic Gaussian noise on the substituted rows of every layer, keys and values each
    calibrated per layer to the target mean cosine. Directions default to fresh N(0, I)."""
    rows_k, rows_v = native.keys[:, :, start:], native.values[:, :, start:]
    key_dir = gaussian(rows_k.shape, generator) if key_dir is None else key_dir
    value_dir = gaussian(rows_v.shape, generator) if value_dir is None else value_dir
    keys, values = native.keys.clone(), native.values.clone()
    keys[:, :, start:] = calibrate(rows_k, key_dir, target)
    values[:, :, start:] = calibrate(rows_v, value_dir, target)
    return KVCache(keys, values)


# --------------------------------------------------------------------------- genuine caches


def interpolate(floor: KVCache, native: KVCache, alpha: float, keys: bool = True, values: bool = True,
                rows: torch.Tensor | None = None) -> KVCache:
    """lerp(floor, native, alpha): alpha = 0 is the masked cache, 1 the native one, both bit for bit.

    With `keys` or `values` False, that half comes from the native cache unmixed; with `rows`
    ([row] absolute positions), only those rows are mixed and every other row is native."""
    if keys and values and rows is None:
        if alpha == 0:
            return floor
        if alpha == 1:
            return native

    def mix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [layer, kv_head, pos, d_head]
        if rows is None:
            return torch.lerp(a, b, alpha)
        out = b.clone()
        out[:, :, rows] = torch.lerp(a[:, :, rows], b[:, :, rows], alpha)
        return out
    return KVCache(mix(floor.keys, native.keys) if keys else native.keys,
                   mix(floor.values, native.values) if values else native.values)


def replace_layers(base: KVCache, sub: KVCache, count: int) -> KVCache:
    """The first `count` layers from `sub`, the rest from `base` (bit-exact)."""
    return KVCache(torch.cat([sub.keys[:count], base.keys[count:]]),
                   torch.cat([sub.values[:count], base.values[count:]]))


def matched_interpolation(floor: KVCache, native: KVCache, start: int, target: float,
                          iters: int = 30) -> tuple[KVCache, torch.Tensor]:
    """Per layer, lerp(floor, native, alpha_l) with alpha_l chosen so the mean key cosine to the
    native cache is `target` (cosine grows monotonically with alpha along the segment). Layers
    whose masked cache is already closer than `target` keep alpha = 0. Returns (cache, alphas [L])."""
    fk, nk = floor.keys[:, :, start:].float(), native.keys[:, :, start:].float()
    n_layers = fk.shape[0]
    lo, hi = torch.zeros(n_layers), torch.ones(n_layers)
    for _ in range(iters):
        mid = (lo + hi) / 2
        cos = row_cosines(torch.lerp(fk, nk, mid.view(-1, 1, 1, 1)), nk).mean((1, 2))
        short = cos < target
        lo = torch.where(short, mid, lo)
        hi = torch.where(short, hi, mid)
    alphas = hi  # the smallest weight found that reaches the target (0 where the floor already does)
    alphas = torch.where(row_cosines(fk, nk).mean((1, 2)) >= target, torch.zeros_like(alphas), alphas)
    shape = (-1, 1, 1, 1)
    keys = torch.lerp(floor.keys.float(), native.keys.float(), alphas.view(shape)).to(native.keys.dtype)
    values = torch.lerp(floor.values.float(), native.values.float(), alphas.view(shape)).to(native.values.dtype)
    keys[:, :, :start], values[:, :, :start] = native.keys[:, :, :start], native.values[:, :, :start]
    return KVCache(keys, values), alphas


# --------------------------------------------------------------------------- bank


@dataclass
class KeyBank:
    """Genuine rows the reader produced on other passages, each prefilled after the shared prefix.

    keys/values: [layer, kv_head, row, d_head] at their sender positions (post-RoPE); `free`
    holds the keys with RoPE undone, where retrieval compares them. `spans[i]` are passage i's rows.
    """

    keys: torch.Tensor
    values: torch.Tensor
    free: torch.Tensor
    positions: torch.Tensor  # [row]
    spans: list[tuple[int, int]]
    sender_start: int  # the position a sender's passage begins at (the prefix length)

    @property
    def n_rows(self) -> int:
        return self.keys.shape[2]

    def passage(self, i: int) -> KVCache:
        a, b = self.spans[i]
        return KVCache(self.keys[:, :, a:b], self.values[:, :, a:b])


def build_bank(model: LoadedModel, prefix: KVCache, passage_ids: list[torch.Tensor]) -> KeyBank:
    start = prefix.n_positions
    parts = [c.slice(start, c.n_positions) for c in prefill_many(model, passage_ids, past=prefix)]  # passage rows
    spans, at = [], 0
    for ids in passage_ids:
        spans.append((at, at + len(ids)))
        at += len(ids)
    cache = KVCache.cat(parts)
    positions = torch.cat([start + torch.arange(b - a) for a, b in spans])
    free = model.adapter.rotate_keys(cache.keys, -positions)
    return KeyBank(cache.keys, cache.values, free, positions, spans, start)


def bank_neighbours(bank: KeyBank, adapter: FamilyAdapter, native: KVCache, start: int,
                    max_rank: int) -> torch.Tensor:
    """Indices of the `max_rank` most cosine-similar bank keys (RoPE undone on both sides) for each
    substituted row, per layer and kv head, nearest first. [layer, kv_head, row, max_rank]"""
    if max_rank > bank.n_rows:
        raise WorkbenchError(f"neighbour rank {max_rank} exceeds the bank's {bank.n_rows} keys")
    end = native.n_positions
    query = adapter.rotate_keys(native.keys[:, :, start:end], -torch.arange(start, end))
    q = F.normalize(query.float(), dim=-1)
    b = F.normalize(bank.free.float(), dim=-1)
    out = []
    for layer in range(q.shape[0]):  # one layer at a time keeps the similarity matrix small
        sims = q[layer] @ b[layer].transpose(-1, -2)  # [kv_head, row, bank_row]
        out.append(sims.topk(max_rank, dim=-1).indices)
    return torch.stack(out)


def bank_substitute(native: KVCache, bank: KeyBank, adapter: FamilyAdapter, neighbours: torch.Tensor,
                    start: int, rank: int, alpha: float) -> KVCache:
    """Each substituted key moved toward its rank-th nearest bank key by `alpha` (that key rotated to
    the row's position), and its value toward the same bank row's value."""
    idx = neighbours[..., rank - 1]  # [L, H, rows]
    d = bank.free.shape[-1]
    gather = idx[..., None].expand(-1, -1, -1, d)
    nb_free = torch.gather(bank.free, 2, gather)
    nb_keys = adapter.rotate_keys(nb_free, torch.arange(start, native.n_positions))
    nb_values = torch.gather(bank.values, 2, gather)
    keys, values = native.keys.clone(), native.values.clone()
    keys[:, :, start:] = torch.lerp(keys[:, :, start:].float(), nb_keys.float(), alpha).to(keys.dtype)
    values[:, :, start:] = torch.lerp(values[:, :, start:].float(), nb_values.float(), alpha).to(values.dtype)
    return KVCache(keys, values)


# --------------------------------------------------------------------------- subspaces


@dataclass(frozen=True)
class Subspace:
    """Orthonormal bases per layer in the joint [kv_head * d_head] space (keys with RoPE undone)."""

    name: str
    keys: list[torch.Tensor]  # each [kv_head * d_head, rank]
    values: list[torch.Tensor]

    def ranks(self) -> tuple[float, float]:
        """Mean rank of the key and of the value bases over layers."""
        return (sum(u.shape[1] for u in self.keys) / len(self.keys),
                sum(u.shape[1] for u in self.values) / len(self.values))


def _column_basis(matrix: torch.Tensor, energy: float | None = None, tol: float = 1e-6) -> torch.Tensor:
    """Left singular vectors spanning the columns of `matrix` [dim, n]: all with s > tol * s_max,
    or (energy given) the fewest that hold that share of the squared singular values."""
    u, s, _ = torch.linalg.svd(matrix.float(), full_matrices=False)
    if energy is None:
        rank = int((s > tol * s.max()).sum())
    else:
        share = (s ** 2).cumsum(0) / (s ** 2).sum()
        rank = int((share < energy).sum()) + 1
    return u[:, :max(rank, 1)]


def wk_colspace(adapter: FamilyAdapter) -> Subspace:
    """Column spaces of each layer's W_K (times the k-norm gain where the family has one) and W_V.

    When kv_head * d_head <= hidden (every usual checkpoint) W_K has full row rank and its
    column space is the whole key space: the projection then changes nothing."""
    keys, values = [], []
    for layer in adapter.layers:
        attn = layer.self_attn
        wk = attn.k_proj.weight.detach()  # [kv_head * d_head, hidden]
        if hasattr(attn, "k_norm") and getattr(attn.k_norm, "weight", None) is not None:
            gain = attn.k_norm.weight.detach().float().repeat(adapter.n_kv_heads)
            wk = gain[:, None] * wk.float()
        keys.append(_column_basis(wk))
        values.append(_column_basis(attn.v_proj.weight.detach()))
    return Subspace("wk_colspace", keys, values)


def bank_span(bank: KeyBank, energy: float = 0.99) -> Subspace:
    """Per layer, the span of the bank's genuine keys (RoPE undone) and values that holds `energy`
    of their squared norm: the directions the reader's own keys actually occupy."""
    n_layers, n_heads, rows, d = bank.free.shape
    keys, values = [], []
    for layer in range(n_layers):
        k = bank.free[layer].permute(1, 0, 2).reshape(rows, n_heads * d)
        v = bank.values[layer].permute(1, 0, 2).reshape(rows, n_heads * d)
        keys.append(_column_basis(k.T, energy))
        values.append(_column_basis(v.T, energy))
    return Subspace("bank_span", keys, values)


def _project(noise: torch.Tensor, bases: list[torch.Tensor]) -> torch.Tensor:
    """noise [L, H, rows, d] projected per layer onto the joint-space basis."""
    n_layers, n_heads, rows, d = noise.shape
    out = torch.empty_like(noise)
    for layer, u in enumerate(bases):
        flat = noise[layer].permute(1, 0, 2).reshape(rows, n_heads * d)
        flat = (flat @ u) @ u.T
        out[layer] = flat.reshape(rows, n_heads, d).permute(1, 0, 2)
    return out


def subspace_noisy_cache(native: KVCache, start: int, target: float, subspace: Subspace,
                         adapter: FamilyAdapter, generator: torch.Generator) -> KVCache:
    """Gaussian noise projected into the subspace (keys: with RoPE undone, then re-applied at each
    row's position) and calibrated like `noisy_cache`, so the substitute stays in that subspace
    whenever the native rows do."""
    end = native.n_positions
    shape = native.keys[:, :, start:].shape
    key_dir = adapter.rotate_keys(_project(gaussian(shape, generator), subspace.keys), torch.arange(start, end))
    value_dir = _project(gaussian(shape, generator), subspace.values)
    return noisy_cache(native, start, target, generator, key_dir=key_dir, value_dir=value_dir)


# --------------------------------------------------------------------------- augmentation


def augmented_cache(adapter: FamilyAdapter, own: KVCache, senders: list[KVCache], sender_start: int) -> KVCache:
    """The reader's own cache followed by sender passage caches (each computed at positions from
    `sender_start`), keys moved by a delta rotation to the positions after `own`."""
    starts = own.n_positions + torch.tensor([0] + [s.n_positions for s in senders]).cumsum(0)  # [sender + 1]
    return assemble(adapter, [(own, 0)] + [(s, int(at) - sender_start) for s, at in zip(senders, starts)])


def is_correct(answer: str, gold) -> bool:
    """The probe's one metric: some gold answer, normalized, is contained in the normalized answer."""
    return bool(contains_answer(answer, gold))
