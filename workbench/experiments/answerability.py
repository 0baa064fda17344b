"""Where a model answers: dense and splice accuracy on the first n examples of a data set.

    table = answerability(model, "ruler:niah_single", n=30, target_tokens=2048)
    answerability_summary(table)   # dense EM, splice EM, the gap, McNemar b / c of dense vs splice

Only the two answers a gold-based study needs (no signals, no repairs): each example is spliced,
prefilled densely, and answered greedily from both caches. It says on which task, length and
passage setting a model gets the dense answer right often enough for the splice to cost it
something, before any selector study is pre-registered there.
"""

from __future__ import annotations

import warnings

import pandas as pd
from tqdm.auto import tqdm

from workbench import stats
from workbench.context import build_context
from workbench.errors import WorkbenchWarning
from workbench.models import LoadedModel
from workbench.tasks import is_flip, load_dataset


def answerability(model: LoadedModel, dataset: str, n: int, max_new_tokens: int = 24, progress: bool = True,
                  **options) -> pd.DataFrame:
    """One row per example: its length, the dense and spliced answers, their EM / F1 / contains
    (as the example's scoring reads them) and whether the splice changed the output."""
    examples = load_dataset(dataset, n=n, tokenizer=model.tokenizer, max_positions=model.max_positions, **options)
    needed = [gold_tokens(example, model.tokenizer) for example in examples]
    cut = sum(k > max_new_tokens for k in needed)
    if cut:
        warnings.warn(f"{cut} of {len(examples)} gold answers need more than the answer limit of {max_new_tokens} "
                      f"tokens (up to {max(needed)}): their answers are cut before they can match; raise "
                      f"--max-new-tokens", WorkbenchWarning, stacklevel=2)
    rows = []
    for example in tqdm(examples, desc=f"{dataset}: dense and splice", disable=not progress):
        ctx = build_context(model, example)
        row = {"example_id": example.id, "n_tokens": ctx.layout.n_tokens}
        for name, cache in (("dense", ctx.dense), ("spliced", ctx.spliced)):
            text = ctx.answer(cache, max_new_tokens=max_new_tokens)
            em, f1, contains = example.score(text)
            row |= {f"{name}_answer": text, f"{name}_em": em, f"{name}_f1": f1, f"{name}_contains": contains}
        row["splice_flip"] = is_flip(row["spliced_answer"], row["dense_answer"])
        rows.append(row)
    return pd.DataFrame(rows)


def gold_tokens(example, tokenizer) -> int:
    """The fewest answer tokens that can match the gold: the shortest accepted answer, or with
    "all values present" scoring every value and a separator between them."""
    if not example.gold:
        return 0
    lengths = [len(tokenizer(g, add_special_tokens=False)["input_ids"]) for g in example.gold]
    return sum(lengths) + len(lengths) - 1 if example.scoring == "all" else min(lengths)


def answerability_summary(table: pd.DataFrame) -> dict:
    """Dense and splice EM with Wilson intervals, the gap, and the exact McNemar split of dense
    against splice (b = dense right where the splice is wrong)."""
    n = len(table)
    dense, spliced = table["dense_em"].astype(bool), table["spliced_em"].astype(bool)
    test = stats.mcnemar_exact(dense, spliced)
    return {"n": n, "dense_em": dense.mean(), "dense_low_high": stats.wilson_interval(int(dense.sum()), n),
            "spliced_em": spliced.mean(), "gap": dense.mean() - spliced.mean(), "b": test.b, "c": test.c,
            "p": test.p_value, "flips": float(table["splice_flip"].mean()),
            "median_tokens": float(table["n_tokens"].median())}
