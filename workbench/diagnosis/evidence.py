"""Where the answer's evidence is, and whether a repair reached it.

An example whose data defines gold evidence (`Example.evidence`: RULER's queried needles,
HotpotQA's supporting sentences, the synthetic bridge facts, a JSONL `evidence` field) has
evidence rows (`Layout.evidence`). Against them a Diagnosis records, whether or not the model
answers correctly:

    evidence_recall     per cell: the share of the evidence rows in the candidate pool that the
                        cell recomputes (`none` 0, `full` 1)
    evidence_precision  per cell: the share of the recomputed rows that are evidence
    evidence_ranking    per token signal and per selector: the average precision of its scores
                        over the pool against the evidence rows, beside chance (their share)
    evidence_attention  per cache (dense, the splice, each selection) and layer: the question's
                        attention mass on the evidence rows, read from the queries and keys of the
                        very pass that answers (`EvidenceAttention`), mean over heads, for the
                        suffix's last row (the one that reads the first answer token) and its mean

An example without evidence, or none of whose evidence lies in the pool, records NaN (and no
ranking or attention rows): no zeros that would read as misses.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from workbench.engine.hooks import HookPoint
from workbench.kv import KVCache
from workbench.signals.attention import attention_rows as attention_probs

RANKING_COLUMNS = ("scorer", "kind", "n_pool", "n_evidence", "average_precision", "chance")
ATTENTION_COLUMNS = ("cell", "budget", "draw", "layer", "mass_last", "mass_mean")


def recall_precision(positions: torch.Tensor, evidence: torch.Tensor | None) -> dict:
    """evidence_recall and evidence_precision of recomputing `positions` ([n]) against the evidence
    rows of the pool (`evidence`, [n_evidence]; None or empty: NaN)."""
    if evidence is None or not len(evidence):
        return {"evidence_recall": math.nan, "evidence_precision": math.nan}
    hit = int(torch.isin(evidence, positions).sum())
    return {"evidence_recall": hit / len(evidence),
            "evidence_precision": int(torch.isin(positions, evidence).sum()) / len(positions) if len(positions)
            else math.nan}


def average_precision(scores: torch.Tensor, relevant: torch.Tensor) -> float:
    """Average precision of ranking by `scores` ([n], higher first; ties in the given order)
    against `relevant` (bool [n]): the mean, over relevant items, of the precision at their rank."""
    order = torch.sort(scores.double(), descending=True, stable=True).indices
    hits = relevant[order].double()  # [n] in ranked order
    if not hits.sum():
        return math.nan
    precision = hits.cumsum(0) / torch.arange(1, len(hits) + 1, dtype=torch.double)
    return float((precision * hits).sum() / hits.sum())


def ranking_rows(scorers: dict[tuple[str, str], torch.Tensor], pool: torch.Tensor,
                 evidence: torch.Tensor | None) -> list[dict]:
    """The "evidence_ranking" rows: each scorer's ({(name, kind): scores over the pool [n_pool]})
    average precision against the evidence rows of the pool ([n_evidence]); none without them."""
    if evidence is None or not len(evidence):
        return []
    relevant = torch.isin(pool, evidence)  # [n_pool]
    return [{"scorer": name, "kind": kind, "n_pool": len(pool), "n_evidence": len(evidence),
             "average_precision": average_precision(scores, relevant), "chance": len(evidence) / len(pool)}
            for (name, kind), scores in scorers.items()]


class EvidenceAttention:
    """Hooks on a batched pass (`answer_cells`) that read the suffix rows' queries and keys at
    `hook_rot_q` / `hook_rot_k` (read only: the pass stays bit-identical) and, per cell and layer,
    the attention of the suffix rows over the cell's cache (`base` with the cell's repaired rows
    overlaid) and the suffix itself, the fp32 softmax of `signals.attention.attention_rows` (as
    `attention.explicit_attention` writes it out) under the layer's causal window. Keeps only the mass on
    `evidence` ([n_evidence]) positions: {cell: {layer: (mass_last, mass_mean)}}."""

    def __init__(self, model, base: KVCache, suffix_start: int, n_suffix: int, evidence: torch.Tensor):
        self.ad, self.base = model.adapter, base
        self.start, self.end = suffix_start, suffix_start + n_suffix
        self.evidence = evidence
        self.found: dict[int, dict[int, tuple[float, float]]] = {}
        self._queries: dict[int, torch.Tensor] = {}  # layer -> [cell, row, head, d_head] of the last call

    def hooks(self) -> dict:
        """{hook_rot_q, hook_rot_k of every layer: the readers}."""
        n = self.ad.n_layers
        return {**{f"blocks.{l}.attn.hook_rot_q": self._keep_queries for l in range(n)},
                **{f"blocks.{l}.attn.hook_rot_k": self._read for l in range(n)}}

    def _keep_queries(self, q: torch.Tensor, hook: HookPoint) -> None:
        self._queries[hook.layer()] = q

    def _read(self, k: torch.Tensor, hook: HookPoint) -> None:  # k: [cell, row, kv_head, d_head]
        q, layer = self._queries.pop(hook.layer()), hook.layer()
        suffix = (hook.positions >= self.start) & (hook.positions < self.end)  # [cell, row]
        for c in suffix.any(1).nonzero().flatten().tolist():
            if int(suffix[c].sum()) != self.end - self.start:
                continue  # not the whole suffix in this pass (a decode step): nothing to read
            repaired = (hook.positions[c] >= 0) & (hook.positions[c] < self.start)  # [row]
            keys = self.base.keys[layer].clone()  # [kv_head, start, d_head]
            keys[:, hook.positions[c, repaired]] = k[c, repaired].transpose(0, 1).to(keys.dtype)
            keys = torch.cat([keys, k[c, suffix[c]].transpose(0, 1).to(keys.dtype)], dim=1)  # [kv_head, end, d]
            query_pos = torch.arange(self.start, self.end, device=keys.device)  # [suffix]
            probs = attention_probs(q[c, suffix[c]], keys, query_pos, self.ad.scaling,
                                    self.ad.windows[layer])  # [head, suffix, end]
            mass = probs[..., self.evidence.to(keys.device)].sum(-1)  # [head, suffix]
            cell = int(hook.cells[c])
            self.found.setdefault(cell, {})[layer] = (float(mass[:, -1].mean()), float(mass.mean()))

    _keep_queries.reads_only = _read.reads_only = True  # engine.hooks: readers, so no finite check after them


def attention_rows(label: str, budget, draw, by_layer: dict[int, tuple[float, float]]) -> list[dict]:
    """The "evidence_attention" rows of one cache."""
    return [{"cell": label, "budget": budget, "draw": draw, "layer": layer, "mass_last": last, "mass_mean": mean}
            for layer, (last, mean) in sorted(by_layer.items())]


def attention_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=ATTENTION_COLUMNS)
    return table.assign(draw=table["draw"].astype("Int64"))
