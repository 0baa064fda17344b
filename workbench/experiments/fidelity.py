"""Fidelity vs consumability: is a cache that is close in geometry usable by the reader?

The probe of "Close Enough is Nowhere Near" (shared/papers/003) on any supported model. For
each question the reader prefills the chat prefix and one fact-bearing passage itself (its
*native* cache, the reference); the *floor* is its cache of the same passage with the fact's
tokens masked (same length). Conditions replace the passage rows of the native cache and the
reader answers the question from the result (`fidelity_conditions.read_batch`). Transfer is
the share answered correctly: a gold answer, normalized, contained in the normalized answer.

    run_fidelity(model, Path("runs/fid"), n=200)      # -> runs/fid/{manifest.json, *.parquet}

Conditions (see docs/FIDELITY.md): `noise` (isotropic noise calibrated to a target key
cosine), `genuine` (lerp from the masked toward the native cache), `layers` (the first l
layers replaced at one matched key cosine, noise vs genuine), `bank` (each key moved toward its
k-th nearest genuine key from a bank of other passages), `projection` (noise confined to the
column space of W_K, or to the span of the bank's keys) and `augment` (the reader keeps its
floor cache and attends over N sender caches appended, one holding the fact).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.experiments import fidelity_conditions as fc
from workbench.kv import KVCache, prefill
from workbench.layout import PromptFormat, build_layout, chat_frame
from workbench.models import LoadedModel
from workbench.stats import wilson_interval
from workbench.tasks import Example, load_dataset
from workbench.tasks.synthetic import synthetic_example

KIND = "fidelity"
BANK_OFFSET = 1_000_000  # bank passages are synthetic examples from this index on: never in the task set
METRIC = "gold-contained: some gold answer, normalized (lowercase, no punctuation/articles), is a substring of the normalized answer"
KEY_COLUMNS = ["condition", "variant", "target_cos", "alpha", "layers", "rank", "pool"]
TABLES = ("conditions", "anchors", "augmentation", "answers")
# The answer lead on the assistant turn ("P was born in the city of") already asks for a short
# answer; the default format's "Question: ... Answer with a short phrase only." would add 10
# suffix tokens to every one of the ~45 reads per example.
PROBE_FORMAT = PromptFormat(question_template="{question}")


@dataclass(frozen=True)
class FidelityArgs:
    """Every knob of a run; validated by `validate` before any work."""

    n: int = 200
    seed: int = 0
    cosines: tuple[float, ...] = (0.9999, 0.999, 0.995, 0.99, 0.98, 0.95)
    alphas: tuple[float, ...] = (0, 0.1, 0.25, 0.5, 0.75, 1)
    layer_cos: float = 0.99
    layers: tuple[int, ...] | None = None  # None: 0, 1, 2, 4, 8, 16, ... (powers of two), all layers
    bank_ranks: tuple[int, ...] = (1, 16)
    bank_alphas: tuple[float, ...] = (0.25, 0.5, 1)
    bank_size: int = 100  # passages in the bank (their rows are the bank's keys)
    pool_sizes: tuple[int, ...] = (1, 2, 4, 8)
    proj_cos: tuple[float, ...] = (0.95,)
    subspaces: tuple[str, ...] = fc.SUBSPACES
    dataset: str | None = None  # None: the built-in fictional one-fact task set
    max_new_tokens: int = 6  # the built-in answers take 3-6 tokens (city + '.')

    def layer_grid(self, n_layers: int) -> tuple[int, ...]:
        if self.layers is not None:
            return tuple(sorted(set(self.layers)))
        powers = {1 << i for i in range(n_layers.bit_length())}
        return tuple(sorted({0, n_layers, *(p for p in powers if p < n_layers)}))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_cos(values, name: str) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 < float(v) <= 1.0):
            raise WorkbenchError(f"{name}: a cosine target must lie in (0, 1], got {v!r}")


def _check_unit(values, name: str) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= float(v) <= 1.0):
            raise WorkbenchError(f"{name}: a mixing weight must lie in [0, 1], got {v!r}")


def validate(args: FidelityArgs, n_layers: int | None = None) -> None:
    """Raise a WorkbenchError for any bad setting (the model-dependent ones once n_layers is known)."""
    if not _is_int(args.n) or args.n < 1:
        raise WorkbenchError(f"n must be an integer >= 1, got {args.n!r}")
    if not _is_int(args.seed):
        raise WorkbenchError(f"seed must be an integer, got {args.seed!r}")
    _check_cos(args.cosines, "cosines")
    _check_cos([args.layer_cos], "layer_cos")
    _check_cos(args.proj_cos, "proj_cos")
    _check_unit(args.alphas, "alphas")
    _check_unit(args.bank_alphas, "bank_alphas")
    for k in args.bank_ranks:
        if not _is_int(k) or k < 1:
            raise WorkbenchError(f"bank_ranks: a neighbour rank must be an integer >= 1, got {k!r}")
    for size in args.pool_sizes:
        if not _is_int(size) or size < 1:
            raise WorkbenchError(f"pool_sizes: a sender pool needs N >= 1 senders, got {size!r}")
    if not _is_int(args.bank_size) or args.bank_size < 1:
        raise WorkbenchError(f"bank_size must be an integer >= 1 (passages), got {args.bank_size!r}")
    if args.pool_sizes and max(args.pool_sizes) > args.bank_size:
        raise WorkbenchError(f"a pool of N = {max(args.pool_sizes)} senders draws N distractors from the "
                             f"bank's {args.bank_size} passages: raise bank_size or lower pool_sizes")
    unknown = [s for s in args.subspaces if s not in fc.SUBSPACES]
    if unknown:
        raise WorkbenchError(f"unknown subspace(s) {unknown}; valid: {', '.join(fc.SUBSPACES)}")
    if not _is_int(args.max_new_tokens) or args.max_new_tokens < 1:
        raise WorkbenchError(f"max_new_tokens must be an integer >= 1, got {args.max_new_tokens!r}")
    if args.layers is not None:
        for layer in args.layers:
            if not _is_int(layer) or layer < 0 or (n_layers is not None and layer > n_layers):
                limit = f"0..{n_layers}" if n_layers is not None else ">= 0"
                raise WorkbenchError(f"layers: {layer!r} is out of range; a count of replaced layers "
                                     f"must be an integer in {limit}")


def check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise WorkbenchError(f"{out} exists and is not empty: pass force=True (--force) or a new --out")


# --------------------------------------------------------------------------- task set


def fidelity_examples(n: int, seed: int = 0, offset: int = 0) -> list[Example]:
    """The built-in task set: one passage stating a fictional person's birth city, the question
    "In which city was P born?" and the answer lead "P was born in the city of"."""
    return [synthetic_example(offset + i, seed, types=("onehop",), distractors=0) for i in range(n)]


@dataclass
class Item:
    """One example laid out, with its fact masked."""

    index: int
    example: Example
    layout: object
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


def prepare_items(model: LoadedModel, examples: list[Example], fmt: PromptFormat) -> tuple[list[Item], list[str]]:
    """Layouts and masks (tokenization only); ids of examples with no gold in any passage are skipped."""
    mask_id = fc.mask_token_id(model.tokenizer)
    items, skipped = [], []
    for i, example in enumerate(examples):
        fact = fc.find_fact_passage(example)
        if fact is None:
            skipped.append(example.id)
            continue
        layout = build_layout(model.tokenizer, example, fmt, max_positions=model.max_positions)
        ids, rows = fc.mask_fact(model.tokenizer, layout, example, fact, mask_id)
        items.append(Item(i, example, layout, ids, rows, fact))
    return items, skipped


# --------------------------------------------------------------------------- one example


def _generator(seed: int, *parts) -> torch.Generator:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


@dataclass
class Shared:
    """What every example reuses: the prefix cache, the bank, the subspaces, the layer grid."""

    model: LoadedModel
    args: FidelityArgs
    prefix: KVCache
    bank: fc.KeyBank
    subspaces: list[fc.Subspace]
    layer_grid: tuple[int, ...]


def _spec(condition: str, variant: str = "", target_cos=math.nan, alpha=math.nan, layers=-1,
          rank=-1, pool=-1) -> dict:
    return {"condition": condition, "variant": variant, "target_cos": float(target_cos),
            "alpha": float(alpha), "layers": int(layers), "rank": int(rank), "pool": int(pool)}


def probe_example(shared: Shared, item: Item) -> list[dict]:
    """Every condition for one example: one row per condition with its answer and cosines."""
    model, args = shared.model, shared.args
    ss, start = item.suffix_start, item.start
    native = prefill(model, item.layout.ids[:ss])
    floor = prefill(model, item.masked_ids[:ss])
    eid = item.example.id
    subs: list[tuple[dict, KVCache, int | None, float]] = [
        (_spec("floor"), floor, None, math.nan), (_spec("reference"), native, None, math.nan)]
    noisy = {c: fc.noisy_cache(native, start, c, _generator(args.seed, eid, "noise", c))
             for c in dict.fromkeys([*args.cosines, *([args.layer_cos] if shared.layer_grid else [])])}
    for c in args.cosines:
        subs.append((_spec("noise", target_cos=c), noisy[c], None, math.nan))
    for a in args.alphas:
        subs.append((_spec("genuine", alpha=a), fc.interpolate(floor, native, a), None, math.nan))
    if shared.layer_grid:
        genuine, weights = fc.matched_interpolation(floor, native, start, args.layer_cos)
        for count in shared.layer_grid:
            for variant, sub in (("noise", noisy[args.layer_cos]), ("genuine", genuine)):
                cache = native if count == 0 else sub if count == model.adapter.n_layers else \
                    fc.replace_layers(native, sub, count)
                weight = float(weights[:count].mean()) if variant == "genuine" and count else math.nan
                subs.append((_spec("layers", variant, target_cos=args.layer_cos, layers=count), cache, count, weight))
    if args.bank_ranks and args.bank_alphas:
        neighbours = fc.bank_neighbours(shared.bank, model.adapter, native, start, max(args.bank_ranks))
        for k in args.bank_ranks:
            for a in args.bank_alphas:
                subs.append((_spec("bank", rank=k, alpha=a),
                             fc.bank_substitute(native, shared.bank, model.adapter, neighbours, start, k, a),
                             None, math.nan))
    for space in shared.subspaces:
        for c in args.proj_cos:
            gen = _generator(args.seed, eid, space.name, c)
            subs.append((_spec("projection", space.name, target_cos=c),
                         fc.subspace_noisy_cache(native, start, c, space, model.adapter, gen), None, math.nan))

    measured = []
    for spec, cache, count, weight in subs:
        fid = fc.fidelity(cache, native, floor, start, item.fact_rows, layers=count)
        measured.append({**spec, "weight": weight, "key_cos": fid.key, "value_cos": fid.value,
                         "key_cos_fact": fid.key_fact, "key_cos_floor": fid.key_floor})
    nan = {"weight": math.nan, "key_cos": math.nan, "value_cos": math.nan, "key_cos_fact": math.nan,
           "key_cos_floor": math.nan}
    for spec, cache in _augment(shared, item, native, floor):
        subs.append((spec, cache, None, math.nan))
        measured.append({**spec, **nan})

    unique: dict[int, KVCache] = {}
    for _, cache, _, _ in subs:
        unique.setdefault(id(cache), cache)
    texts = fc.read_batch(model, list(unique.values()), item.layout.ids[ss:], args.max_new_tokens)
    answers = dict(zip(unique, texts))
    return [{**row, "example": eid, "answer": answers[id(cache)],
             "correct": fc.is_correct(answers[id(cache)], item.example.gold)}
            for row, (_, cache, _, _) in zip(measured, subs)]


def _augment(shared: Shared, item: Item, native: KVCache, floor: KVCache) -> list[tuple[dict, KVCache]]:
    """Reader keeps its floor cache; N sender caches are appended, one holding the fact. Controls
    swap that sender for its masked cache (same length) or for one more distractor."""
    args, model, bank = shared.args, shared.model, shared.bank
    if not args.pool_sizes:
        return []
    prefix_len = shared.prefix.n_positions
    if item.start == prefix_len:  # the fact passage opens the span: its native rows are a sender's cache
        sender, masked = native.slice(item.start, item.fact_end), floor.slice(item.start, item.fact_end)
    else:
        sender = fc.isolated_passage(model, shared.prefix, item.layout.ids[item.start:item.fact_end])
        masked = fc.isolated_passage(model, shared.prefix, item.masked_ids[item.start:item.fact_end])
    rng = random.Random(f"fidelity-pool:{args.seed}:{item.example.id}")
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
                        fc.augmented_cache(model.adapter, own, senders, bank.sender_start)))
    return out


# --------------------------------------------------------------------------- tables


def summarize(answers: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """conditions (one row per condition), anchors (floor, reference), augmentation (per pool N)."""
    grouped = answers.groupby(KEY_COLUMNS, dropna=False, sort=False)
    table = grouped.agg(n=("correct", "size"), correct=("correct", "sum"), key_cos=("key_cos", "mean"),
                        value_cos=("value_cos", "mean"), key_cos_fact=("key_cos_fact", "mean"),
                        key_cos_floor=("key_cos_floor", "mean"), weight=("weight", "mean")).reset_index()
    table["correct"] = table["correct"].astype(int)
    table["transfer"] = table["correct"] / table["n"]
    bounds = [wilson_interval(int(c), int(n)) for c, n in zip(table["correct"], table["n"])]
    table["low"] = [b[0] for b in bounds]
    table["high"] = [b[1] for b in bounds]
    anchors = table[table["condition"].isin(["floor", "reference"])][["condition", "n", "correct", "transfer", "low", "high"]]
    anchor = dict(zip(anchors["condition"], anchors["transfer"]))
    aug = table[table["condition"] == "augment"]
    rows = []
    for size, part in aug.groupby("pool", sort=True):
        got = dict(zip(part["variant"], part["transfer"]))
        controls = {k: v for k, v in got.items() if k != "sender"}
        strongest = max(controls, key=controls.get) if controls else ""
        control = controls.get(strongest, math.nan)
        rows.append({"pool": int(size), "sender": got.get("sender", math.nan),
                     "masked_sender": got.get("masked_sender", math.nan),
                     "distractors_only": got.get("distractors_only", math.nan),
                     "strongest_control": strongest, "control": control,
                     "lift": got.get("sender", math.nan) - control,
                     "floor": anchor.get("floor", math.nan), "reference": anchor.get("reference", math.nan)})
    augmentation = pd.DataFrame(rows, columns=["pool", "sender", "masked_sender", "distractors_only",
                                               "strongest_control", "control", "lift", "floor", "reference"])
    return {"conditions": table, "anchors": anchors.reset_index(drop=True), "augmentation": augmentation}


def load_tables(folder: Path) -> dict[str, pd.DataFrame]:
    """The parquet tables of a fidelity run folder."""
    from workbench.experiments.runstore import read_manifest

    read_manifest(Path(folder), kind=KIND)
    return {name: pd.read_parquet(Path(folder) / f"{name}.parquet") for name in TABLES}


# --------------------------------------------------------------------------- runner


def _versions() -> dict:
    try:
        from workbench.experiments.runstore import package_versions
        return package_versions()
    except ImportError:  # pragma: no cover - the run store ships with the package
        import transformers
        return {"torch": torch.__version__, "transformers": transformers.__version__}


def _git() -> str | None:
    try:
        from workbench.experiments.runstore import git_revision
        return git_revision()
    except ImportError:  # pragma: no cover
        return None


def _now() -> str:
    from datetime import datetime, timezone
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_fidelity(model: LoadedModel, out: Path, n: int = 200, seed: int = 0, *,
                 cosines=FidelityArgs.cosines, alphas=FidelityArgs.alphas, layer_cos=FidelityArgs.layer_cos,
                 layers=None, bank_ranks=FidelityArgs.bank_ranks, bank_alphas=FidelityArgs.bank_alphas,
                 bank_size=FidelityArgs.bank_size, pool_sizes=FidelityArgs.pool_sizes,
                 proj_cos=FidelityArgs.proj_cos, subspaces=FidelityArgs.subspaces, dataset=None,
                 examples: list[Example] | None = None, max_new_tokens=FidelityArgs.max_new_tokens,
                 progress=True, force=False) -> Path:
    """Run the probe on `n` examples and write `out/` (manifest.json + conditions, anchors,
    augmentation and answers parquet tables) through a temporary folder renamed into place.

    `examples` (or a `dataset` spec such as "jsonl:PATH") replaces the built-in task set; examples
    whose passages contain no gold answer are skipped and listed in the manifest. Every setting
    is checked, and every example laid out and masked, before any model computation.
    """
    args = FidelityArgs(n=n, seed=seed, cosines=tuple(cosines), alphas=tuple(alphas), layer_cos=layer_cos,
                        layers=None if layers is None else tuple(layers), bank_ranks=tuple(bank_ranks),
                        bank_alphas=tuple(bank_alphas), bank_size=bank_size, pool_sizes=tuple(pool_sizes),
                        proj_cos=tuple(proj_cos), subspaces=tuple(subspaces), dataset=dataset,
                        max_new_tokens=max_new_tokens)
    out = Path(out)
    validate(args, model.adapter.n_layers)
    check_out(out, force)
    fmt = PROBE_FORMAT
    if examples is None:
        examples = load_dataset(dataset, n) if dataset else fidelity_examples(n, seed)
    examples = list(examples)[:n]
    items, skipped = prepare_items(model, examples, fmt)
    if not items:
        raise WorkbenchError(f"none of the {len(examples)} examples has a gold answer inside a passage to mask")
    before, _ = chat_frame(model.tokenizer, None)
    prefix_ids = torch.tensor(model.tokenizer(before, add_special_tokens=False)["input_ids"], dtype=torch.long)
    bank_ids = [torch.tensor(model.tokenizer(e.passages[0] + fmt.passage_separator, add_special_tokens=False)
                             ["input_ids"], dtype=torch.long) for e in fidelity_examples(bank_size, seed, BANK_OFFSET)]
    bank_rows = sum(len(ids) for ids in bank_ids)
    if args.bank_ranks and args.bank_alphas and max(args.bank_ranks) > bank_rows:
        raise WorkbenchError(f"neighbour rank {max(args.bank_ranks)} exceeds the bank's {bank_rows} keys "
                             f"({bank_size} passages): raise bank_size or lower bank_ranks")
    if args.pool_sizes:
        widest = max(max(len(i) for i in bank_ids), max(item.fact_end - item.start for item in items))
        longest = max(len(item.layout.ids) for item in items) + max(args.pool_sizes) * widest + max_new_tokens
        if longest > model.max_positions:
            raise WorkbenchError(f"a pool of {max(args.pool_sizes)} senders needs up to {longest} positions, "
                                 f"more than the model's {model.max_positions}")

    started, t0 = _now(), time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        prefix = prefill(model, prefix_ids)
        bank = fc.build_bank(model, prefix, bank_ids)
        spaces = [fc.wk_colspace(model.adapter) if s == "wk_colspace" else fc.bank_span(bank)
                  for s in args.subspaces] if args.proj_cos else []
        shared = Shared(model, args, prefix, bank, spaces, args.layer_grid(model.adapter.n_layers))
        t_setup = time.perf_counter() - t0
        rows = []
        iterator = items
        if progress:
            from tqdm.auto import tqdm
            iterator = tqdm(items, desc="fidelity", unit="example")
        for item in iterator:
            rows += probe_example(shared, item)
        answers = pd.DataFrame(rows)
        answers = answers[["example", *KEY_COLUMNS, "answer", "correct", "key_cos", "value_cos",
                           "key_cos_fact", "key_cos_floor", "weight"]]
        tables = {**summarize(answers), "answers": answers}
        for name in TABLES:
            tables[name].to_parquet(tmp / f"{name}.parquet", index=False)
        seconds = time.perf_counter() - t0
        manifest = {
            "kind": KIND, "status": "complete", "started": started, "ended": _now(),
            "model": model.describe(), "args": asdict(args),
            "layer_grid": list(shared.layer_grid), "versions": _versions(), "git": _git(),
            "metric": METRIC, "mask_text": fc.MASK_TEXT, "n_examples": len(items), "skipped": skipped,
            "bank": {"passages": len(bank.spans), "keys_per_layer_head": bank.n_rows},
            "subspace_ranks": {s.name: {"keys": s.ranks()[0], "values": s.ranks()[1],
                                        "full": model.adapter.n_kv_heads * model.adapter.head_dim} for s in spaces},
            "seconds": {"total": round(seconds, 2), "setup": round(t_setup, 2),
                        "per_example": round((seconds - t_setup) / len(items), 3)},
            "tables": [f"{name}.parquet" for name in TABLES],
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
        _move_into_place(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished temporary folder to `out`; an old `out` (force) is removed only after."""
    old = None
    if out.exists():
        if any(out.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.rename(out, old / "run")
        else:
            out.rmdir()
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- CLI


def _list(kind):
    def parse(text: str):
        try:
            return tuple(kind(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__}s, got {text!r}") from None
    parse.__name__ = f"{kind.__name__} list"
    return parse


def add_fidelity_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `kvwb fidelity` (the shared --model/--device/--dtype come from the CLI)."""
    d = FidelityArgs()
    fl, il = _list(float), _list(int)
    parser.add_argument("--out", type=Path, required=True, help="run folder to write (must be new or empty)")
    parser.add_argument("--n", type=int, default=d.n, help=f"questions (default {d.n})")
    parser.add_argument("--seed", type=int, default=d.seed, help="task set, noise and pool seed (default 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing non-empty --out")
    parser.add_argument("--dataset", default=None,
                        help="data set spec instead of the built-in one-fact task set (e.g. jsonl:PATH); "
                             "examples whose passages hold no gold answer are skipped")
    def show(values) -> str:
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)

    parser.add_argument("--cosines", type=fl, default=d.cosines,
                        help=f"noise: target key cosines in (0, 1] (default {show(d.cosines)})")
    parser.add_argument("--alphas", type=fl, default=d.alphas,
                        help=f"genuine: weights from masked (0) to native (1) (default {show(d.alphas)})")
    parser.add_argument("--layer-cos", type=float, default=d.layer_cos,
                        help=f"layer sweep: the matched key cosine of both corruptions (default {d.layer_cos})")
    parser.add_argument("--layers", type=il, default=None,
                        help="layer sweep: numbers of leading layers replaced (default 0,1,2,4,8,16,... and all)")
    parser.add_argument("--bank-ranks", type=il, default=d.bank_ranks,
                        help=f"bank: neighbour ranks k (default {show(d.bank_ranks)})")
    parser.add_argument("--bank-alphas", type=fl, default=d.bank_alphas,
                        help=f"bank: weights toward the neighbour (default {show(d.bank_alphas)})")
    parser.add_argument("--bank-size", type=int, default=d.bank_size,
                        help=f"bank: passages whose rows form the bank (default {d.bank_size})")
    parser.add_argument("--pool-sizes", type=il, default=d.pool_sizes,
                        help=f"augmentation: sender pool sizes N (default {show(d.pool_sizes)})")
    parser.add_argument("--proj-cos", type=fl, default=d.proj_cos,
                        help=f"projection: target key cosines (default {show(d.proj_cos)})")
    parser.add_argument("--subspaces", type=_list(str), default=d.subspaces,
                        help=f"projection: any of {','.join(fc.SUBSPACES)} (default all)")
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                        help=f"greedy decoding limit (default {d.max_new_tokens}; raise it for longer answers)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice); 1 is much faster on a busy machine")


def fidelity_main(args) -> int:
    """`kvwb fidelity`: run the probe, write the run folder, print the anchors and conditions."""
    from workbench.models import load_model

    kwargs = dict(cosines=args.cosines, alphas=args.alphas, layer_cos=args.layer_cos, layers=args.layers,
                  bank_ranks=args.bank_ranks, bank_alphas=args.bank_alphas, bank_size=args.bank_size,
                  pool_sizes=args.pool_sizes, proj_cos=args.proj_cos, subspaces=args.subspaces,
                  dataset=args.dataset, max_new_tokens=args.max_new_tokens)
    checked = FidelityArgs(n=args.n, seed=args.seed, **{k: (tuple(v) if isinstance(v, (list, tuple)) else v)
                                                         for k, v in kwargs.items()})
    validate(checked)  # everything that needs no model, before loading it
    check_out(Path(args.out), args.force)
    threads = getattr(args, "threads", None)
    if threads is not None:
        if threads < 1:
            raise WorkbenchError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    model = load_model(args.model, device=getattr(args, "device", None), dtype=getattr(args, "dtype", None))
    out = run_fidelity(model, args.out, n=args.n, seed=args.seed, progress=not args.no_progress,
                       force=args.force, **kwargs)
    tables = load_tables(out)
    manifest = json.loads((out / "manifest.json").read_text())
    print(f"wrote {out} ({manifest['n_examples']} examples, {manifest['seconds']['total']:.0f} s)")
    shown = tables["conditions"][[*KEY_COLUMNS, "key_cos", "transfer", "low", "high"]]
    with pd.option_context("display.max_rows", 500, "display.width", 160):
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(tables["augmentation"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m workbench.experiments.fidelity ...`: the same as `kvwb fidelity ...`."""
    import sys

    parser = argparse.ArgumentParser(prog="python -m workbench.experiments.fidelity",
                                     description=fidelity_main.__doc__)
    parser.add_argument("--model", default="smollm2-135m", help="model spec (default: the embedded smollm2-135m)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, help="fp32, bf16 or fp16")
    add_fidelity_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return fidelity_main(args)
    except WorkbenchError as err:
        print(f"kvwb fidelity: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
