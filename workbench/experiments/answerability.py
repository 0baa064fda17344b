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

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from workbench import stats
from workbench.checks import check_int
from workbench.context import build_context
from workbench.diagnosis.graded import ran_on
from workbench.errors import WorkbenchError, WorkbenchWarning
from workbench.models import LoadedModel
from workbench.tasks import is_flip, load_dataset


def answerability(model: LoadedModel, dataset: str, n: int, max_new_tokens: int = 24, progress: bool = True,
                  checkpoint: str | Path | None = None, stop_at_newline: bool = True, **options) -> pd.DataFrame:
    """One row per example: its length, the dense and spliced answers, their EM / F1 / contains (as the
    example's scoring reads them), retrieval measure and length in tokens, whether the splice changed
    the output and whether its answer ran on past dense's. `checkpoint` (a JSON-lines file): each
    finished row is appended to it, and a call with the same arguments reads the rows it holds back
    instead of answering those examples again (`Checkpoint`); the table is the same either way.
    `stop_at_newline=False`: each answer decoded past its first line break and scored whole (`StopRule`)."""
    check_int(max_new_tokens, "max_new_tokens")  # an answer of no token must mean an end of turn first
    examples = load_dataset(dataset, n=n, tokenizer=model.tokenizer, max_positions=model.max_positions, **options)
    needed = [gold_tokens(example, model.tokenizer) for example in examples]
    cut = sum(k > max_new_tokens for k in needed)
    if cut:
        warnings.warn(f"{cut} of {len(examples)} gold answers need more than the answer limit of {max_new_tokens} "
                      f"tokens (up to {max(needed)}): their answers are cut before they can match; raise "
                      f"--max-new-tokens", WorkbenchWarning, stacklevel=2)
    held = Checkpoint(checkpoint, {"dataset": dataset, "n": n, "max_new_tokens": max_new_tokens,
                                   "options": {k: str(v) for k, v in sorted(options.items())},
                                   "model": model.describe(), **({} if stop_at_newline else {"stop_at_newline": False})}
                      ) if checkpoint is not None else None
    done = held.rows() if held is not None else {}
    rows = []
    for example in tqdm(examples, desc=f"{dataset}: dense and splice", disable=not progress):
        if example.id in done:
            rows.append(done[example.id])
            continue
        ctx = build_context(model, example)
        row = {"example_id": example.id, "n_tokens": ctx.layout.n_tokens}
        for name, cache in (("dense", ctx.dense), ("spliced", ctx.spliced)):
            answer = ctx.generate(cache, max_new_tokens=max_new_tokens, stop_at_newline=stop_at_newline)
            em, f1, contains = example.score(answer.text)
            row |= {f"{name}_answer": answer.text, f"{name}_em": em, f"{name}_f1": f1, f"{name}_contains": contains,
                    f"{name}_retrieved": example.retrieved(answer.text), f"{name}_answer_tokens": len(answer.token_ids)}
        row["splice_flip"] = is_flip(row["spliced_answer"], row["dense_answer"])
        row["spliced_ran_on"] = ran_on(row["spliced_answer"], row["spliced_answer_tokens"], row["dense_answer"],
                                       row["dense_answer_tokens"])
        rows.append(row)
        if held is not None:
            held.add(row)
    table = pd.DataFrame(rows)
    if not stop_at_newline:  # the table (and its CSV) says which rule scored it, every row; absent: the first line
        table["answers_scored"] = "whole"
    return table


class Checkpoint:
    """A JSON-lines file of finished rows, its first line the arguments that made them: a call with
    other arguments is refused (one line), and a torn last line (a process killed mid-write) is
    dropped. Rows hold Python values only, so a table read back equals the one computed."""

    def __init__(self, path: str | Path, header: dict) -> None:
        self.path, self.header = Path(path), json.loads(json.dumps(header, default=str))
        if self.path.is_file() and self.path.stat().st_size:
            first = self.path.read_text(encoding="utf-8").split("\n", 1)[0]
            try:
                kept = json.loads(first)
            except json.JSONDecodeError:
                kept = None
            if kept != self.header:
                raise WorkbenchError(f"{self.path} holds rows of another command than this one (its first line: "
                                     f"{first[:200]}); remove it or write the table elsewhere")
        else:
            self._write(json.dumps(self.header) + "\n", "w")

    def rows(self) -> dict[str, dict]:
        """The rows kept, by example id."""
        lines = self.path.read_text(encoding="utf-8").split("\n")[1:]
        kept = {}
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the empty tail, or a line torn by a kill
            kept[row["example_id"]] = row
        return kept

    def add(self, row: dict) -> None:
        self._write(json.dumps({k: _plain(v) for k, v in row.items()}) + "\n", "a")

    def _write(self, text: str, mode: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)  # the --csv's folder, made as the CSV's writer would
        with open(self.path, mode, encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())


def _plain(value):
    """A row's value as JSON keeps it: numpy scalars as the Python value they hold (a float32 would
    come back as another float64, so it is refused rather than rounded silently)."""
    if isinstance(value, np.generic):
        if isinstance(value, np.floating) and value.dtype != np.float64:
            raise WorkbenchError(f"a checkpoint keeps float64 values; got {value.dtype}")
        return value.item()
    return value


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
