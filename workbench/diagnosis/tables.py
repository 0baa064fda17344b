"""The tidy tables of a Diagnosis, built from a Context and its SignalSet (no model work here)."""

from __future__ import annotations

import pandas as pd
import torch

from workbench.context import Context
from workbench.signals import SignalSet

SIGNAL_COLUMNS = {"token": ["signal", "position", "value"], "layer": ["signal", "layer", "position", "value"]}
ATTRIBUTION_COLUMNS = ["position", "segment", "kind", "estimate", "actual"]
ANSWER_TOKEN_COLUMNS = ["cell", "budget", "draw", "index", "token_id", "token", "logprob"]


def tokens_table(ctx: Context) -> pd.DataFrame:
    """One row per context position: its token, segment, passage number, whether it is reused and
    whether it is gold evidence (False throughout where the example defines none)."""
    layout = ctx.layout
    reused = torch.zeros(layout.n_tokens, dtype=torch.bool)
    reused[layout.reused_positions] = True
    evidence = torch.zeros(layout.n_tokens, dtype=torch.bool)
    if layout.evidence is not None:
        evidence[layout.evidence] = True
    return pd.DataFrame({"position": range(layout.n_tokens), "token": list(layout.tokens),
                         "segment": layout.segment_names(), "passage": layout.segment_ids().tolist(),
                         "reused": reused.tolist(), "evidence": evidence.tolist()})


def token_signals_table(signals: SignalSet) -> pd.DataFrame:
    """Every registered token signal whose records were computed: one row per (signal, reused position)."""
    positions = signals.ctx.reused_positions.tolist()
    frames = [pd.DataFrame({"signal": name, "position": positions, "value": values.double().numpy()})
              for name, values in signals.values("token").items()]  # values: [n_reused]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SIGNAL_COLUMNS["token"])


def layer_signals_table(signals: SignalSet) -> pd.DataFrame:
    """Every registered layer signal whose records were computed: one row per (signal, layer, position)."""
    positions = signals.ctx.reused_positions
    frames = []
    for name, table in signals.values("layer").items():  # table: [layer, n_reused]
        n_layers, n = table.shape
        frames.append(pd.DataFrame({"signal": name, "layer": torch.arange(n_layers).repeat_interleave(n).numpy(),
                                    "position": positions.repeat(n_layers).numpy(),
                                    "value": table.double().flatten().numpy()}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SIGNAL_COLUMNS["layer"])


def residual_rows(selector: str, unit: str, budget: float, residual: dict[str, torch.Tensor],
                  draw: int | None = None) -> list[dict]:
    """Rows of the residual table for one cell: {"k": [layer], "v": [layer]} -> one row per layer and kind."""
    return [{"selector": selector, "unit": unit, "budget": budget, "draw": draw, "layer": layer, "kind": kind,
             "value": float(v)} for kind, per_layer in residual.items() for layer, v in enumerate(per_layer)]


def answer_tokens_table(tokenizer, dense_ids: list[int], cells: list[tuple]) -> pd.DataFrame:
    """The dense answer's tokens (with the end-of-turn token it stopped on) teacher-forced under each
    cell: one row per (cell, token) with log p of that token there. cells: (label, budget, draw,
    CellAnswer): "dense" and "spliced" (budget and draw None), then each selector's repair."""
    texts = [tokenizer.decode([i]) for i in dense_ids]
    rows = [{"cell": label, "budget": budget, "draw": draw, "index": i, "token_id": int(t), "token": texts[i],
             "logprob": float(logprob)}
            for label, budget, draw, cell in cells
            for i, (t, logprob) in enumerate(zip(dense_ids, cell.reference_token_logprobs))]
    return pd.DataFrame(rows, columns=ANSWER_TOKEN_COLUMNS)
