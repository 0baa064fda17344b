"""Greedy decoding, written once: one stopping rule (`StopRule`), one loop (`decode_greedy`), one
stepper interface (`Stepper`: the rows that go on and their tokens -> the next logits), the
engine's decode steps (`Decoder`, stepped eagerly by `EngineSteps` or captured as a CUDA graph by
`StaticStep` / `CapturedSteps`) and the teacher-forced score (`forced_score`). Every greedy
decoder runs this loop: the cells' answers (`engine.answers`), a cache's answer
(`continue_answer`), a batch of caches' answers (`workbench.decode.greedy_answers`) and the
draft (`signals.attention`). HF's modules step nothing: they are the tests' oracle.

The rule: an end-of-turn token stops (and is not kept); a newline in the answer ends it (when
`stop_at_newline`: the text scored is its first line, else all of it); `max_new_tokens` tokens end it.

Steps: each cell's known rows (repair, suffix, answer so far) sit in preallocated buffers
`[layer, cell, kv_head, capacity, d_head]`; a step runs one new row per cell through the layer
step (`engine.layers`) and writes its K/V in place (one row per cell, never a copy of the rest).

The capture: a one-row step is a few hundred small kernels per layer, which a GPU's host cannot
launch as fast as the device runs them (34.8 ms a token at an 8B shape through HF's eager modules,
against about 4 ms to read its weights). Positions and tokens are read from tensors at fixed
addresses, so a step is recorded once (`torch.cuda.CUDAGraph`) and replayed with new inputs:

    step = StaticStep(decoder, capture=True)     # cuda, no hooks
    logits = step(positions, ids)               # [cell, vocab] float32; every cell, every step

A static step never drops a cell (the shapes stay fixed): an ended cell steps on its last token,
unread. Its first call runs eagerly on a side stream (the warm-up), the second captures, later ones
replay; `capture=False` runs the same protocol eagerly (the CPU rehearsal). A failed capture (a
kernel that reads back to the host) warns once and the process decodes eagerly from then on.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from workbench.batching import pack_sizes
from workbench.engine.attention import attend
from workbench.engine.cells import Cell
from workbench.engine.hooks import Hooks, Rows
from workbench.engine.layers import final_logits, run_layers
from workbench.kv import KVCache, kv_bytes_per_position
from workbench.models import LoadedModel
from workbench.tasks.metrics import first_line

GRAPHS_ENV = "KVWB_CUDA_GRAPHS"  # "0" turns the captured decode off (to time or check against it)
_capture_failed: list[str] = []  # why the first failed capture failed; no later step tries again


@dataclass(frozen=True)
class Answer:
    """A greedy answer. `text`: what is scored (the first line, or all of it: `StopRule`), stripped; `raw` all."""

    text: str
    raw: str
    token_ids: tuple[int, ...]  # generated ids, stop token excluded
    stopped: bool  # ended on an end-of-turn token (not on max_new_tokens or a newline)


def stop_token_ids(model) -> set[int]:
    """End-of-turn ids: the tokenizer's eos, the generation config's eos and the chat formats' end-of-turn tokens."""
    tok = model.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    eos = getattr(model.hf.generation_config, "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    for name in ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>"):
        tid = tok.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tok.unk_token_id and tid >= 0:
            ids.add(tid)
    return ids


@dataclass(frozen=True)
class StopRule:
    """When a greedy decode ends (see the module docstring)."""

    tokenizer: object
    stops: frozenset[int]
    max_new_tokens: int = 24
    stop_at_newline: bool = True

    @classmethod
    def of(cls, model, max_new_tokens: int = 24, stop_at_newline: bool = True) -> StopRule:
        return cls(model.tokenizer, frozenset(stop_token_ids(model)), max_new_tokens, stop_at_newline)

    def push(self, walk: Walk, token: int) -> bool:
        """Apply one greedy token to `walk`; True while the decode goes on."""
        if token in self.stops:
            walk.done = walk.stopped = True
        else:
            walk.generated.append(token)
            walk.done = len(walk.generated) >= self.max_new_tokens or (
                self.stop_at_newline and "\n" in self.tokenizer.decode(walk.generated).lstrip())
        return not walk.done

    def decision(self, answer: Answer) -> list[int]:
        """`answer` as a decision to teacher-force: its tokens, then the smallest end-of-turn id if it stopped on one."""
        return list(answer.token_ids) + ([min(self.stops)] if answer.stopped else [])

    def answer(self, walk: Walk) -> Answer:
        raw = self.tokenizer.decode(walk.generated)  # the text scored: its first line, or all of it
        return Answer(text=first_line(raw) if self.stop_at_newline else raw.strip(), raw=raw,
                      token_ids=tuple(walk.generated), stopped=walk.stopped)


