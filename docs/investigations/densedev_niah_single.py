"""Why DenseDev trails CacheBlend on Gemma 3 270M, RULER niah_single at 2048 tokens (issue 43, item 4).

    KVWB_THREADS=1 nice -n 5 .venv/bin/python docs/investigations/densedev_niah_single.py run --n 10 --out OUT.jsonl
    .venv/bin/python docs/investigations/densedev_niah_single.py table OUT.jsonl

`run` diagnoses examples 0..n-1 (resuming: ids already in OUT are skipped) with densedev,
densedev-layer (each layer's squared deviation over its mean dense row norm squared,
`signals.deviation.densedev_scores(norm="layer")`), densedev-v1 (the exact ||dV||^2 at layer 1, the
quantity CacheBlend approximates at its check layer; both registered here), cacheblend, random and
none at b = 0.05 and 0.2, and writes one JSON line per example: evidence recall (the queried needle
sentence's rows), answers (em, contains), each layer's share of the score, which rows the top
picks are. `table` prints the markdown tables of docs/investigations/densedev_niah_single.md.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import torch

SELECTORS = ("none", "densedev", "densedev-layer", "densedev-v1", "cacheblend", "random")
SCORED = ("densedev", "densedev-layer", "densedev-v1", "cacheblend")
BUDGETS = (0.05, 0.2)
START_ROWS = 4  # a row this close to its passage's start counts as a "passage start"


def register_layer_norm() -> None:
    from workbench.selectors import register_selector
    from workbench.signals.deviation import densedev_scores, mean_row_norms

    @register_selector("densedev-layer", uses=("deviation",), needs_dense=True,
                       description="DenseDev with each layer's deviation over its mean dense row norm")
    def densedev_layer(signals):
        ctx = signals.ctx
        return densedev_scores(signals["deviation"], "layer", mean_row_norms(ctx.dense, ctx.reused_positions))

    @register_selector("densedev-v1", uses=("deviation",), needs_dense=True,
                       description="the exact ||dV||^2 at layer 1 alone (CacheBlend's quantity, from dense)")
    def densedev_v1(signals):
        return signals["deviation"][("v", "l2")][1].square()  # [n_reused]


def needle_rows(ctx, tokenizer, gold: str) -> tuple[int, list[int]]:
    """(passage index, absolute positions) of the queried needle sentence's tokens."""
    pattern = re.compile(r"One of the special magic numbers for .+? is: " + re.escape(gold) + r"\.")
    for seg in ctx.layout.passages:
        ids = ctx.layout.ids[seg.start:seg.end].tolist()
        text = tokenizer.decode(ids)
        m = pattern.search(text)
        if m is None:
            continue
        ends = [len(tokenizer.decode(ids[:k + 1])) for k in range(len(ids))]  # char end of token k
        starts = [0] + ends[:-1]
        rows = [seg.start + k for k in range(len(ids)) if starts[k] < m.end() and ends[k] > m.start()]
        return seg.index, rows
    raise RuntimeError(f"needle for {gold!r} not found")


def kind_of(token: str) -> str:
    t = token.strip()
    if not t:
        return "whitespace"
    return "punct" if not any(c.isalnum() for c in t) else "word"


def describe_rows(ctx, rows: list[int], evidence: set[int]) -> dict:
    """Where a selection's rows lie: passage starts, token kinds, evidence, the commonest tokens."""
    offsets, tokens, passage = ctx.layout.segment_offsets(), ctx.layout.tokens, ctx.layout.segment_ids()
    kinds = [kind_of(tokens[r]) for r in rows]
    common: dict[str, int] = {}
    for r in rows:
        common[tokens[r]] = common.get(tokens[r], 0) + 1
    n = max(len(rows), 1)
    return {"n": len(rows), "start_share": sum(int(offsets[r]) < START_ROWS for r in rows) / n,
            "first_row_share": sum(int(offsets[r]) == 0 for r in rows) / n,
            "punct_share": kinds.count("punct") / n, "space_share": kinds.count("whitespace") / n,
            "evidence_rows": len(set(rows) & evidence),
            "passages": torch.bincount(passage[rows], minlength=len(ctx.layout.passages)).tolist(),
            "common": sorted(common.items(), key=lambda kv: -kv[1])[:6]}


def layer_profile(dev: dict, pool_idx: torch.Tensor, row_norms: dict | None) -> dict:
    """Each layer's share of the score summed over the pool rows, the V share, and for each row the
    layer that contributes most (over the pool, and over its top 5%)."""
    k2, v2 = dev[("k", "l2")][:, pool_idx].square(), dev[("v", "l2")][:, pool_idx].square()  # [layer, n_pool]
    if row_norms is not None:
        k2 = k2 / row_norms["k"].square()[:, None]
        v2 = v2 / row_norms["v"].square()[:, None]
    per = k2 + v2  # [layer, n_pool]
    total = per.sum(0)  # [n_pool]
    top = torch.sort(total, descending=True, stable=True).indices[:max(1, round(0.05 * len(total)))]
    decider_top = per[:, top].argmax(0)  # [n_top]
    return {"layer_share": (per.sum(1) / per.sum()).tolist(), "v_share": float(v2.sum() / per.sum()),
            "decider_all": torch.bincount(per.argmax(0), minlength=per.shape[0]).tolist(),
            "decider_top": torch.bincount(decider_top, minlength=per.shape[0]).tolist(),
            "top_decider_share": float((per[:, top].max(0).values / total[top]).mean())}


