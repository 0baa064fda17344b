"""10.14's exploratory readings, fixed in docs/results-log/2026-12-07-10.14g-reading-plan.md (item 2) before
Gemma's data were looked at, and the same for SmolLM2's record (whose RESULTS 9 numbers it gives back):

    .venv/bin/python docs/records/explore-10.14.py runs/evidence-hotpotqa-gemma3

Prints (1) the answers that end at once at b = 0.2, over the examples where dense's answer names
something; (2) the ten examples (the first ten in the data set's order whose splice ended at once);
(3) the splice's evidence share of words against dense's where both answer; (4) the per-example count of
the splice's question attending more to the supporting facts than dense's (every layer but 0; layers
1-10, SmolLM2's count, beside it). Run from the repository root (the data path is the manifest's)."""
import sys

import numpy as np

from workbench.experiments.answer_sources import answer_sources
from workbench.experiments.blank_answers import is_blank, no_token
from workbench.experiments.evidence import per_example
from workbench.runstore import load_sweep
from workbench.tasks import load_dataset

run = load_sweep(sys.argv[1])
ex = run.examples.assign(example_id=run.examples["example_id"].astype(str)).set_index("example_id")
o = run.outcomes.assign(example_id=run.outcomes["example_id"].astype(str))
at = o[(o["budget"] - 0.2).abs() < 1e-9]
names = [i for i in ex.index if not is_blank(ex.at[i, "dense_answer"])]
print(f"## 1. ended at once at b = 0.2, over the {len(names)} of {len(ex)} examples where dense's answer names something")
print(f"dense: {sum(no_token(ex.at[i, 'dense_answer_tokens']) for i in ex.index)} of {len(ex)} examples ended at once;"
      f" the splice: {sum(no_token(ex.at[i, 'spliced_answer_tokens']) for i in ex.index)} of {len(ex)}")
print(f"splice over the {len(names)}: {np.mean([no_token(ex.at[i, 'spliced_answer_tokens']) for i in names]):.3f}")
cells = at[at["example_id"].isin(names)]
share = cells.groupby("selector", sort=False)["answer_tokens"].apply(lambda t: np.mean([no_token(v) for v in t]))
print(share.round(3).to_string())

print("\n## 2. ten examples: the first ten whose splice ended at once (then the first where the splice differs from dense)")
ids = [e.id for e in load_dataset(run.manifest.args["dataset"]) if e.id in ex.index]  # the data set's order
first = [i for i in ids if no_token(ex.at[i, "spliced_answer_tokens"])][:10]
if len(first) < 10:
    first += [i for i in ids if i not in first and ex.at[i, "spliced_answer"] != ex.at[i, "dense_answer"]][:10 - len(first)]
for i in first:
    print(f"\n- {i}: gold {ex.at[i, 'gold']!r}; dense {ex.at[i, 'dense_answer']!r}; splice {ex.at[i, 'spliced_answer']!r}"
          f" ({'ended at once' if no_token(ex.at[i, 'spliced_answer_tokens']) else 'answered'})")
    for sel in ("cacheblend", "cadence-grad", "epic"):
        r = at[(at["example_id"] == i) & (at["selector"] == sel)].iloc[0]
        print(f"    {sel}: {r['answer']!r} (recall {r['evidence_recall']:.2f}, retrieved {r['retrieved']})")

print("\n## 3. answer sources: the splice's evidence share against dense's where both answer")
src = answer_sources(run)
ref = src[src["budget"].isna()].pivot(index="example_id", columns="selector", values="evidence")
both = ref.dropna()
print(f"both answer in {len(both)} of {len(ref)}: splice {both['splice'].mean():.3f}, dense {both['dense'].mean():.3f}")

print("\n## 4. per-example attention on the supporting facts, splice against dense (mass_mean)")
att = per_example(run, "evidence_attention")
att = att[att["cell"].isin(["dense", "spliced"])]
for lo, hi, what in ((1, 10**6, "every layer but 0 (the plan)"), (1, 10, "layers 1-10 (SmolLM2's count, for comparison)")):
    sub = att[(att["layer"] >= lo) & (att["layer"] <= hi)]
    per = sub.groupby(["example_id", "cell"])["mass_mean"].mean().unstack()
    print(f"{what}: splice above dense in {(per['spliced'] > per['dense']).sum()} of {len(per)}")