@dataclass
class Walk:
    """One greedy decode in progress."""

    generated: list[int] = field(default_factory=list)
    done: bool = False
    stopped: bool = False  # ended on an end-of-turn token
    steps: int = 0  # forwards run for it beyond its first logits


class Stepper(Protocol):
    """What `decode_greedy` steps: `(keep, tokens)` -> the next logits [len(keep), vocab]; `keep`:
    the rows of the last batch that go on (indices into it), `tokens`: each one's new token."""

    def __call__(self, keep: list[int], tokens: list[int]) -> torch.Tensor: ...


def decode_greedy(rule: StopRule, walks: list[Walk], advance: Stepper, logits: torch.Tensor | None = None,
                  observe: Callable[[torch.Tensor, list[int]], None] | None = None) -> list[Walk]:
    """Decode every unfinished walk greedily under `rule`, batched: `logits` ([walk, vocab]) of
    the first step, or None to start by running each walk's last token. `observe(logits, alive)`
    sees every step's logits ([alive, vocab]; `alive`: their walks' indices) before its tokens are
    picked."""
    alive = [i for i, w in enumerate(walks) if not w.done]
    if logits is None and alive:
        logits = _advance(walks, alive, list(range(len(alive))), advance)
    while alive:
        if observe is not None:
            observe(logits, alive)
        picks = logits.argmax(-1).tolist()
        keep = [slot for slot, (i, token) in enumerate(zip(alive, picks)) if rule.push(walks[i], token)]
        if not keep:
            break
        alive = [alive[slot] for slot in keep]
        logits = _advance(walks, alive, keep, advance)
    return walks


def _advance(walks: list[Walk], alive: list[int], keep: list[int], advance: Stepper) -> torch.Tensor:
    for i in alive:
        walks[i].steps += 1
    return advance(keep, [walks[i].generated[-1] for i in alive])


@dataclass(frozen=True)
class TeacherForced:
    """How a cache scores a given answer."""

    logprob: float  # sum of log p(answer token | cache, suffix, earlier answer tokens)
    token_logprobs: tuple[float, ...]
    n_agree: int  # leading answer tokens that greedy decoding would reproduce
    agrees: bool  # greedy decoding would produce exactly these tokens


