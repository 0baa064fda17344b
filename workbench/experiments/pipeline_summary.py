"""What a pipeline run says, as tables: each method against Dense, the allocation line, the
tokenization tax and the warm-up blocks (BCR Tables 2, 5a, 6 and 7).

    tables = summarize_pipeline(requests, calls)   # the run's requests.parquet and calls.parquet
    tables["methods"], tables["tax"], tables["warmup"]

Accuracy is the share of requests whose final answer is correct by `score` ("contains" by
default: some accepted answer appears in it; "em" for exact match). b/c count the discordant
requests (b: the reference right and the method wrong), with exact McNemar p. A flip is a final
answer that differs from the reference's after normalization: it needs no gold. The tables of
`summarize_pipeline` read the requests every method finished (a run resumed with more methods may
hold others).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.experiments.summary import summarize
from workbench.runstore import SweepRun
from workbench.stats import mcnemar_exact, wilson_interval
from workbench.tasks import is_flip

REFERENCE = "chat-template"  # BCR's Dense: the whole prompt tokenized as one text
ANCHOR = "kvcomm"  # the allocation line runs through the reference and this method
BLOCKS = 5


def _wide(requests: pd.DataFrame, column: str) -> pd.DataFrame:
    """[request index, method] of one column, over the requests every method finished."""
    wide = requests.pivot(index="index", columns="method", values=column)
    return wide.dropna()


def summarize_pipeline(requests: pd.DataFrame, calls: pd.DataFrame, reference: str | None = None,
                       anchor: str = ANCHOR, score: str = "contains") -> dict[str, pd.DataFrame]:
    """The summary tables of one pipeline run (see the module docstring)."""
    if requests.empty:
        raise WorkbenchError("the pipeline run holds no finished request")
    methods = list(dict.fromkeys(requests["method"]))
    reference = reference or (REFERENCE if REFERENCE in methods else methods[0])
    if reference not in methods:
        raise WorkbenchError(f"reference method {reference!r} is not in the run ({', '.join(methods)})")
    correct = _wide(requests, score).astype(bool)
    if correct.empty:
        raise WorkbenchError(f"no request was finished by every method ({', '.join(methods)}); run the same "
                             f"command again to finish them")
    answers = _wide(requests, "answer").loc[correct.index]
    # every table reads the requests every method finished, as the accuracies do
    requests, calls = (t[t["index"].isin(correct.index)] for t in (requests, calls))
    reuse = calls.groupby("method")["reused"].mean()
    rows = []
    for method in methods:
        ok = correct[method].to_numpy()
        low, high = wilson_interval(int(ok.sum()), len(ok))
        flips = [is_flip(a, r) for a, r in zip(answers[method], answers[reference])]
        row = {"method": method, "n": len(ok), "reuse": float(reuse.get(method, 0.0)), "acc": float(ok.mean()),
               "acc_low": low, "acc_high": high, "flip_rate": float(np.mean(flips))}
        for other, tag in ((reference, "ref"), (anchor, "anchor")):
            if other in correct and other != method:
                test = mcnemar_exact(correct[other].to_numpy(), ok)
                row.update({f"b_{tag}": test.b, f"c_{tag}": test.c, f"p_{tag}": test.p_value})
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in [c for c in table.columns if c[:2] in ("b_", "c_")]:
        table[column] = table[column].astype("Int64")  # counts; <NA> where a method meets itself
    return {"methods": _allocation_line(table, reference, anchor), "tax": _tax(table, calls),
            "warmup": _warmup(requests, calls, [m for m in (reference, anchor) if m in methods], score)}


def _allocation_line(table: pd.DataFrame, reference: str, anchor: str) -> pd.DataFrame:
    """Eq. 3: the line through the reference (reuse 0) and the anchor method; each method's
    predicted accuracy at its reuse rate and its residual (nan without the anchor or its reuse)."""
    by = table.set_index("method")
    slope = math.nan
    if anchor in by.index and by.loc[anchor, "reuse"] > 0:
        slope = (by.loc[reference, "acc"] - by.loc[anchor, "acc"]) / by.loc[anchor, "reuse"]
    table = table.copy()
    table["line_pred"] = by.loc[reference, "acc"] - slope * table["reuse"]
    table["line_resid"] = table["acc"] - table["line_pred"]
    return table


def _tax(table: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Table 5a's split: template − token-matched (tokenization) and token-matched − KVComm
    (approximation), with the share of calls whose two token sequences differ."""
    acc = table.set_index("method")["acc"]
    need = ("chat-template", "token-matched", ANCHOR)
    if not all(m in acc.index for m in need):
        return pd.DataFrame()
    differ = calls[calls["method"] == "token-matched"]["template_differs"]
    return pd.DataFrame([{"chat_template": acc["chat-template"], "token_matched": acc["token-matched"],
                          "kvcomm": acc[ANCHOR], "gap": acc["chat-template"] - acc[ANCHOR],
                          "tokenization": acc["chat-template"] - acc["token-matched"],
                          "approximation": acc["token-matched"] - acc[ANCHOR],
                          "calls_differ": float(differ.mean()) if len(differ) else math.nan}])