def layer_recall(dev: dict, pool: torch.Tensor, pool_idx: torch.Tensor, evidence: list[int]) -> dict | None:
    """Evidence recall of each layer's exact deviation alone (K + V, and V alone), top b of the pool:
    {f"{kind}@{b}": [layer]}; None when the needle is not in the pool."""
    from workbench.selectors.budget import budget_rows

    if not evidence:
        return None
    k2, v2 = dev[("k", "l2")][:, pool_idx].square(), dev[("v", "l2")][:, pool_idx].square()  # [layer, n_pool]
    out = {}
    for kind, per in (("kv", k2 + v2), ("v", v2), ("k", k2)):
        for b in BUDGETS:
            top = torch.sort(per, dim=1, descending=True, stable=True).indices[:, :budget_rows(b, len(pool))]  # [layer, r]
            out[f"{kind}@{b}"] = [len(set(pool[t].tolist()) & set(evidence)) / len(evidence) for t in top]
    return out


def one_example(model, example, coin_draws: int) -> dict:
    from workbench.context import build_context
    from workbench.diagnosis import diagnose
    from workbench.signals import SignalSet
    from workbench.signals.deviation import mean_row_norms

    t0 = time.perf_counter()
    ctx = build_context(model, example)
    d = diagnose(model, example, selectors=SELECTORS, budgets=BUDGETS, ctx=ctx, progress=False,
                 attribution=False, coin_draws=coin_draws)
    passage, evidence = needle_rows(ctx, model.tokenizer, example.gold[0])
    pool = ctx.layout.changed_positions
    in_pool = sorted(set(evidence) & set(pool.tolist()))
    out = {"id": example.id, "needle_passage": passage, "n_evidence": len(evidence), "n_evidence_in_pool": len(in_pool),
           "n_pool": len(pool), "dense": {"answer": d.answers.dense.text, "em": d.answers.dense.em,
                                          "contains": d.answers.dense.contains},
           "splice": {"answer": d.answers.spliced.text, "em": d.answers.spliced.em,
                      "contains": d.answers.spliced.contains}, "selections": {}}
    oc = d.outcomes
    for label in SELECTORS[1:]:
        for b in BUDGETS:
            rows = oc[(oc["selector"] == label) & ((oc["budget"] - b).abs() < 1e-9)]
            draws = sorted(rows["draw"].dropna().astype(int).unique()) if rows["draw"].notna().any() else [0]
            picks = [d.picks(label, b, draw) for draw in draws]
            recall = [len(set(p) & set(in_pool)) / len(in_pool) if in_pool else None for p in picks]
            out["selections"][f"{label}@{b}"] = {
                "em": float(rows["em"].mean()), "contains": float(rows["contains"].mean()),
                "answers": rows["answer"].tolist()[:1], "recall": None if not in_pool else float(np.mean(recall)),
                **({"rows": describe_rows(ctx, picks[0], set(evidence))} if label in SCORED else {})}
    dev = SignalSet(ctx)["deviation"]  # the record diagnose read: reused order
    index = {int(p): i for i, p in enumerate(ctx.reused_positions.tolist())}
    pool_idx = torch.tensor([index[int(p)] for p in pool.tolist()])
    norms = mean_row_norms(ctx.dense, ctx.reused_positions)
    out["profile"] = {"none": layer_profile(dev, pool_idx, None), "layer": layer_profile(dev, pool_idx, norms)}
    out["row_norms"] = {k: v.tolist() for k, v in norms.items()}
    out["layer_recall"] = layer_recall(dev, pool, pool_idx, in_pool)
    out["seconds"] = time.perf_counter() - t0
    return out


def run(args) -> None:
    from workbench.models import load_model
    from workbench.tasks import load_dataset

    register_layer_norm()
    model = load_model("gemma3-270m")
    examples = load_dataset("ruler:niah_single", n=args.n, tokenizer=model.tokenizer,
                            max_positions=model.max_positions, target_tokens=2048)
    out = Path(args.out)
    done = {json.loads(line)["id"] for line in out.read_text().splitlines()} if out.exists() else set()
    for example in examples[args.start:]:
        if example.id in done:
            continue
        record = one_example(model, example, args.coin_draws)
        with out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"example {example.id}: {record['seconds']:.0f} s", flush=True)


def gap_closed(recs: list, label: str, b: float, measure: str) -> float:
    """Share of the dense-vs-splice gap a selection closes, over the examples: (sel - splice) / (dense - splice)."""
    sel = np.mean([r["selections"][f"{label}@{b}"][measure] for r in recs])
    dense, splice = (np.mean([r[k][measure] for r in recs]) for k in ("dense", "splice"))
    return (sel - splice) / (dense - splice) if dense != splice else float("nan")