def forced_score(logits: torch.Tensor, answer, logp: torch.Tensor | None = None) -> TeacherForced:
    """`answer` ([answer]) scored by the logits that predict each of its tokens ([row >= answer,
    vocab]; rows past the answer are not read): the one teacher-forced reading, of an engine pass
    over the question (`workbench.decode.teacher_forced`) and of the batched cells
    (`engine.answers`). `logp`: log_softmax of `logits` in float32, when the caller has it. The
    log-probability is the sum of the token log-probabilities, added as Python floats."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1) if logp is None else logp  # [row, vocab]
    answer = torch.as_tensor(answer if isinstance(answer, torch.Tensor) else list(answer), dtype=torch.long).cpu()
    token = logp[: len(answer)].gather(1, answer[:, None].to(logp.device))[:, 0]  # [answer]
    token_logprobs = tuple(token.tolist())
    agree = (logits[: len(answer)].argmax(-1).cpu() == answer).long()
    n_agree = int(agree.cumprod(0).sum())
    return TeacherForced(float(sum(token_logprobs)), token_logprobs, n_agree, n_agree == len(answer))


class Decoder:
    """Cells that grow by one row per step over a shared base (see the module docstring)."""

    def __init__(self, model: LoadedModel, base: KVCache, cells: list[Cell], steps: int, hooks=None,
                 index: list[int] | None = None):
        """index: the cells' indices among the caller's (`HookPoint.cells`; default 0, 1, ...)."""
        ad, device = model.adapter, model.device
        self.model, self.base, self.hooks = model, base, Hooks.of(hooks, ad)
        self.rows = None  # the last step's rows, for its hooked logits
        index = list(index) if index is not None else list(range(len(cells)))
        self.index = torch.tensor(index, dtype=torch.long, device=device)  # [cell]
        known = [int(c.known_positions.numel()) for c in cells]
        capacity = max(known) + steps
        shape = (base.n_layers, len(cells), ad.n_kv_heads, capacity, ad.head_dim)
        self.keys, self.values = base.keys.new_zeros(shape), base.values.new_zeros(shape)
        self.kpos = torch.full((len(cells), capacity), -1, dtype=torch.long, device=device)  # -1: empty slot
        self.length = torch.tensor(known, device=device)  # [cell]
        self.hidden_base = torch.zeros(len(cells), base.n_positions, dtype=torch.bool, device=device)  # overlaid
        for c, (cell, n) in enumerate(zip(cells, known)):
            pos = cell.known_positions.long().to(device)
            self.keys[:, c, :, :n] = cell.known_keys.to(device, base.keys.dtype)
            self.values[:, c, :, :n] = cell.known_values.to(device, base.values.dtype)
            self.kpos[c, :n] = pos
            self.hidden_base[c, pos[pos < base.n_positions]] = True

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits of the last step's rows ([cell, hidden] -> [cell, vocab]), through
        `ln_final.hook_normalized` and `hook_unembed` when hooked."""
        return final_logits(self.model.adapter, hidden, self.rows, self.hooks)

    def keep(self, cells: list[int]) -> None:
        """Drop every cell but `cells` (indices into the current ones)."""
        index = torch.tensor(cells, device=self.kpos.device)
        self.keys, self.values = self.keys.index_select(1, index), self.values.index_select(1, index)
        self.kpos, self.length, self.index = self.kpos[index], self.length[index], self.index[index]
        self.hidden_base = self.hidden_base[index]

    @torch.inference_mode()
    def step(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """One new row per cell at `positions` ([cell]) with token `ids` ([cell]); returns their
        hidden states after the last layer ([cell, hidden])."""
        ad, base = self.model.adapter, self.base
        device = self.kpos.device
        pos, n_cells = positions.to(device).long(), positions.numel()
        see_base = (torch.arange(base.n_positions, device=device)[None] <= pos[:, None]) & ~self.hidden_base
        see_known = (self.kpos >= 0) & (self.kpos <= pos[:, None])
        mask = torch.cat([see_base, see_known, torch.ones(n_cells, 1, dtype=torch.bool, device=device)], dim=1)
        key_pos = torch.cat([torch.arange(base.n_positions, device=device).expand(n_cells, -1), self.kpos,
                             pos[:, None]], dim=1)  # [cell, key]
        masks = ad.layer_masks(mask[:, None], pos[:, None], key_pos)  # [layer] of [cell, 1, key]
        new_k, new_v = [], []

        def attend_step(l: int, q, k, v, explicit) -> torch.Tensor:  # q: [cell, head, d_head]
            new_k.append(k)
            new_v.append(v)
            return attend(ad, q[:, :, None], base.keys[l], base.values[l], k[:, :, None], v[:, :, None],
                          self.keys[l], self.values[l], masks[l], key_pos, explicit)[:, 0]  # [cell, head * d_head]

        rows = self.rows = Rows.one_row_each(pos, self.index) if self.hooks else None
        h = run_layers(ad, ids.to(device).long(), pos, rows, attend_step, self.hooks)  # [cell, hidden]
        slot = self.length  # [cell]: where each cell's new row goes (read before it grows in place below)
        cells = torch.arange(n_cells, device=device)
        # Two index tensors apart put their dimension first: the values go in as [cell, layer, kv_head, d_head].
        self.keys[:, cells, :, slot] = torch.stack(new_k, dim=1).to(self.keys.dtype)
        self.values[:, cells, :, slot] = torch.stack(new_v, dim=1).to(self.values.dtype)
        self.kpos[cells, slot] = pos
        self.length += 1  # in place: a captured step (`StaticStep`) replays this too
        return h


def graphs_wanted(model, hooks) -> bool:
    """Whether decode steps on `model` are captured: on CUDA, without hooks (a hook is Python that
    runs at every step), unless KVWB_CUDA_GRAPHS=0 or a capture has failed in this process."""
    return (model.device.type == "cuda" and not hooks and os.environ.get(GRAPHS_ENV, "1") != "0"
            and not _capture_failed)


class StaticStep:
    """One decode step of every cell of `decoder` and the logits after it, at fixed addresses
    (see the module docstring)."""

    def __init__(self, decoder: Decoder, capture: bool):
        n_cells, device = decoder.length.numel(), decoder.length.device
        self.decoder, self.capture, self.device = decoder, capture, device
        self.positions = torch.zeros(n_cells, dtype=torch.long, device=device)  # [cell] the graph's inputs
        self.ids = torch.zeros(n_cells, dtype=torch.long, device=device)  # [cell]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # [cell, vocab] the graph's output
        self.calls = 0
        self.replays = 0

    def _run(self) -> torch.Tensor:
        return self.decoder.model.adapter.logits(self.decoder.step(self.positions, self.ids)).float()

    @torch.inference_mode()
    def __call__(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Step every cell: row at `positions` ([cell]) with token `ids` ([cell]). Returns a copy
        of their logits, [cell, vocab] float32."""
        self.positions.copy_(positions)
        self.ids.copy_(ids)
        self.calls += 1
        if self.capture and self.calls == 1:
            return self._warm_up()
        if self.capture and self.calls == 2:
            self._record()
        if self.graph is None:
            return self._run()
        self.graph.replay()
        self.replays += 1
        return self.logits.clone()

    def _warm_up(self) -> torch.Tensor:
        """The first step, run on a side stream as torch's graph capture asks."""
        with torch.cuda.device(self.device):
            current, side = torch.cuda.current_stream(), torch.cuda.Stream()
            side.wait_stream(current)
            with torch.cuda.stream(side):
                logits = self._run()
            current.wait_stream(side)
            logits.record_stream(current)  # made on the side stream, read on this one
        return logits

    def _record(self) -> None:
        """Capture the step (nothing runs while capturing; the caller replays it at once). The
        capture runs on a stream of its own inside an outer stream context, so that even a capture
        that fails leaves the caller's stream current."""
        if _capture_failed:
            return
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream()
            try:
                with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                    self.logits = self._run()
            except RuntimeError as err:
                _capture_failed.append(str(err).splitlines()[0] if str(err) else type(err).__name__)
                warnings.warn(f"the decode step could not be captured as a CUDA graph; decoding eagerly from now on "
                              f"in this process ({_capture_failed[0]})", RuntimeWarning, stacklevel=3)
                self.logits = None
                return
        self.graph = graph


class EngineSteps:
    """The `Stepper` of `walks` on `decoder` (whose cells are theirs, in order), eager: ended cells
    leave the decoder. `first`: each walk's position of its answer's first token."""

    def __init__(self, decoder: Decoder, walks: list[Walk], first: list[int]):
        self.decoder, self.walks, self.first = decoder, walks, first
        self.alive = list(range(len(walks)))

    def __call__(self, keep: list[int], tokens: list[int]) -> torch.Tensor:
        if len(keep) < len(self.alive):
            self.decoder.keep(keep)
            self.alive = [self.alive[i] for i in keep]
        positions = torch.tensor([self.first[c] + len(self.walks[c].generated) - 1 for c in self.alive])  # [alive]
        return self.decoder.logits(self.decoder.step(positions, torch.tensor(tokens))).float()  # [alive, vocab]


class CapturedSteps:
    """The `Stepper` of `walks` on `decoder` through a `StaticStep` (captured on CUDA): every cell
    steps every time (an ended one on its last token, at its last position) and the logits of the
    cells still decoding are returned."""

    def __init__(self, decoder: Decoder, walks: list[Walk], first: list[int], capture: bool):
        self.step, self.walks, self.first = StaticStep(decoder, capture), walks, first
        self.tokens = torch.zeros(len(walks), dtype=torch.long)  # [cell] each cell's last token fed
        self.alive = list(range(len(walks)))

    def __call__(self, keep: list[int], tokens: list[int]) -> torch.Tensor:
        self.alive = [self.alive[i] for i in keep]
        self.tokens[self.alive] = torch.tensor(tokens)
        positions = torch.tensor([f + len(walk.generated) - 1 for f, walk in zip(self.first, self.walks)])  # [cell]
        logits = self.step(positions, self.tokens)  # [cell, vocab]
        return logits if len(self.alive) == len(self.walks) else logits[torch.tensor(self.alive, device=logits.device)]


def engine_steps(model: LoadedModel, decoder: Decoder, walks: list[Walk], first: list[int],
                 hooks: Hooks | None) -> EngineSteps | CapturedSteps:
    """The engine's `Stepper` for `walks` on `decoder`: captured (`CapturedSteps`) where
    `graphs_wanted`, eager (`EngineSteps`) otherwise."""
    if graphs_wanted(model, hooks):
        return CapturedSteps(decoder, walks, first, capture=model.device.type == "cuda")
    return EngineSteps(decoder, walks, first)


@torch.inference_mode()
def continue_answer(model: LoadedModel, prefilled: KVCache, logits: torch.Tensor, rule: StopRule,
                    hooks=None, observe: Callable[[torch.Tensor, list[int]], None] | None = None) -> Walk:
    """Greedy decoding on from a prefill that already ran, one row a step through the engine (captured
    on CUDA without hooks): its last position's `logits` ([vocab]) over `prefilled` ([layer, kv_head,
    pos, d_head]); `hooks` run on every step (one cell); `observe` as `decode_greedy`'s."""
    hooks = Hooks.of(hooks, model.adapter)
    walk = Walk()
    if rule.max_new_tokens < 1:
        return walk
    none = torch.zeros(0, dtype=torch.long)
    empty = prefilled.keys.new_zeros(prefilled.n_layers, prefilled.keys.shape[1], 0, prefilled.keys.shape[3])
    decoder = Decoder(model, prefilled, [Cell(none, none, none, empty, empty)], rule.max_new_tokens, hooks)
    steps = engine_steps(model, decoder, [walk], [prefilled.n_positions], hooks)
    return decode_greedy(rule, [walk], steps, logits[None], observe)[0]


@torch.inference_mode()
def decode_cells(model: LoadedModel, base: KVCache, walks: list[Walk], known: dict[int, Cell], first: int | list[int],
                 rule: StopRule, max_bytes: int, hooks: Hooks | None,
                 observe: Callable[[int, torch.Tensor], None] | None = None) -> None:
    """Decode on the walks of `known` (walk index -> a `Cell` of the rows it has computed: repair,
    suffix, answer so far) over `base`, one batched row per step, in groups whose known rows fit in
    `max_bytes`; `first`: the position of an answer's first token (or each walk's). A walk's index
    is its cell's in `HookPoint.cells`. `observe(walk, logits)` sees each step's logits ([vocab])."""
    per_row = kv_bytes_per_position(model)
    firsts = [first] * len(walks) if isinstance(first, int) else list(first)
    order = list(known)
    sizes = [known[c].known_positions.numel() for c in order]
    for group in pack_sizes(sizes, lambda members: len(members) * (sizes[members[-1]] + rule.max_new_tokens)
                            * per_row <= max_bytes):
        cells = [order[g] for g in group]
        decoder = Decoder(model, base, [known[c] for c in cells], rule.max_new_tokens, hooks, cells)
        group_walks, starts = [walks[c] for c in cells], [firsts[c] for c in cells]
        seen = None if observe is None else (
            lambda logits, alive, cells=cells: [observe(cells[a], logits[j]) for j, a in enumerate(alive)])
        decode_greedy(rule, group_walks, engine_steps(model, decoder, group_walks, starts, hooks), observe=seen)
