"""Where a model answers: dense and splice accuracy on the first n examples of a data set.

    table = answerability(model, "ruler:niah_single", n=30, target_tokens=2048)
    answerability_summary(table)               # dense EM, splice EM, the gap, McNemar b / c of dense vs splice
    answerability_summary(table, "retrieved")  # the same on the retrieval measure (RULER's string match)

Only the two answers a gold-based study needs (no signals, no repairs): each example is spliced,
prefilled densely, and answered greedily from both caches. It says on which task, length and
passage setting a model gets the dense answer right often enough for the splice to cost it
something, before any selector study is pre-registered there. Beside exact match it reads the
task's retrieval measure (`Example.retrieved`: did the answer name the evidence, however it ended)
and whether the splice's answer ran on past the point where dense's ended (`graded.ran_on`): an
exact-match gap made of run-ons is a gap in stopping, not in retrieval.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from workbench import stats
from workbench.context import build_context
from workbench.diagnosis.graded import ran_on
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.models import LoadedModel
from workbench.tasks import is_flip, load_dataset


def answerability(model: LoadedModel, dataset: str, n: int, max_new_tokens: int = 24, progress: bool = True,
                  **options) -> pd.DataFrame:
    """One row per example: its length, the dense and spliced answers, their EM / F1 / contains (as the
    example's scoring reads them), retrieval measure and length in tokens, whether the splice changed
    the output and whether its answer ran on past dense's."""
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
            answer = ctx.generate(cache, max_new_tokens=max_new_tokens)
            em, f1, contains = example.score(answer.text)
            row |= {f"{name}_answer": answer.text, f"{name}_em": em, f"{name}_f1": f1, f"{name}_contains": contains,
                    f"{name}_retrieved": example.retrieved(answer.text), f"{name}_answer_tokens": len(answer.token_ids)}
        row["splice_flip"] = is_flip(row["spliced_answer"], row["dense_answer"])
        row["spliced_ran_on"] = ran_on(row["spliced_answer"], row["spliced_answer_tokens"], row["dense_answer"],
                                       row["dense_answer_tokens"])
        rows.append(row)
    return pd.DataFrame(rows)


def gold_tokens(example, tokenizer) -> int:
    """The fewest answer tokens that can match the gold: the shortest accepted answer, or with
    "all values present" scoring every value and a separator between them."""
    if not example.gold:
        return 0
    lengths = [len(tokenizer(g, add_special_tokens=False)["input_ids"]) for g in example.gold]
    return sum(lengths) + len(lengths) - 1 if example.scoring == "all" else min(lengths)


MEASURES = ("em", "contains", "retrieved")


def answerability_summary(table: pd.DataFrame, measure: str = "em") -> dict:
    """Dense and splice `measure` (em, contains or retrieved) with the dense rate's interval, the gap,
    and the paired test of dense against splice: exact McNemar (b = dense right where the splice is
    wrong) on 0/1 values, the exact sign-flip test where a measure is graded (RULER's string_match_all
    over several values); `ran_on` is the share of examples whose splice answer ran on past dense's.
    The keys keep their names whatever the measure (`dense_em` is dense's `measure`)."""
    if measure not in MEASURES:
        raise WorkbenchError(f"answerability reads {', '.join(MEASURES)}, not {measure!r}")
    if f"dense_{measure}" not in table:
        raise WorkbenchError(f"this table has no dense_{measure} column: it was made before that measure was "
                             "recorded; run kvwb answerability again")
    n = len(table)
    dense, spliced = table[f"dense_{measure}"].astype(float), table[f"spliced_{measure}"].astype(float)
    if dense.isin((0.0, 1.0)).all() and spliced.isin((0.0, 1.0)).all():
        test = stats.mcnemar_exact(dense.astype(bool), spliced.astype(bool))
        b, c, p, interval = test.b, test.c, test.p_value, stats.wilson_interval(int(dense.sum()), n)
    else:
        b, c, p = None, None, stats.sign_flip_test(dense.to_numpy(), spliced.to_numpy()).p_value
        interval = stats.paired_bootstrap_ci(dense.to_numpy(), np.zeros(n))[1:]
    return {"measure": measure, "n": n, "dense_em": dense.mean(), "dense_low_high": interval,
            "spliced_em": spliced.mean(), "gap": dense.mean() - spliced.mean(), "b": b, "c": c, "p": p,
            "flips": float(table["splice_flip"].mean()),
            "ran_on": float(table["spliced_ran_on"].mean()) if "spliced_ran_on" in table else float("nan"),
            "median_tokens": float(table["n_tokens"].median())}
