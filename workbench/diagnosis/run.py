"""`diagnose(model, example, config)`: one example, every signal, every repair.

Signals are computed once (`SignalSet`) and serve every selector and budget. Every distinct
row set is a cell of one batched pass (`engine.answers.answer_cells`): repair, suffix prefill and
the dense answer teacher-forced share it, and only answers that leave the dense one decode
further. Each repair's outcome is the receiver's greedy answer, its flip against the dense
answer, EM/F1 against gold, the dense answer's log-probability under the repaired cache, and
the deviation left at every layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.context import Context, build_context
from workbench.decode import Answer
from workbench.diagnosis.config import DiagnoseConfig
from workbench.diagnosis.evidence import (
    EvidenceAttention, attention_rows, attention_table, ranking_rows, recall_precision, RANKING_COLUMNS,
)
from workbench.diagnosis.graded import graded, ran_on
from workbench.diagnosis.layer_effects import SuffixCapture, effects_table
from workbench.diagnosis.record import (
    AnswerRecord, Answers, AttributionSummary, ContextSummary, Diagnosis, Timing, hook_record,
)
from workbench.diagnosis.tables import (
    ATTRIBUTION_COLUMNS, answer_tokens_table, layer_signals_table, residual_rows, token_signals_table, tokens_table,
)
from workbench.engine.answers import CellAnswer, answer_cells
from workbench.engine.decode import StopRule
from workbench.engine.hooks import Hooks, named_pass, with_reads
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel
from workbench.selectors import SelectorSpec, attention_pairs, choose, parse_selectors, random_scores
from workbench.signals import Cost, SignalSet, deviation_frame
from workbench.signals.deviation import ResidualMeter
from workbench.tasks import Example
from workbench.version import __version__


def _record(answer: Answer, example: Example) -> AnswerRecord:
    em, f1, contains = example.score(answer.text)  # "em" of an all-values gold: every value named
    return AnswerRecord(answer.text, tuple(answer.token_ids), answer.stopped, em, f1, contains,
                        example.retrieved(answer.text))


ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
STAGES = ("context", "signals", "repairs")


def _reporter(progress: bool | ProgressFn, example_id: str) -> ProgressFn:
    """A callable from `progress`: itself, a tqdm bar (True) or nothing (False)."""
    if callable(progress):
        return progress
    if not progress:
        return lambda stage, done, total: None
    bar = tqdm(total=1, desc=f"example {example_id}", unit="step")

    def report(stage: str, done: int, total: int) -> None:
        bar.set_description(f"example {example_id}: {stage}")
        bar.total, bar.n = total, done
        bar.refresh()
    return report


def diagnose(model: LoadedModel, example: Example, config: DiagnoseConfig | None = None, *,
             ctx: Context | None = None, progress: bool | ProgressFn = True, hooks=None, layer_effects: bool = False,
             **overrides) -> Diagnosis:
    """Diagnose one example under `config` (keywords override its fields, e.g. `budgets=(0.2,)`).

    Every input is checked before any model work. `ctx` reuses a Context already built for
    this example. `progress` is True (a progress bar), False, or a callable `(stage, done,
    total)` called as the stages (`STAGES`) advance: the repairs stage counts cells done.
    With `config.attribution`, the AtP check runs (first-order estimates vs actual patching
    of `patch_max_tokens` tokens, K+V, K only, V only). `hooks` ({hook point name: fn(tensor,
    hook)}, `engine.hooks`) run on every pass but the dense reference's: each cell's (the splice's
    and each repair's, with their answers) and the signals' (`SignalSet`: the suffix pass and its
    draft, the saliency's forward and backward, the check layer, the patching), so an ablated head
    changes the selections as well as the answers, never what they are judged by;
    the Diagnosis records them (`Diagnosis.hooks`: each point's functions by qualified name).
    `layer_effects` adds the "layer_effects" table (`diagnosis.layer_effects`) of every selection
    (a drawn one's first draw), read by hooks from the cells' pass (after `hooks`: it sees what
    they left) and the dense one, not run again.

    Stages: `_selections` (every selector, draw and budget as a `Selection`), `_cells` (the
    distinct cells in one batched pass, and dense's), `_outcomes` (a row per selection), `_tables`.
    """
    config = (config or DiagnoseConfig()).with_(**overrides).checked()
    hooks = Hooks.of(hooks, model.adapter)  # names, functions and container checked before any model work
    if ctx is not None and ctx.dense is None:
        raise WorkbenchError("diagnose needs a dense reference (its flips, residuals and graded outcomes are "
                             "judged against the dense answer); the context given has none (dense=None)")
    specs = parse_selectors(config.selectors)
    report = _reporter(progress, example.id)
    started = time.perf_counter()
    report("context", 0, 1)
    ctx = ctx or build_context(model, example, rerotation=config.rerotation)
    t_context = time.perf_counter() - started
    signals = SignalSet(ctx, config.signal_options, hooks)  # the signals' passes run under the hooks too

    pool = ctx.layout.pool_positions(config.pool)  # [n_pool]
    evidence = ctx.layout.evidence_in(pool)  # [n_evidence] the evidence rows in the pool, or None
    evidence = evidence if evidence is not None and len(evidence) else None
    scorers: dict[tuple[str, str], torch.Tensor] = {}  # (selector, "selector") -> its scores over the pool
    selections = _selections(model, specs, signals, config, pool, report, scorers)
    cells = _cells(model, ctx, selections, config, hooks, layer_effects, report)
    dense, dense_ids = _record(cells.dense.answer, example), cells.dense_ids
    spliced = _record(cells.answers[SPLICE].answer, example)
    rows = _outcomes(example, ctx, config, len(pool), selections, cells, dense, dense_ids, evidence)
    tables, check = _tables(model, signals, specs, config, dense_ids, selections, cells, rows)
    tables |= _evidence_tables(signals, scorers, pool, evidence, selections, cells)
    segments = tuple({"name": s.name, "kind": s.kind, "start": s.start, "end": s.end} for s in ctx.layout.segments)
    timing = Timing(context_s=t_context, signals_s=sum(c.seconds for c in signals.costs.values()),
                    repairs_s=cells.seconds, n_repairs=len(cells.answers), total_s=time.perf_counter() - started)
    report("repairs", len(cells.answers), len(cells.answers))
    return Diagnosis(
        example=example, config=config, model=model.describe(), answers=Answers(dense, spliced),
        context=ContextSummary(ctx.layout.n_tokens, ctx.n_reused, segments, ctx.layer0_error(), ctx.rerotation,
                               tuple(ctx.rope_floor.tolist()) if ctx.rope_floor is not None else (),
                               ctx.splice_tolerance(),
                               None if ctx.layout.evidence is None else tuple(ctx.layout.evidence.tolist())),
        tables=tables, timing=timing,
        attribution=AttributionSummary(check.summary(), {k: vars(v) for k, v in check.correlations.items()})
        if check else None,
        draft_ids=tuple(signals["draft"].draft_ids) if "draft" in signals else (),
        workbench_version=__version__, hooks=hook_record(hooks), ctx=ctx)


@dataclass(frozen=True, eq=False)
class Selection:
    """One selector's choice at one budget (a drawn one's: at one draw), in absolute positions."""

    selector: str  # its label, e.g. "bcr:grow"
    unit: str
    budget: float
    draw: int | None  # None: not a drawn selector
    positions: torch.Tensor  # [n_recomputed] the absolute positions it recomputes, ascending
    context: torch.Tensor | None  # bool [key]: the keys its rows may attend to (None: every key)
    unit_record: dict  # `choose`'s record: n_requested, n_units, skipped, budget_matched
    n_spent_exact: int  # positions recomputed that the splice left exact (outside the changed ones)
    attention: dict  # attention_pairs, attention_saved (`_attention`)

    @property
    def cell(self) -> tuple:
        """What makes two repairs the same cell: their rows and the keys their rows may attend to."""
        context = None if self.context is None else tuple(self.context.nonzero().flatten().tolist())
        return tuple(self.positions.tolist()), context

    def row(self) -> dict:
        """Its row of the "selections" table."""
        return {"selector": self.selector, "unit": self.unit, "budget": self.budget, "draw": self.draw,
                **self.unit_record, "n_recomputed": len(self.positions), "n_spent_exact": self.n_spent_exact,
                **self.attention, "positions": self.positions.tolist()}


SPLICE = ((), None)  # the cell of the empty row set: the splice's own answer


def _selections(model: LoadedModel, specs: list[SelectorSpec], signals: SignalSet, config: DiagnoseConfig,
                pool: torch.Tensor, report: ProgressFn, scorers: dict) -> list[Selection]:
    """Every selector's `Selection` at every draw (a drawn one's) and budget, in that order; each
    informed selector's scores over the pool go into `scorers` (those that rank nothing, all equal,
    left out). pool: [n_pool]"""
    ctx = signals.ctx
    in_reused = torch.searchsorted(ctx.reused_positions, pool)  # [n_pool]: where each sits among the scores
    selections = []
    for i, spec in enumerate(specs):
        report("signals", i, len(specs))
        for draw in range(config.coin_draws) if spec.info.drawn else (None,):
            # [n_reused]: signals are computed once and serve every selector, draw and budget
            if spec.matches is not None:  # a matched coin places the units of the selector it copies
                scores = spec.matches.info.score(signals)
            else:
                scores = spec.info.score(signals, draw) if spec.info.drawn else spec.info.score(signals)
                if not spec.info.drawn and len(pool) and bool((scores[in_reused] != scores[in_reused][0]).any()):
                    scorers[(spec.label, "selector")] = scores[in_reused]
            for budget in config.budgets:
                seed = signals.coin_seed(draw) if spec.matches is not None else None
                rows, unit_record = choose(spec, scores[in_reused], budget, pool, config.unit_options,
                                           coin_seed=seed, signals=signals)
                positions = pool[rows]  # [n_recomputed]: positions from here on, never pool rows
                context = _context(spec, signals, positions, scores, budget, seed)
                n_spent_exact = int((~torch.isin(positions, ctx.layout.changed_positions)).sum())
                attention = _attention(model, positions, ctx.layout.suffix_start, context)
                selections.append(Selection(spec.label, spec.unit, budget, draw, positions, context, unit_record,
                                            n_spent_exact, attention))
    return selections


@dataclass(frozen=True, eq=False)
class Cells:
    """The batched pass's answers: one per distinct cell (`Selection.cell`, and `SPLICE`), dense's."""

    answers: dict  # cell -> CellAnswer, the splice's first
    dense: CellAnswer  # the dense answer, decoded once through the same pass: its first-token distribution
    dense_ids: list[int]  # the dense answer as a decision: its tokens and the end-of-turn token it stopped on
    seconds: float  # the two passes'
    layer_effects: pd.DataFrame | None  # the "layer_effects" table, when asked for
    # the question's attention mass on the evidence rows, {cell or "dense": {layer: (last, mean)}}
    evidence_attention: dict


def _cells(model: LoadedModel, ctx: Context, selections: list[Selection], config: DiagnoseConfig, hooks,
           layer_effects: bool, report: ProgressFn) -> Cells:
    """The dense answer (decoded once, through the batched pass without `hooks`), then every
    distinct cell of `selections` (the empty row set answers for the splice) in one batched pass
    under `hooks` with the dense answer teacher-forced, and the layer effects."""
    row_sets = {SPLICE: (torch.empty(0, dtype=torch.long), None)}
    for s in selections:
        row_sets.setdefault(s.cell, (s.positions, s.context))
    index = {cell: i for i, cell in enumerate(row_sets)}  # cell -> its place in the pass
    # layer_effects: the suffix's residuals of the splice, each selection (a drawn one's first draw) and dense,
    # kept from the passes below (after the user's hooks) rather than run again
    effects = {(s.selector, s.budget): index[s.cell] for s in selections if not s.draw} if layer_effects else {}
    capture = SuffixCapture(ctx, [0, *effects.values()]) if layer_effects else None
    dense_capture = SuffixCapture(ctx) if layer_effects else None
    # the question's attention to the evidence, read (never edited) from the same two passes, after the caller's hooks
    evidence = ctx.layout.evidence if ctx.layout.evidence is not None and len(ctx.layout.evidence) else None
    attention, dense_attention = ((EvidenceAttention(model, base, ctx.layout.suffix_start, len(ctx.suffix_ids), evidence)
                                   for base in (ctx.spliced, ctx.dense)) if evidence is not None else (None, None))
    started = time.perf_counter()
    # The dense answer, computed once: decoded on the dense cache through the batched pass (its own
    # reference, scored as it is decoded), with the first-token distribution the graded outcomes read.
    (dense,) = answer_cells(model, ctx.dense, ctx.layout.ids, [row_sets[SPLICE][0]], ctx.suffix_ids, None,
                            config.max_new_tokens, hooks=_with_readers(None, dense_capture, dense_attention),
                            stop_at_newline=config.stop_at_newline)
    dense_ids = StopRule.of(model, stop_at_newline=config.stop_at_newline).decision(dense.answer)
    with named_pass(hooks, "cells"):
        answers = answer_cells(model, ctx.spliced, ctx.layout.ids, [rows for rows, _ in row_sets.values()],
                               ctx.suffix_ids, dense_ids, config.max_new_tokens,
                               progress=lambda done, total: report("repairs", done, total),
                               contexts=[context for _, context in row_sets.values()],
                               hooks=_with_readers(hooks, capture, attention), stop_at_newline=config.stop_at_newline)
    seconds = time.perf_counter() - started
    table = None
    if layer_effects:  # the splice is cell 0, the empty row set; a cell's residuals read once, its lens run once
        by_cell = {cell: capture.residuals(cell) for cell in {0, *effects.values()}}
        table = effects_table(ctx, by_cell[0], dense_capture.residuals(0),
                              {key: by_cell[cell] for key, cell in effects.items()})
    found = {} if attention is None else {cell: attention.found.get(i, {}) for cell, i in index.items()}
    if dense_attention is not None:
        found["dense"] = dense_attention.found.get(0, {})
    return Cells(dict(zip(row_sets, answers)), dense, dense_ids, seconds, table, found)


def _with_readers(hooks, *readers):
    """The caller's hooks, then the readers' (each None or an object with `hooks()`); the caller's
    alone when no reader is there, so a pass without any stays hook-free."""
    extra = [r.hooks() for r in readers if r is not None]
    return with_reads(hooks, *extra) if extra else hooks


def _outcomes(example: Example, ctx: Context, config: DiagnoseConfig, n_pool: int, selections: list[Selection],
              cells: Cells, dense: AnswerRecord, dense_ids: list[int],
              evidence: torch.Tensor | None) -> tuple[list[dict], list[dict]]:
    """The "outcomes" rows (one per selection: its answer against dense and gold, and the evidence
    rows of the pool (`evidence`) it recomputed) and the "residual" rows (the deviation its repair
    left at every layer)."""
    meter = ResidualMeter(ctx.spliced, ctx.dense, ctx.reused_positions)
    outcomes, residuals = [], []
    for s in selections:
        cell = cells.answers[s.cell]
        answer = _record(cell.answer, example)
        flip, flip_strict = answer.flips(dense)
        outcomes.append({"example_id": example.id, "selector": s.selector, "unit": s.unit, "budget": s.budget,
                         "draw": s.draw, "pool": config.pool, "n_pool": n_pool, "n_reused": ctx.n_reused,
                         "n_recomputed": len(s.positions), "n_spent_exact": s.n_spent_exact,
                         "dense_answer": dense.text, "answer": answer.text, "flip": flip, "flip_strict": flip_strict,
                         "em": answer.em, "f1": answer.f1, "contains": answer.contains,
                         "retrieved": answer.retrieved, "answer_tokens": answer.n_tokens,
                         "ran_on": ran_on(answer.text, answer.n_tokens, dense.text, dense.n_tokens),
                         **recall_precision(s.positions, evidence),
                         "dense_logprob": cell.reference_logprob,
                         **graded(cell, dense.text, dense_ids, cells.dense.first_logp),
                         **s.attention, "seconds": cells.seconds / len(cells.answers)})
        residual = meter.of(cell.repaired.positions, cell.repaired.keys, cell.repaired.values)
        residuals += residual_rows(s.selector, s.unit, s.budget, residual, s.draw)
    return outcomes, residuals


def _tables(model: LoadedModel, signals: SignalSet, specs: list[SelectorSpec], config: DiagnoseConfig,
            dense_ids: list[int], selections: list[Selection], cells: Cells, rows: tuple[list[dict], list[dict]]):
    """The Diagnosis's tables, and the attribution check (None unless `config.attribution`). The
    costs are read before the check runs: a selector's cost is that of the records it read."""
    ctx = signals.ctx
    outcomes, residuals = rows
    costs = [{"selector": spec.label, **spec.info.cost(signals).to_dict()} for spec in specs]
    check = signals["attribution"] if config.attribution else None
    tables = {
        "tokens": tokens_table(ctx),
        "token_signals": token_signals_table(signals),
        "layer_signals": layer_signals_table(signals),
        "deviation": deviation_frame(ctx).drop(columns=["example_id"], errors="ignore"),
        "selections": _with_draws(pd.DataFrame([s.row() for s in selections])),
        "outcomes": _with_draws(pd.DataFrame(outcomes)),
        "residual": _with_draws(pd.DataFrame(residuals)),
        "costs": pd.DataFrame(costs),
        "signal_costs": pd.DataFrame([{"signal": name, **cost.to_dict()} for name, cost in signals.costs.items()],
                                     columns=["signal", *Cost().to_dict()]),
        "attribution": check.frame if check else pd.DataFrame(columns=ATTRIBUTION_COLUMNS),
        "answer_tokens": _with_draws(answer_tokens_table(model.tokenizer, dense_ids, [
            ("dense", None, None, cells.dense), ("spliced", None, None, cells.answers[SPLICE]),
            *((s.selector, s.budget, s.draw, cells.answers[s.cell]) for s in selections)])),
    }
    if cells.layer_effects is not None:
        tables["layer_effects"] = cells.layer_effects
    return tables, check


def _evidence_tables(signals: SignalSet, scorers: dict, pool: torch.Tensor, evidence: torch.Tensor | None,
                     selections: list[Selection], cells: Cells) -> dict[str, pd.DataFrame]:
    """The "evidence_ranking" table (each token signal's and informed selector's average precision
    against the evidence rows of the pool) and the "evidence_attention" table (dense, the splice and
    each selection, per layer); empty where the example has no evidence (in the pool)."""
    in_reused = torch.searchsorted(signals.ctx.reused_positions, pool)  # [n_pool]
    signal_scores = {(name, "signal"): values[in_reused] for name, values in signals.values("token").items()}
    ranking = pd.DataFrame(ranking_rows({**signal_scores, **scorers}, pool, evidence), columns=RANKING_COLUMNS)
    found = cells.evidence_attention
    rows = []
    if found:
        rows += attention_rows("dense", None, None, found["dense"]) + attention_rows("spliced", None, None, found[SPLICE])
        for s in selections:
            rows += attention_rows(s.selector, s.budget, s.draw, found[s.cell])
    return {"evidence_ranking": ranking, "evidence_attention": attention_table(rows)}


def _with_draws(table: pd.DataFrame) -> pd.DataFrame:
    """The `draw` column as nullable integers (missing for selectors that are not drawn)."""
    return table.assign(draw=table["draw"].astype("Int64")) if "draw" in table else table


def _context(spec: SelectorSpec, signals: SignalSet, positions: torch.Tensor, scores: torch.Tensor, budget: float,
             coin_seed: int | None) -> torch.Tensor | None:
    """The context mask the repair of `positions` is restricted to (None: every key). A matched coin
    of a restricting selector (`coin:relaxkv`) ranks its context rows by a coin of its own."""
    if spec.informed.restrict is None or not len(positions):
        return None
    ranking = scores if spec.matches is None else random_scores(signals.ctx.n_reused, coin_seed ^ 1)
    return spec.informed.restrict(signals, positions, ranking, budget)


def _attention(model: LoadedModel, positions: torch.Tensor, n_keys: int, context: torch.Tensor | None) -> dict:
    """Query-key pairs (over layers) the repair scores, and those a restricted context saved."""
    full = attention_pairs(model, positions, n_keys)
    used = full if context is None else attention_pairs(model, positions, n_keys, context)
    return {"attention_pairs": used, "attention_saved": full - used}
