"""Benchmarks as ratios measured in one process (never timed tests). They return tables;
`kvwb bench` prints them.

`repair_ratios`: wall time of repairing a budget b of the reused rows divided by the dense
prefill of the same context, for several context lengths. Both are timed interleaved after
a warm-up and summarized by their medians, so machine noise hits both sides alike.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench import threads
from workbench.context import build_context, context_of_length
from workbench.models import LoadedModel
from workbench.selectors import choose, parse_selector, random_scores
from workbench.splice import prefill
from workbench.tasks import synthetic_examples


COIN = parse_selector("random:single")  # the rows each budget repairs: a seeded coin's top rows


def _time(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def repair_ratios(model: LoadedModel, lengths=(512, 1024, 2048), budgets=(0.05, 0.1, 0.2, 0.4, 1.0),
                  repeats: int = 3, seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """One row per (length asked for, b): the context's tokens, median seconds of repair(b) and of
    the dense prefill, and their ratio."""
    rows = []
    for n in tqdm(lengths, desc="context lengths", disable=not progress):
        ctx = context_of_length(model, n, seed)
        ids = ctx.layout.ids
        pool, coin = ctx.reused_positions, random_scores(ctx.n_reused, seed)  # [n_reused] each
        chosen = {b: pool[choose(COIN, coin, b, pool)[0]] for b in budgets}
        dense_fn = lambda: prefill(model, ids)  # noqa: E731
        dense_fn(), ctx.repair(chosen[budgets[0]])  # warm-up
        dense_t, repair_t = [], {b: [] for b in budgets}
        for _ in range(repeats):
            dense_t.append(_time(dense_fn))
            for b in budgets:
                repair_t[b].append(_time(lambda: ctx.repair(chosen[b])))
        dense_med = statistics.median(dense_t)
        for b in budgets:
            med = statistics.median(repair_t[b])
            rows.append({"length": n, "n_tokens": ctx.layout.n_tokens, "budget": b, "rows": len(chosen[b]),
                         "repair_s": med, "dense_s": dense_med, "ratio": med / dense_med})
    return pd.DataFrame(rows)


def repair_wide(table: pd.DataFrame) -> pd.DataFrame:
    """`repair_ratios` laid out for reading: n down, b across (ratios), then the dense prefill seconds."""
    wide = table.pivot(index=["length", "n_tokens"], columns="budget", values="ratio")
    wide.columns = [f"{b:g}" for b in wide.columns]
    wide["dense prefill (s)"] = table.groupby(["length", "n_tokens"])["dense_s"].first()
    return wide.reset_index(level="length", drop=True).rename_axis("n \\ b").reset_index()


def saliency_ratios(model: LoadedModel, lengths=(512, 1024, 2048), repeats: int = 3,
                    seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """CADENCE-Grad scoring (greedy y_hat + forward + backward) / dense prefill, per length."""
    from workbench.signals.saliency import decision_saliency

    rows = []
    for n in tqdm(lengths, desc="context lengths", disable=not progress):
        ctx = context_of_length(model, n, seed)
        dense_fn = lambda: prefill(model, ctx.layout.ids)  # noqa: E731
        sal_fn = lambda: decision_saliency(ctx)  # noqa: E731
        dense_fn(), sal_fn()  # warm-up
        dense_t, sal_t = [], []
        for _ in range(repeats):
            dense_t.append(_time(dense_fn))
            sal_t.append(_time(sal_fn))
        answer_len = len(decision_saliency(ctx).answer_ids)
        rows.append({"n_tokens": ctx.layout.n_tokens, "answer_tokens": answer_len,
                     "saliency_s": statistics.median(sal_t), "dense_s": statistics.median(dense_t)})
    table = pd.DataFrame(rows)
    table["ratio"] = table["saliency_s"] / table["dense_s"]
    return table


def signal_sharing(model: LoadedModel, lengths=(None,), examples: int = 3, repeats: int = 3,
                   seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """The draft, the question attention and CADENCE's saliency as a Diagnosis computes them (one
    `SignalSet`: the suffix runs over the splice once) / each on its own (three suffix prefills),
    per example: synthetic examples as generated (length None) or contexts of a given length."""
    from workbench.signals import SignalSet
    from workbench.signals.attention import draft_attention, question_attention
    from workbench.signals.saliency import decision_saliency

    def separate(ctx):
        draft_attention(ctx, k=2), question_attention(ctx), decision_saliency(ctx)

    def shared(ctx):
        signals = SignalSet(ctx)
        signals["draft"], signals["question"], signals["saliency"]

    contexts = [build_context(model, ex) for ex in synthetic_examples(examples, seed)] if None in lengths else []
    contexts += [context_of_length(model, n, seed) for n in lengths if n is not None]
    rows = []
    for ctx in tqdm(contexts, desc="contexts", disable=not progress):
        separate(ctx), shared(ctx)  # warm-up
        times = {"separate": [], "shared": []}
        for _ in range(repeats):
            times["separate"].append(_time(lambda: separate(ctx)))
            times["shared"].append(_time(lambda: shared(ctx)))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append({"n_tokens": ctx.layout.n_tokens, "suffix_tokens": len(ctx.suffix_ids),
                     "separate_s": med["separate"], "shared_s": med["shared"],
                     "ratio": med["shared"] / med["separate"]})
    return pd.DataFrame(rows)


def diagnosis_floor(d) -> dict[str, float]:
    """The token-forwards a Diagnosis cannot avoid, as multiples of dense (context + suffix + answer).

    Each distinct cell (a row set, the empty one for the splice) must run its recomputed rows,
    the suffix and the answer tokens; the signals add the rows of their own passes.
    """
    n_suffix = d.context.n_tokens - d.context.segments[-1]["start"]
    answer = len(d.answers.dense.token_ids) + 1
    cells = {tuple(p) for p in d.selections["positions"]} | {()}
    cell_rows = sum(len(c) + n_suffix + answer for c in cells)
    n_layers = int(d.model.get("n_layers", 1))
    costs = d.tables.get("signal_costs")
    signal_rows = float(costs["layer_tokens"].sum()) / n_layers if costs is not None and len(costs) else 0.0
    dense = d.context.n_tokens + answer
    return {"cells": len(cells), "floor_cells": cell_rows / dense, "floor": (cell_rows + signal_rows) / dense}


def diagnosis_ratio(model: LoadedModel, examples: int = 3, lengths=(None,), budgets=(0.1, 0.2, 0.3, 0.5),
                    seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """A whole Diagnosis (every default selector at 4 budgets, no oracle-patch, no attribution
    check) / (dense prefill + greedy answer) on synthetic examples, next to its floor
    (`diagnosis_floor`). A length of None takes the examples as generated (about 200 tokens);
    a number pads them to that many tokens."""
    from workbench.decode import greedy_answer
    from workbench.diagnosis import DiagnoseConfig, diagnose
    from workbench.selectors import default_selectors

    config = DiagnoseConfig.of(selectors=default_selectors(), budgets=tuple(budgets), seed=seed, attribution=False)
    rows = []
    jobs = [(length, i) for length in lengths for i in range(examples)]
    for length, i in tqdm(jobs, desc="examples", disable=not progress):
        ctx = (build_context(model, synthetic_examples(examples, seed=seed)[i]) if length is None
               else context_of_length(model, length, seed + i))
        base = _time(lambda: greedy_answer(model, prefill(model, ctx.layout.ids[: ctx.layout.suffix_start]),
                                           ctx.suffix_ids))
        diagnose(model, ctx.example, config, progress=False)  # warm-up
        t_diag = _time(lambda: diagnose(model, ctx.example, config, progress=False))
        d = diagnose(model, ctx.example, config, progress=False)
        floor = diagnosis_floor(d)
        rows.append({"example": ctx.example.id, "n_tokens": ctx.layout.n_tokens, "cells": floor["cells"],
                     "dense_answer_s": base, "diagnosis_s": t_diag, "ratio": t_diag / base,
                     "floor": floor["floor"], "ratio_to_floor": t_diag / base / floor["floor"],
                     "repairs_s": d.timing.repairs_s, "signals_s": d.timing.signals_s})
    return pd.DataFrame(rows)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else _cpu_name()
    return (f"{platform.machine()} {device}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({threads.describe()}), Python {platform.python_version()}")
