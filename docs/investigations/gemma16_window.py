"""Prompt 2 of RESULTS 8.1: is the 16-row error the mixing of restored and spliced keys inside a local window?"""
import math, torch
import workbench as wb
from workbench.context import context_of_length
from workbench.experiments.unit_curve import attention_probe
from workbench.selectors import select_rows
from workbench.signals.attention import draft_attention
torch.set_num_threads(1)
model = wb.load_model("gemma3-270m")
ctx = context_of_length(model, 2048, 2)
reused = ctx.layout.pool_positions("changed"); n = len(reused)
probe = attention_probe(ctx)
W = max(w for w in model.adapter.windows if w)
q0 = int(probe.query_positions[0])
informed = draft_attention(ctx).scores(reused)
sel = select_rows(informed, math.ceil(0.2 * n), "chunk", chunk_size=16, chunk_counting="table8", share=0.2)
inf = reused[sel.rows]
window_rows = reused[reused > q0 - W]  # changed rows some suffix query sees at a local layer
sets = {"none": reused[:0], "informed16": inf, "window (all changed rows within reach)": window_rows,
        "informed16 + window": torch.unique(torch.cat([inf, window_rows])),
        "informed16 outside the window": inf[inf <= q0 - W], "informed16 inside the window": inf[inf > q0 - W]}
print(f"window {W}, first suffix position {q0}, changed rows within reach {len(window_rows)}, informed16 rows {len(inf)} "
      f"of which inside the window {int((inf > q0 - W).sum())}")
for name, pos in sets.items():
    print(f"{name:45s} rows {len(pos):5d}  error {probe.error(pos):.3f}")
