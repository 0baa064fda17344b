"""The receiver's context: segments, token ids and absolute positions.

    prefix | passage_1 | ... | passage_k | suffix
    (chat template up to the user text) (passages)   (question, end of user turn,
                                                      generation prompt, answer lead-in)

Each segment is tokenized on its own and the ids are concatenated, as a reuse path that
splices per-segment caches does. The dense reference prefills these very ids (the
token-matched control), so splice and dense differ only in the attention that never ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.errors import WorkbenchError
from workbench.tasks import Example

_SENTINEL = "\u2063KVWB-USER-TEXT\u2063"
POOLS = ("changed", "all")


@dataclass(frozen=True)
class PromptFormat:
    """How an example becomes text. The defaults keep small models' answers short."""

    passage_separator: str = "\n\n"
    question_template: str = "Question: {question}\nAnswer with a short phrase only."
    answer_lead: str = "Answer:"  # written on the assistant turn, so answers start at once


@dataclass(frozen=True)
class Segment:
    """One contiguous span [start, end) of the context."""

    kind: str  # "prefix" | "passage" | "suffix"
    index: int  # passage number (0-based); 0 for prefix and suffix
    start: int
    end: int
    text: str

    @property
    def name(self) -> str:
        return f"passage {self.index + 1}" if self.kind == "passage" else self.kind

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Layout:
    """Token ids of the whole context with its segments. ids: [pos]."""

    ids: torch.Tensor  # [pos] int64
    segments: tuple[Segment, ...]
    tokens: tuple[str, ...]  # display text of each token
    # [n_evidence] ascending: the rows of the example's gold evidence (every token overlapping one of
    # its character spans); None where the data defines no evidence
    evidence: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.ids.numel())

    @property
    def prefix(self) -> Segment:
        return self.segments[0]

    @property
    def passages(self) -> tuple[Segment, ...]:
        return tuple(s for s in self.segments if s.kind == "passage")

    @property
    def suffix(self) -> Segment:
        return self.segments[-1]

    @property
    def suffix_start(self) -> int:
        """Where the receiver's own text begins; the handed-off cache covers [0, suffix_start)."""
        return self.suffix.start

    @property
    def reused_positions(self) -> torch.Tensor:
        """Positions of all passage tokens: every row a sender computed. [n_reused]"""
        return torch.cat([torch.arange(s.start, s.end) for s in self.passages])

    @property
    def changed_positions(self) -> torch.Tensor:
        """Positions of the passages after the first: the rows computed under a prefix other than
        the receiver's. The first passage's sender saw the receiver's own prefix at the same
        positions, so its rows are exact in the splice by construction. [n_changed]"""
        rest = [torch.arange(s.start, s.end) for s in self.passages[1:]]
        return torch.cat(rest) if rest else torch.zeros(0, dtype=torch.long)

    def pool_positions(self, pool: str) -> torch.Tensor:
        """The candidate rows a repair budget is a fraction of: "changed" (known to the receiver
        from the layout alone, never by comparing with dense) or "all" reused rows. [n_pool]"""
        if pool not in POOLS:
            raise WorkbenchError(f"unknown candidate pool {pool!r}; use one of {', '.join(POOLS)}")
        return self.changed_positions if pool == "changed" else self.reused_positions

    def evidence_in(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The evidence rows among `positions` ([n]), ascending; None where there is no evidence."""
        return None if self.evidence is None else self.evidence[torch.isin(self.evidence, positions)]

    def segment_ids(self) -> torch.Tensor:
        """Per position: -1 prefix, passage number 0..k-1, k for the suffix. [pos]"""
        out = torch.empty(self.n_tokens, dtype=torch.long)
        for seg in self.segments:
            out[seg.start:seg.end] = {"prefix": -1, "suffix": len(self.passages)}.get(seg.kind, seg.index)
        return out

    def segment_offsets(self) -> torch.Tensor:
        """Per position, its distance from the start of its segment (0 at each passage's first
        token). [pos]"""
        out = torch.empty(self.n_tokens, dtype=torch.long)
        for seg in self.segments:
            out[seg.start:seg.end] = torch.arange(len(seg))
        return out

    def segment_names(self) -> list[str]:
        """Per position, the name of its segment ("prefix", "passage 2", "suffix")."""
        names = [""] * self.n_tokens
        for seg in self.segments:
            names[seg.start:seg.end] = [seg.name] * len(seg)
        return names


def chat_frame(tokenizer, system: str | None) -> tuple[str, str]:
    """(text before the user's message, text after it up to the assistant's first token)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": _SENTINEL}]
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        before, _, after = rendered.partition(_SENTINEL)
        return before, after
    head = f"{system}\n\n" if system else ""
    return f"{_bos(tokenizer)}{head}User: ", "\nAssistant: "


def _bos(tokenizer) -> str:
    """The BOS token text when the tokenizer adds one by default (a base model without a chat
    template, such as Gemma 3, expects it first); segments are tokenized without special tokens."""
    bos = getattr(tokenizer, "bos_token", None)
    ids = tokenizer("a")["input_ids"] if bos else []
    return bos if ids and ids[0] == tokenizer.bos_token_id else ""


def build_layout(tokenizer, example: Example, fmt: PromptFormat = PromptFormat(),
                 max_positions: int | None = None) -> Layout:
    """Tokenize each segment on its own and lay them end to end."""
    before, after = chat_frame(tokenizer, example.system)
    texts = [("prefix", 0, before)]
    texts += [("passage", i, p + fmt.passage_separator) for i, p in enumerate(example.passages)]
    question = fmt.question_template.format(question=example.question)
    lead = example.meta.get("answer_lead", fmt.answer_lead)
    texts.append(("suffix", 0, question + after + lead))

    ids: list[int] = []
    segments = []
    for kind, index, text in texts:
        seg_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not seg_ids:
            raise WorkbenchError(f"example {example.id}: the {kind} segment tokenized to nothing")
        segments.append(Segment(kind, index, len(ids), len(ids) + len(seg_ids), text))
        ids += seg_ids
    if segments[0].end == 0:
        raise WorkbenchError("the chat template produced an empty prefix")
    if max_positions is not None and len(ids) > max_positions:
        raise WorkbenchError(
            f"example {example.id}: the context is {len(ids)} tokens, longer than the model's "
            f"maximum of {max_positions} positions")
    tokens = tuple(tokenizer.decode([i]) for i in ids)
    evidence = None if example.evidence is None else _evidence_rows(tokenizer, segments, example.evidence)
    return Layout(torch.tensor(ids, dtype=torch.long), tuple(segments), tokens, evidence)


def _evidence_rows(tokenizer, segments: list[Segment], spans) -> torch.Tensor:
    """The absolute rows of every token that overlaps one of `spans` ((passage, start, end) in
    characters of the passage's text). [n_evidence] ascending."""
    rows: set[int] = set()
    passages = [s for s in segments if s.kind == "passage"]
    for index in sorted({p for p, _, _ in spans}):
        seg = passages[index]
        offsets = token_offsets(tokenizer, seg.text)  # [(start, end)] per token of the segment
        if len(offsets) != len(seg):
            raise WorkbenchError(f"passage {index + 1}: the tokenizer's offsets cover {len(offsets)} tokens, the layout "
                                 f"{len(seg)}; its evidence cannot be placed")
        for p, start, end in spans:
            if p == index:
                rows.update(seg.start + t for t, (a, b) in enumerate(offsets) if a < end and b > start)
    return torch.tensor(sorted(rows), dtype=torch.long)


def token_offsets(tokenizer, text: str) -> list[tuple[int, int]]:
    """Each token's character span in `text`, tokenized on its own without special tokens: the fast
    tokenizer's offsets where it has them, else each token's end found by decoding the ids up to it."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if getattr(tokenizer, "is_fast", False):
        found = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if found["input_ids"] == ids:
            return [tuple(span) for span in found["offset_mapping"]]
    ends = [len(tokenizer.decode(ids[:i + 1])) for i in range(len(ids))]
    return list(zip([0, *ends[:-1]], ends))
