"""Graded outcomes of a repaired cell against the dense answer, beside the binary flip.

A flip says only that the scored answer (its first line, or all of it under `stop_at_newline=False`)
changed; these say by how much the receiver's decision moved (all against the dense cache's own
answer, no gold needed):

    dense_logprob_mean  mean log-probability per token of the dense answer, teacher-forced
    first_token_agree   the greedy first answer token is dense's
    first_kl            KL(dense || cell) of the first answer token's distribution, in nats
    agree_prefix        leading answer tokens equal to dense's
    f1_to_dense         SQuAD token F1 of the cell's answer against the dense answer

and whether the answer ran on past the point where dense's ended (`ran_on`): the evidence can
survive a splice while the answer no longer stops where dense stopped, which exact match counts
as a loss.
"""

from __future__ import annotations

import torch

from workbench.engine.answers import CellAnswer
from workbench.tasks import f1_score, normalize_answer

GRADED_COLUMNS = ("dense_logprob_mean", "first_token_agree", "first_kl", "agree_prefix", "f1_to_dense")
# A cell's answer that is longer than dense's by more than this many tokens ran on, whatever it says.
RAN_ON_MARGIN = 8


def ran_on(text: str, n_tokens: int, dense_text: str, dense_tokens: int, margin: int = RAN_ON_MARGIN) -> bool:
    """Whether an answer continues past the point where dense's answer ended: dense's text is a
    proper prefix of it and what follows holds a word (a trailing full stop is not a run-on), or it
    is longer than dense's by more than `margin` tokens. An answer cut where dense's was (dense ran
    to the token limit too) never ran on."""
    return continues_past(text, dense_text) or n_tokens - dense_tokens > margin


def continues_past(text: str, dense_text: str) -> bool:
    """`ran_on`'s text half: dense's answer is a proper prefix of `text` and what follows holds a
    word. Needs no token ids, so it also reads answers stored without them."""
    text, dense_text = text.strip(), dense_text.strip()
    return text.startswith(dense_text) and bool(normalize_answer(text[len(dense_text):]))


def first_token_kl(dense_logp: torch.Tensor, cell_logp: torch.Tensor) -> float:
    """KL(p_dense || p_cell) in nats of two [vocab] log-probability vectors (float64, >= 0)."""
    p, q = dense_logp.double(), cell_logp.double()
    return max(float((p.exp() * (p - q)).sum()), 0.0)


def common_prefix(a, b) -> int:
    """How many leading items two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def graded(cell: CellAnswer, dense_text: str, dense_ids, dense_first_logp: torch.Tensor) -> dict:
    """The graded outcomes of `cell` against the dense answer: its text, its token ids with the
    end-of-turn token it stopped on (the ids the cell teacher-forced) and the dense cache's
    [vocab] log-probabilities of the first answer token."""
    dense_ids = [int(t) for t in dense_ids]
    return {
        "dense_logprob_mean": cell.reference_logprob / max(len(dense_ids), 1),
        "first_token_agree": bool(dense_ids) and cell.first_token == dense_ids[0],
        "first_kl": first_token_kl(dense_first_logp, cell.first_logp),
        "agree_prefix": common_prefix(list(cell.answer.token_ids) + [None], dense_ids),
        "f1_to_dense": f1_score(cell.answer.text, dense_text),
    }
