"""Why informed 16-row chunks raise the attention-output error on Gemma 3 270M (RESULTS 8.1)."""
import math, json, sys
import torch
import workbench as wb
from workbench.context import context_of_length
from workbench.experiments.unit_curve import attention_probe, random_seed_for
from workbench.selectors import random_scores, select_rows
from workbench.signals.attention import draft_attention

torch.set_num_threads(1)
model = wb.load_model("gemma3-270m")
windows = model.adapter.windows
out = []
for p in range(6):
    ctx = context_of_length(model, 2048, 0 + p)
    reused = ctx.layout.pool_positions("changed")
    n = len(reused)
    probe = attention_probe(ctx)
    informed = draft_attention(ctx).scores(reused)

    def per_layer(positions):
        mask = torch.zeros(probe.n_positions, dtype=torch.bool)
        mask[positions] = True
        m = mask[None, :, None]
        rows = []
        for l in range(probe.dense.n_layers):
            k = torch.where(m, probe.dense.keys[l], probe.spliced.keys[l])
            v = torch.where(m, probe.dense.values[l], probe.spliced.values[l])
            o = probe._output(l, k, v)
            rows.append(float((o - probe.dense_outputs[l]).pow(2).sum()))
        return rows
    base = per_layer(reused[:0])
    rec = {"prompt": p, "n": n, "dense_sq": probe.dense_sq, "unrepaired": base}
    for unit in (16, 64):
        sel = select_rows(informed, math.ceil(0.2 * n), "chunk", chunk_size=unit, chunk_counting="table8", share=0.2)
        pos = reused[sel.rows]
        rec[f"informed_{unit}"] = per_layer(pos)
        rec[f"informed_{unit}_positions"] = [int(pos.min()), int(pos.max()), len(pos)]
        rec[f"informed_{unit}_spans"] = [list(map(int, (reused[a], reused[b - 1]))) for a, b in sel.spans][:40]
        coin = random_scores(n, random_seed_for(0, p, 0))
        sel_r = select_rows(coin, math.ceil(0.2 * n), "chunk", chunk_size=unit, chunk_counting="table8", share=0.2)
        rec[f"random_{unit}"] = per_layer(reused[sel_r.rows])
    rec["segments"] = [(s.name, s.start, s.end) for s in ctx.layout.segments]
    rec["windows"] = list(windows)
    out.append(rec)
    print(p, "unrep", math.sqrt(sum(base) / probe.dense_sq), "inf16", math.sqrt(sum(rec["informed_16"]) / probe.dense_sq),
          "inf64", math.sqrt(sum(rec["informed_64"]) / probe.dense_sq), flush=True)
    json.dump(out, open("runs/investigate/gemma16.json", "w"))
