"""Benchmarks as ratios measured in one process (never timed tests).

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

import workbench as wb
from workbench.kv import prefill
from workbench.repair import budget_rows
from workbench.selectors.layouts import random_scores
from workbench.tasks import synthetic_examples


def context_of_length(model: wb.LoadedModel, n_tokens: int, seed: int = 0) -> wb.Context:
    """A synthetic example padded with filler to about `n_tokens` tokens, built into a Context."""
    words = max(8, int(n_tokens / 1.5))
    for _ in range(4):
        example = synthetic_examples(1, seed=seed, target_words=words)[0]
        layout_len = wb.layout.build_layout(model.tokenizer, example).n_tokens
        if abs(layout_len - n_tokens) <= 0.03 * n_tokens:
            break
        words = max(8, int(words * n_tokens / layout_len))
    return wb.build_context(model, example)


def _time(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def repair_ratios(model: wb.LoadedModel, lengths=(512, 1024, 2048), budgets=(0.05, 0.1, 0.2, 0.4, 1.0),
                  repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """One row per (n, b): median seconds of repair(b) and of the dense prefill, and their ratio."""
    rows = []
    for n in tqdm(lengths, desc="context lengths"):
        ctx = context_of_length(model, n, seed)
        ids = ctx.layout.ids
        order = torch.argsort(random_scores(ctx.n_reused, seed), descending=True)
        chosen = {b: ctx.reused_positions[order[: budget_rows(b, ctx.n_reused)]] for b in budgets}
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
            rows.append({"n_tokens": ctx.layout.n_tokens, "budget": b, "rows": len(chosen[b]),
                         "repair_s": med, "dense_s": dense_med, "ratio": med / dense_med})
    return pd.DataFrame(rows)


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    return (f"{platform.machine()} {device}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}")


def to_markdown(table: pd.DataFrame, model: wb.LoadedModel, command: str) -> str:
    """The ratio table as markdown (n down, b across), with the command and the machine."""
    wide = table.pivot(index="n_tokens", columns="budget", values="ratio")
    header = "| n \\ b | " + " | ".join(f"{b:g}" for b in wide.columns) + " | dense prefill (s) |"
    sep = "|" + "---|" * (len(wide.columns) + 2)
    dense = table.groupby("n_tokens")["dense_s"].first()
    lines = [f"| {n} | " + " | ".join(f"{v:.3f}" for v in wide.loc[n]) + f" | {dense[n]:.2f} |"
             for n in wide.index]
    info = model.describe()
    return "\n".join([f"`{command}`", "", f"model {info['name']} ({info['dtype']}, {info['device']}); "
                      f"machine: {machine()}", "", header, sep, *lines])
