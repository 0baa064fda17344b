#!/usr/bin/env python3
"""Overhead of the evidence readers: diagnose one RULER example with its evidence and without it
(the same example with meta['evidence'] removed), interleaved, in one process."""
import time, statistics
import torch
from workbench.models import load_model
from workbench.tasks import load_dataset, Example
from workbench.diagnosis import diagnose
torch.set_num_threads(1)
m = load_model("smollm2-135m")
ex = load_dataset("ruler:niah_single", n=3, tokenizer=m.tokenizer, target_tokens=512)[2]
bare = Example(ex.id, ex.passages, ex.question, ex.gold, system=ex.system,
               meta={k: v for k, v in ex.meta.items() if k != "evidence"})
kw = dict(selectors=("none", "full", "cacheblend", "cadence-grad", "bcr", "random"), budgets=(0.05, 0.2, 0.5),
          progress=False)
diagnose(m, ex, **kw)
times = {"with": [], "without": []}
for _ in range(3):
    for name, e in (("with", ex), ("without", bare)):
        t = time.perf_counter(); diagnose(m, e, **kw); times[name].append(time.perf_counter() - t)
w, o = statistics.median(times["with"]), statistics.median(times["without"])
print(f"with evidence {w:.2f} s, without {o:.2f} s (medians of 3), ratio {w / o:.3f}", times)