def table(args) -> None:
    """The markdown tables of the findings, from the JSON lines."""
    recs = [json.loads(line) for line in Path(args.out).read_text().splitlines()]
    n_pooled = sum(1 for r in recs if r["n_evidence_in_pool"])
    mean = {m: {k: np.mean([r[k][m] for r in recs]) for k in ("dense", "splice")} for m in ("em", "contains")}
    print(f"n = {len(recs)} (queried needle in the pool on {n_pooled}); dense em {mean['em']['dense']:.2f}, contains "
          f"{mean['contains']['dense']:.2f}; splice em {mean['em']['splice']:.2f}, contains {mean['contains']['splice']:.2f}\n")
    print("| selector | b | evidence recall | em | em gap closed | contains | contains gap closed | "
          "rows at a passage start | punct |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in SELECTORS[1:]:
        for b in BUDGETS:
            s = [r["selections"][f"{label}@{b}"] for r in recs]
            rec = [x["recall"] for x in s if x["recall"] is not None]
            rows = [x["rows"] for x in s if "rows" in x]
            cells = [f"{np.mean([x[k] for x in rows]):.2f}" if rows else "–" for k in ("start_share", "punct_share")]
            print(f"| {label} | {b} | {np.mean(rec):.2f} | {np.mean([x['em'] for x in s]):.2f} | "
                  f"{gap_closed(recs, label, b, 'em'):.2f} | {np.mean([x['contains'] for x in s]):.2f} | "
                  f"{gap_closed(recs, label, b, 'contains'):.2f} | " + " | ".join(cells) + " |")
    print("\nshare of the b = 0.05 rows in each passage (0: the first, exact by construction, not in the pool):")
    for label in SCORED:
        per = np.array([r["selections"][f"{label}@0.05"]["rows"]["passages"] for r in recs], dtype=float)
        print(f"  {label}: " + ", ".join(f"{x:.2f}" for x in per.sum(0) / per.sum()))
    n_layers = len(recs[0]["profile"]["none"]["layer_share"])
    print("\n| layer | mean dense K row norm | V row norm | share of DenseDev (none) | share (layer) | "
          "top-5% rows it decides (none) | (layer) |")
    print("|---|---|---|---|---|---|---|")
    for layer in range(n_layers):
        cols = [np.mean([r["row_norms"][k][layer] for r in recs]) for k in ("k", "v")]
        cols += [np.mean([r["profile"][m]["layer_share"][layer] for r in recs]) for m in ("none", "layer")]
        cols += [np.sum([r["profile"][m]["decider_top"][layer] for r in recs]) / np.sum(
            [sum(r["profile"][m]["decider_top"]) for r in recs]) for m in ("none", "layer")]
        print(f"| {layer} | {cols[0]:.1f} | {cols[1]:.1f} | " + " | ".join(f"{c:.3f}" for c in cols[2:]) + " |")
    pooled = [r["layer_recall"] for r in recs if r.get("layer_recall")]
    print(f"\nevidence recall of each layer's exact deviation alone ({len(pooled)} examples with the needle in the pool)")
    print("\n| layer | K+V @0.05 | K+V @0.2 | V @0.05 | V @0.2 | K @0.05 | K @0.2 |\n|---|---|---|---|---|---|---|")
    for layer in range(n_layers):
        print(f"| {layer} | " + " | ".join(f"{np.mean([x[f'{kind}@{b}'][layer] for x in pooled]):.2f}"
                                          for kind in ("kv", "v", "k") for b in BUDGETS) + " |")
    for m in ("none", "layer"):
        print(f"\n{m}: V share {np.mean([r['profile'][m]['v_share'] for r in recs]):.3f}; a top-5% row's largest "
              f"layer gives {np.mean([r['profile'][m]['top_decider_share'] for r in recs]):.2f} of its score")
    for label in SCORED:
        common: dict[str, int] = {}
        for r in recs:
            for tok, c in r["selections"][f"{label}@0.05"]["rows"]["common"]:
                common[tok] = common.get(tok, 0) + c
        print(f"{label} @0.05 commonest tokens: " + ", ".join(f"{t!r} {c}" for t, c in
                                                             sorted(common.items(), key=lambda kv: -kv[1])[:8]))
    print("\nper example (needle passage; evidence recall at b = 0.05 / 0.2; em):")
    for r in recs:
        sel = r["selections"]
        print(f"  {r['id']}: passage {r['needle_passage']}, dense {r['dense']['em']:.0f}, splice {r['splice']['em']:.0f}; "
              + "; ".join(f"{lab} " + "/".join("-" if sel[f"{lab}@{b}"]["recall"] is None else
                                                f"{sel[f'{lab}@{b}']['recall']:.2f}" for b in BUDGETS)
                          + f" em {sel[f'{lab}@0.2']['em']:.1f}" for lab in SELECTORS[1:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--n", type=int, default=10)
    r.add_argument("--start", type=int, default=0)
    r.add_argument("--coin-draws", type=int, default=5)
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("out")
    args = p.parse_args()
    (run if args.cmd == "run" else table)(args)


if __name__ == "__main__":
    main()
