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


def saliency_ratios(model: wb.LoadedModel, lengths=(512, 1024, 2048), repeats: int = 3,
                    seed: int = 0) -> pd.DataFrame:
    """CADENCE-Grad scoring (greedy y_hat + forward + backward) / dense prefill, per length."""
    from workbench.signals.saliency import decision_saliency

    rows = []
    for n in tqdm(lengths, desc="context lengths"):
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


def diagnosis_ratio(model: wb.LoadedModel, examples: int = 3, budgets=(0.1, 0.2, 0.3, 0.5),
                    seed: int = 0) -> pd.DataFrame:
    """Whole Diagnosis (every selector, 4 budgets) / (dense prefill + greedy answer), per example,
    with and without the expensive oracle-patch selector."""
    from workbench.decode import greedy_answer
    from workbench.diagnose import DEFAULT_SELECTORS, diagnose

    rows = []
    for example in tqdm(synthetic_examples(examples, seed=seed), desc="examples"):
        ctx = wb.build_context(model, example)
        base = _time(lambda: greedy_answer(model, prefill(model, ctx.layout.ids[: ctx.layout.suffix_start]),
                                           ctx.suffix_ids))
        cheap = [s for s in DEFAULT_SELECTORS if s != "oracle-patch"]
        t_cheap = _time(lambda: diagnose(model, example, cheap, budgets, seed=seed, progress=False))
        t_all = _time(lambda: diagnose(model, example, DEFAULT_SELECTORS, budgets, seed=seed, progress=False))
        rows.append({"example": example.id, "n_tokens": ctx.layout.n_tokens, "dense_answer_s": base,
                     "diagnosis_s": t_cheap, "ratio": t_cheap / base,
                     "with_oracle_s": t_all, "ratio_with_oracle": t_all / base})
    return pd.DataFrame(rows)


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else _cpu_name()
    return (f"{platform.machine()} {device}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}")


def table_markdown(table: pd.DataFrame, model: wb.LoadedModel, command: str) -> str:
    """Any benchmark table as markdown with the command and the machine."""
    info = model.describe()
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join([f"`{command}`", "", f"model {info['name']} ({info['dtype']}, {info['device']}); "
                      f"machine: {machine()}", "", *lines])


def _cell(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def to_markdown(table: pd.DataFrame, model: wb.LoadedModel, command: str) -> str:
    """The repair ratio table as markdown (n down, b across), with the command and the machine."""
    wide = table.pivot(index="n_tokens", columns="budget", values="ratio")
    header = "| n \\ b | " + " | ".join(f"{b:g}" for b in wide.columns) + " | dense prefill (s) |"
    sep = "|" + "---|" * (len(wide.columns) + 2)
    dense = table.groupby("n_tokens")["dense_s"].first()
    lines = [f"| {n} | " + " | ".join(f"{v:.3f}" for v in wide.loc[n]) + f" | {dense[n]:.2f} |"
             for n in wide.index]
    info = model.describe()
    return "\n".join([f"`{command}`", "", f"model {info['name']} ({info['dtype']}, {info['device']}); "
                      f"machine: {machine()}", "", header, sep, *lines])
