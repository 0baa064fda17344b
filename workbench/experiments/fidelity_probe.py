"""The fidelity probe on one example: every substitute cache, its cosines, and the reader's answer.

Conditions (docs/FIDELITY.md):

    floor, reference     the reader's cache with the fact masked / its own native cache
    noise                isotropic noise on the native cache at a target key cosine
    floor_noise          the same noise on the floor cache (the paper's Table 2 arm: its
                         un-noised row is the floor, so with a floor of 0 it reads 0 by construction)
    genuine              lerp(floor, native, alpha): variants "kv" (keys and values), "k" (keys
                         only, values native), "v" (values only, keys native), "fact" (the fact's
                         rows only)
    layers               the first l layers replaced at one matched key cosine, noise vs genuine
    bank                 each key moved toward its k-th nearest genuine key from a bank of other
                         passages: from the floor (variant "floor", the paper's Table 4: alpha 0 is
                         the floor) or from the native cache (variant "native")
    subspace_noise       calibrated noise confined to a subspace (col(W_K), the bank's span) added to
                         the native cache: calibrated noise, not the paper's sender-produced substitute
    augment              the reader keeps its floor cache and reads N appended sender caches
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from workbench.decode import greedy_answers
from workbench.experiments import fidelity_conditions as conditions
from workbench.kv import KVCache
from workbench.models import LoadedModel
from workbench.seeds import derive_seed
from workbench.splice import prefill, sender_cache
from workbench.tasks import Example

GENUINE_VARIANTS = ("kv", "k", "v", "fact")


@dataclass
class ProbeItem:
    """One example laid out, with its fact masked."""

    index: int
    example: Example
    layout: object  # workbench.layout.Layout
    masked_ids: torch.Tensor
    fact_rows: torch.Tensor
    fact: int  # fact passage number

    @property
    def start(self) -> int:
        return self.layout.passages[self.fact].start

    @property
    def fact_end(self) -> int:
        return self.layout.passages[self.fact].end

    @property
    def suffix_start(self) -> int:
        return self.layout.suffix_start


def _generator(seed: int, *parts) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, *parts))


@dataclass
class ProbeSetup:
    """What every example reuses: the prefix cache, the bank, the subspaces, the layer grid."""

    model: LoadedModel
    args: object  # workbench.experiments.fidelity.FidelityArgs
    prefix: KVCache
    bank: conditions.KeyBank
    subspaces: list[conditions.Subspace]
    layer_grid: tuple[int, ...]


def _spec(condition: str, variant: str = "", target_cos=math.nan, alpha=math.nan, layers=-1,
          rank=-1, pool=-1) -> dict:
    return {"condition": condition, "variant": variant, "target_cos": float(target_cos),
            "alpha": float(alpha), "layers": int(layers), "rank": int(rank), "pool": int(pool)}


def probe_example(setup: ProbeSetup, item: ProbeItem) -> list[dict]:
    """Every condition for one example: one row per condition with its answer and cosines."""
    model, args = setup.model, setup.args
    ss, start = item.suffix_start, item.start
    native = prefill(model, item.layout.ids[:ss])
    floor = prefill(model, item.masked_ids[:ss])
    eid = item.example.id
    subs: list[tuple[dict, KVCache, int | None, float]] = [
        (_spec("floor"), floor, None, math.nan), (_spec("reference"), native, None, math.nan)]
    noisy = {c: conditions.noisy_cache(native, start, c, _generator(args.seed, eid, "noise", c))
             for c in dict.fromkeys([*args.cosines, *([args.layer_cos] if setup.layer_grid else [])])}
    for c in args.cosines:
        subs.append((_spec("noise", target_cos=c), noisy[c], None, math.nan))
        on_floor = conditions.noisy_cache(floor, start, c, _generator(args.seed, eid, "floor_noise", c))
        subs.append((_spec("floor_noise", target_cos=c), on_floor, None, math.nan))
    for a in args.alphas:
        for variant in GENUINE_VARIANTS:
            rows = item.fact_rows if variant == "fact" else None
            mix = conditions.interpolate(floor, native, a, keys=variant != "v", values=variant != "k", rows=rows)
            subs.append((_spec("genuine", variant, alpha=a), mix, None, math.nan))
    if setup.layer_grid:
        genuine, weights = conditions.matched_interpolation(floor, native, start, args.layer_cos)
        for count in setup.layer_grid:
            for variant, sub in (("noise", noisy[args.layer_cos]), ("genuine", genuine)):
                cache = native if count == 0 else sub if count == model.adapter.n_layers else \
                    conditions.replace_layers(native, sub, count)
                weight = float(weights[:count].mean()) if variant == "genuine" and count else math.nan
                subs.append((_spec("layers", variant, target_cos=args.layer_cos, layers=count), cache, count, weight))
    if args.bank_ranks and args.bank_alphas:
        neighbours = conditions.bank_neighbours(setup.bank, model.adapter, native, start, max(args.bank_ranks))
        for k in args.bank_ranks:
            for a in args.bank_alphas:
                for variant, base in (("floor", floor), ("native", native)):
                    sub = conditions.bank_substitute(base, setup.bank, model.adapter, neighbours, start, k, a)
                    subs.append((_spec("bank", variant, rank=k, alpha=a), sub, None, math.nan))
    for space in setup.subspaces:
        for c in args.proj_cos:
            gen = _generator(args.seed, eid, space.name, c)
            subs.append((_spec("subspace_noise", space.name, target_cos=c),
                         conditions.subspace_noisy_cache(native, start, c, space, model.adapter, gen), None, math.nan))

    measured = []
    for spec, cache, count, weight in subs:
        fid = conditions.fidelity(cache, native, floor, start, item.fact_rows, layers=count)
        measured.append({**spec, "weight": weight, "key_cos": fid.key, "value_cos": fid.value,
                         "key_cos_fact": fid.key_fact, "key_cos_floor": fid.key_floor})
    nan = {"weight": math.nan, "key_cos": math.nan, "value_cos": math.nan, "key_cos_fact": math.nan,
           "key_cos_floor": math.nan}
    for spec, cache in _augment(setup, item, native, floor):
        subs.append((spec, cache, None, math.nan))
        measured.append({**spec, **nan})

    unique: dict[int, KVCache] = {}
    for _, cache, _, _ in subs:
        unique.setdefault(id(cache), cache)
    read = greedy_answers(model, list(unique.values()), item.layout.ids[ss:], args.max_new_tokens)
    answers = dict(zip(unique, (a.text for a in read)))
    return [{**row, "example": eid, "answer": answers[id(cache)],
             "correct": conditions.is_correct(answers[id(cache)], item.example.gold)}
            for row, (_, cache, _, _) in zip(measured, subs)]


def _augment(setup: ProbeSetup, item: ProbeItem, native: KVCache, floor: KVCache) -> list[tuple[dict, KVCache]]:
    """Reader keeps its floor cache; N sender caches are appended, one holding the fact. Controls
    swap that sender for its masked cache (same length) or for one more distractor."""
    args, model, bank = setup.args, setup.model, setup.bank
    if not args.pool_sizes:
        return []
    prefix_len = setup.prefix.n_positions
    if item.start == prefix_len:  # the fact passage opens the span: its native rows are a sender's cache
        sender, masked = native.slice(item.start, item.fact_end), floor.slice(item.start, item.fact_end)
    else:
        sender = sender_cache(model, setup.prefix, item.layout.ids[item.start:item.fact_end])
        masked = sender_cache(model, setup.prefix, item.masked_ids[item.start:item.fact_end])
    rng = random.Random(derive_seed(args.seed, item.example.id, "pool"))
    order = rng.sample(range(len(bank.spans)), max(args.pool_sizes))
    own = floor.slice(0, item.suffix_start)
    out = []
    for size in args.pool_sizes:
        distractors = [bank.passage(j) for j in order[:size - 1]]
        slot = rng.randrange(size)
        for name, holder in (("sender", sender), ("masked_sender", masked),
                             ("distractors_only", bank.passage(order[size - 1]))):
            senders = distractors[:slot] + [holder] + distractors[slot:]
            out.append((_spec("augment", name, pool=size),
                        conditions.augmented_cache(model.adapter, own, senders, bank.sender_start)))
    return out