def _warmup(requests: pd.DataFrame, calls: pd.DataFrame, methods: list[str], score: str) -> pd.DataFrame:
    """Table 6: reuse rate and accuracy in BLOCKS consecutive blocks of requests, in run order."""
    n = int(requests["index"].max()) + 1
    edges = np.linspace(0, n, min(BLOCKS, n) + 1).round().astype(int)
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        row = {"block": f"{lo + 1}-{hi}"}
        for method in methods:
            req = requests[(requests["method"] == method) & requests["index"].between(lo, hi - 1)]
            cl = calls[(calls["method"] == method) & calls["index"].between(lo, hi - 1)]
            row[f"acc_{method}"] = float(req[score].mean()) if len(req) else math.nan
            row[f"reuse_{method}"] = float(cl["reused"].mean()) if len(cl) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def repair_summary(repair: pd.DataFrame, reference: str = "random") -> pd.DataFrame:
    """Repair on top of the predicted final calls (BCR §3), as a sweep's summary: one row per
    selector and budget, exact match and flips against the call's token-matched Dense, McNemar
    against the five-draw coin (`reference`). `repair`: the run's repair.parquet."""
    if repair.empty:
        return pd.DataFrame()
    outcomes = repair.assign(example_id=repair["method"] + "/" + repair["index"].astype(str))
    none = outcomes[outcomes["selector"] == "none"].groupby("example_id")["em"].first()
    full = outcomes[outcomes["selector"] == "full"].groupby("example_id")["em"].first()
    examples = pd.DataFrame({"example_id": none.index, "dense_em": full.reindex(none.index).to_numpy(),
                             "spliced_em": none.to_numpy()})
    run = SweepRun(Path("."), {}, examples, outcomes)
    return summarize(run, reference=reference if reference in set(outcomes["selector"]) else None)


# why a gated call was served as it was (the calls table keeps each call's highest slot entropy, its
# highest threshold and its fewest anchors; a call is reused only when every slot's gate says so)
REUSED_UNDER = "reused: entropy at or under the threshold"
REUSED_KEPT = ("reused though a slot's gate said no: the pool already holds this agent's Δ for that message "
               "(a kept decision)")
DENSE_OVER = "dense: entropy over the threshold"
DENSE_FEW = "dense under the threshold: a slot had fewer than 2 anchors (no entropy there)"
DENSE_POLICY = "dense under the threshold: the method's call policy prefills this agent densely"
DENSE_DRAFT = "dense under the threshold: the served draft's confidence fell below OpenGate's bar"
DENSE_OTHER = "dense under the threshold: another slot's own threshold (γ·log2 n, fewer anchors) refused"
POLICY_METHODS = ("protect-root", "protect-leaf", "coin-alloc")  # kvcomm_result(force_dense=...) by agent


def gate_reasons(calls: pd.DataFrame) -> pd.Series:
    """For each gated call (max_entropy known), why it was reused or prefilled densely, in words
    (one of the REUSED_* / DENSE_* reasons), read from its row of the calls table."""
    under = calls["max_entropy"] <= calls["threshold"]
    reused = calls["reused"].astype(bool)
    few = calls["min_anchors"] < 2
    policy = calls["method"].isin(POLICY_METHODS)
    drafted = calls["confidence"].notna() if "confidence" in calls else pd.Series(False, index=calls.index)
    reason = np.select([reused & under & ~few, reused, ~under, drafted, few, policy],
                       [REUSED_UNDER, REUSED_KEPT, DENSE_OVER, DENSE_DRAFT, DENSE_FEW, DENSE_POLICY], DENSE_OTHER)
    return pd.Series(reason, index=calls.index)
