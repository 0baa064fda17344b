"""Fidelity vs consumability: is a cache that is close in geometry usable by the reader?

The probe of "Close Enough is Nowhere Near" (shared/papers/003) on any supported model. For
each question the reader prefills the chat prefix and one fact-bearing passage itself (its
*native* cache, the reference); the *floor* is its cache of the same passage with the fact's
tokens masked (same length). Substitute caches (`fidelity_probe` lists the conditions) replace
its passage rows and the reader answers from them (`decode.greedy_answers`). Transfer is the
share answered correctly: a gold answer, normalized, contained in the normalized answer.

    run_fidelity(model, Path("runs/fid"), n=200)      # -> runs/fid/{manifest.json, *.parquet}

This module holds the settings, the task set and the runner; docs/FIDELITY.md the method.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.errors import WorkbenchError
from workbench.seeds import check_seed
from workbench.experiments import fidelity_conditions as conditions
from workbench.experiments.fidelity_probe import ProbeItem, ProbeSetup, probe_example
from workbench.experiments.fidelity_tables import KEY_COLUMNS, TABLES, summarize
from workbench.layout import PromptFormat, build_layout, chat_frame
from workbench.models import LoadedModel, model_identity
from workbench.runstore import check_out, finished, new_manifest, write_run
from workbench.splice import prefill
from workbench.tasks import Example, load_dataset
from workbench.tasks.synthetic import synthetic_example

BANK_OFFSET = 1_000_000  # bank passages are synthetic examples from this index on: never in the task set
METRIC = "gold-contained: some gold answer, normalized (lowercase, no punctuation/articles), is a substring of the normalized answer"
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
    # dense where the genuine mix's transfer turns (a sharp threshold between 0.8 and 0.95 on SmolLM2)
    alphas: tuple[float, ...] = (0, 0.1, 0.25, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99, 1)
    layer_cos: float = 0.99
    layers: tuple[int, ...] | None = None  # None: 0, 1, 2, 4, 8, 16, ... (powers of two), all layers
    bank_ranks: tuple[int, ...] = (1, 16)
    bank_alphas: tuple[float, ...] = (0.25, 0.5, 1)
    bank_size: int = 100  # passages in the bank (their rows are the bank's keys)
    pool_sizes: tuple[int, ...] = (1, 2, 4, 8)
    proj_cos: tuple[float, ...] = (0.95,)
    subspaces: tuple[str, ...] = conditions.SUBSPACES
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
    check_seed(args.seed)
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
    unknown = [s for s in args.subspaces if s not in conditions.SUBSPACES]
    if unknown:
        raise WorkbenchError(f"unknown subspace(s) {unknown}; valid: {', '.join(conditions.SUBSPACES)}")
    if not _is_int(args.max_new_tokens) or args.max_new_tokens < 1:
        raise WorkbenchError(f"max_new_tokens must be an integer >= 1, got {args.max_new_tokens!r}")
    if args.layers is not None:
        for layer in args.layers:
            if not _is_int(layer) or layer < 0 or (n_layers is not None and layer > n_layers):
                limit = f"from 0 to {n_layers}" if n_layers is not None else ">= 0"
                raise WorkbenchError(f"layers: {layer!r} is out of range; a count of replaced layers "
                                     f"must be an integer {limit}")


# --------------------------------------------------------------------------- task set


def fidelity_examples(n: int, seed: int = 0, offset: int = 0) -> list[Example]:
    """The built-in task set: one passage stating a fictional person's birth city, the question
    "In which city was P born?" and the answer lead "P was born in the city of"."""
    return [synthetic_example(offset + i, seed, types=("onehop",), distractors=0) for i in range(n)]


def prepare_items(model: LoadedModel, examples: list[Example], fmt: PromptFormat) -> tuple[list[ProbeItem], list[str]]:
    """Layouts and masks (tokenization only); ids of examples with no gold in any passage are skipped."""
    mask_id = conditions.mask_token_id(model.tokenizer)
    items, skipped = [], []
    for i, example in enumerate(examples):
        fact = conditions.find_fact_passage(example)
        if fact is None:
            skipped.append(example.id)
            continue
        layout = build_layout(model.tokenizer, example, fmt, max_positions=model.max_positions)
        ids, rows = conditions.mask_fact(model.tokenizer, layout, example, fact, mask_id)
        items.append(ProbeItem(i, example, layout, ids, rows, fact))
    return items, skipped


# --------------------------------------------------------------------------- one example


# --------------------------------------------------------------------------- runner


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
    validate(args, model.adapter.n_layers)
    out = check_out(out, kind="fidelity", force=force)
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

    manifest = new_manifest("fidelity", model_identity(model), asdict(args))
    t0 = time.perf_counter()
    prefix = prefill(model, prefix_ids)
    bank = conditions.build_bank(model, prefix, bank_ids)
    spaces = [conditions.wk_colspace(model.adapter) if s == "wk_colspace" else conditions.bank_span(bank)
              for s in args.subspaces] if args.proj_cos else []
    setup = ProbeSetup(model, args, prefix, bank, spaces, args.layer_grid(model.adapter.n_layers))
    t_setup = time.perf_counter() - t0
    rows = []
    for item in tqdm(items, desc="fidelity", unit="example", disable=not progress):
        rows += probe_example(setup, item)
    answers = pd.DataFrame(rows)[["example", *KEY_COLUMNS, "answer", "correct", "key_cos", "value_cos",
                                  "key_cos_fact", "key_cos_floor", "weight"]]
    tables = {**summarize(answers), "answers": answers}
    seconds = time.perf_counter() - t0
    manifest = finished(
        manifest, seconds=seconds, layer_grid=list(setup.layer_grid), metric=METRIC,
        mask_text=conditions.MASK_TEXT, n_examples=len(items), skipped=skipped,
        bank={"passages": len(bank.spans), "keys_per_layer_head": bank.n_rows},
        subspace_ranks={s.name: {"keys": s.ranks()[0], "values": s.ranks()[1],
                                 "full": model.adapter.n_kv_heads * model.adapter.head_dim} for s in spaces},
        timing={"setup": round(t_setup, 2), "per_example": round((seconds - t_setup) / len(items), 3)})
    check_out(out, kind="fidelity", force=force)  # it may have appeared while the probe ran
    return write_run(out, manifest, {name: tables[name] for name in TABLES})
