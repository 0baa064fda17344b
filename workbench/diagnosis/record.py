"""`Diagnosis`: everything measured on one example, as a typed record with tidy tables.

Tables (pandas DataFrames, saved as parquet beside `diagnosis.json`):

    tokens         position, token, segment, passage, reused, evidence
    token_signals  signal, position, value           one score per reused token and signal
    layer_signals  signal, layer, position, value    per-layer signals (gradients, attention)
    deviation      layer, position, segment, token, kind, metric, value   splice vs dense
    selections     selector, unit, budget, draw, n_requested, n_units, skipped, budget_matched,
                   n_recomputed, n_spent_exact, attention_pairs, attention_saved,
                   positions (list of absolute positions)
    outcomes       example_id, selector, unit, budget, draw, pool, n_pool, n_reused, n_recomputed,
                   n_spent_exact, dense_answer, answer, flip, flip_strict, em, f1, contains, retrieved,
                   answer_tokens, ran_on, evidence_recall, evidence_precision, dense_logprob,
                   graded outcomes, attention_pairs, attention_saved, seconds
    residual       selector, unit, budget, draw, layer, kind, value   deviation left after repair

`draw` numbers a seeded control's draws (the coin: 5 by default) and is missing for every other
selector. `pool` is the candidate set the budget is a fraction of (`n_pool` rows); rows spent on
rows exact by construction (the first passage) are counted in `n_spent_exact`. `attention_pairs`
counts the query-key pairs (over layers) a repair scored, `attention_saved` those its restricted
context skipped (RelaxKV; 0 otherwise). `retrieved` is the example's retrieval measure (RULER's
string match, or contains: whether the answer names the evidence, however it ends), `ran_on`
whether the answer runs on past the point where dense's ended (`graded.ran_on`), `answer_tokens`
its length; `evidence_recall` / `evidence_precision` are NaN where the example has no evidence in
the pool (`diagnosis.evidence`).
    costs          selector, forward_passes, backward_passes, decode_steps, layer_tokens,
                   needs_dense, seconds      the summed cost of the records each selector read
    signal_costs   signal, forward_passes, ..., seconds    what each record computed cost, once
    attribution    position, segment, kind, estimate, actual      AtP check sample
    answer_tokens  cell, budget, draw, index, token_id, token, logprob   the dense answer's tokens
                   (and the end-of-turn token it stopped on) teacher-forced under each cell: "dense",
                   "spliced", each selector's repair; logprob = log p of that token there (their sum
                   is the outcome's dense_logprob; absent in diagnoses made before 2026-12-02)
    evidence_ranking    scorer, kind, n_pool, n_evidence, average_precision, chance   each token signal's
                   and informed selector's ranking of the evidence rows of the pool
    evidence_attention  cell, budget, draw, layer, mass_last, mass_mean   the question's attention on
                   the evidence rows under dense, the splice and each selection (both evidence tables
                   empty without evidence, and absent in diagnoses made before 2026-12-05)

A record never imports its renderer: `show()` and `_repr_html_` call the function that
`workbench.plots.diagnosis` registers with `register_renderer` (importing `workbench` does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from workbench.atomic import write_folder
from workbench.context import Context
from workbench.diagnosis.config import DiagnoseConfig
from workbench.diagnosis.graded import ran_on
from workbench.errors import WorkbenchError
from workbench.registry import qualified_name
from workbench.selectors import parse_selector
from workbench.tasks import Example, is_flip

SCHEMA_VERSION = 2
FILE = "diagnosis.json"
TABLES = ("tokens", "token_signals", "layer_signals", "deviation", "selections", "outcomes", "residual",
          "costs", "signal_costs", "attribution", "answer_tokens", "evidence_ranking", "evidence_attention")


@dataclass(frozen=True)
class AnswerRecord:
    """A greedy answer with its scores against gold."""

    text: str
    token_ids: tuple[int, ...]
    stopped: bool  # ended on an end-of-turn token
    em: float
    f1: float
    contains: float = 0.0  # some accepted answer, normalized, appears in the answer
    retrieved: float = float("nan")  # the example's retrieval measure (`Example.retrieved`), in [0, 1]

    @property
    def n_tokens(self) -> int:
        """The answer's length in generated tokens (the end-of-turn token it stopped on not counted)."""
        return len(self.token_ids)

    def flips(self, dense: AnswerRecord) -> tuple[bool, bool]:
        """(flip after normalization, token ids differ) against the dense answer: the one flip test."""
        return is_flip(self.text, dense.text), self.token_ids != dense.token_ids

    @classmethod
    def from_dict(cls, data: dict, example: Example | None = None) -> AnswerRecord:
        """The record of `to_document`; one saved before `retrieved` existed gets it from its text and
        `example` (a function of the two alone), or NaN without one."""
        text = str(data["text"])
        retrieved = data.get("retrieved", example.retrieved(text) if example is not None else float("nan"))
        return cls(text, tuple(int(t) for t in data.get("token_ids", ())), bool(data.get("stopped")),
                   float(data.get("em", 0.0)), float(data.get("f1", 0.0)), float(data.get("contains", 0.0)),
                   float(retrieved))


@dataclass(frozen=True)
class Answers:
    """The two answers every repair is judged against."""

    dense: AnswerRecord
    spliced: AnswerRecord

    @property
    def splice_flip(self) -> bool:
        return self.spliced.flips(self.dense)[0]

    @property
    def splice_flip_strict(self) -> bool:
        return self.spliced.flips(self.dense)[1]

    @property
    def splice_ran_on(self) -> bool:
        """Whether the splice's answer runs on past the point where dense's ended (`graded.ran_on`)."""
        return ran_on(self.spliced.text, self.spliced.n_tokens, self.dense.text, self.dense.n_tokens)


@dataclass(frozen=True)
class ContextSummary:
    """The example's context as the model saw it."""

    n_tokens: int
    n_reused: int
    segments: tuple[dict, ...]  # {name, kind, start, end} (end exclusive)
    layer0_error: dict  # {"k": max |dK|, "v": max |dV|} of the splice vs dense at layer 0
    rerotation: str = "delta"  # how the splice moved its keys
    rope_floor: tuple[float, ...] = ()  # [layer]: relative key error of delta-RoPE rounding alone
    splice_tolerance: dict = field(default_factory=dict)  # {"k", "v"}: what rounding explains at layer 0
    evidence: tuple[int, ...] | None = None  # the gold evidence rows (`Layout.evidence`); None: none defined


@dataclass(frozen=True)
class Timing:
    """Where the seconds went."""

    context_s: float = 0.0
    signals_s: float = 0.0
    repairs_s: float = 0.0
    n_repairs: int = 0
    total_s: float = 0.0


@dataclass(frozen=True)
class AttributionSummary:
    """The attribution-patching check in words and numbers (rank correlations by kind)."""

    summary: str
    correlations: dict  # kind -> {rho, p_value, n}


_renderer: dict[str, Callable] = {}


def register_renderer(html: Callable[[Diagnosis], str], show: Callable[..., None]) -> None:
    """Called by `workbench.plots.diagnosis`: how a Diagnosis draws itself in Jupyter."""
    _renderer.update(html=html, show=show)


@dataclass
class Diagnosis:
    """One example's splice, signals, selections and repair outcomes."""

    example: Example
    config: DiagnoseConfig
    model: dict  # LoadedModel.describe()
    answers: Answers
    context: ContextSummary
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    timing: Timing = Timing()
    attribution: AttributionSummary | None = None
    draft_ids: tuple[int, ...] = ()
    workbench_version: str = ""
    hooks: dict | None = None  # {hook point: [qualified names]} it ran under (`hook_record`); None: unhooked
    ctx: Context | None = field(default=None, repr=False, compare=False)  # live caches; never saved

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)

    @property
    def example_id(self) -> str:
        return self.example.id

    @property
    def hooked(self) -> bool:
        """Whether it was computed under hooks: not an unmodified model's diagnosis."""
        return bool(self.hooks)

    @property
    def attribution_text(self) -> str:
        return self.attribution.summary if self.attribution else "not computed (attribution=False)"

    def signal(self, name: str) -> pd.Series:
        """One token signal as a Series indexed by position."""
        rows = self.tables["token_signals"]
        rows = rows[rows["signal"] == name]
        if rows.empty:
            raise WorkbenchError(f"no token signal {name!r}; have {sorted(self.token_signals['signal'].unique())}")
        return rows.set_index("position")["value"]

    def picks(self, selector: str, budget: float, draw: int = 0) -> list[int]:
        """Absolute positions a selector (label as in `outcomes`) recomputes at a budget; for a
        drawn control (the coin), those of one draw."""
        sel = self.tables["selections"]
        row = sel[(sel["selector"] == selector) & ((sel["budget"] - budget).abs() < 1e-9)]
        if "draw" in row and row["draw"].notna().any():
            row = row[row["draw"] == draw]
        if row.empty:
            raise WorkbenchError(f"no selection for {selector!r} at budget {budget}; have selectors "
                                 f"{sorted(sel['selector'].unique())} and budgets {sorted(sel['budget'].unique())}")
        return list(row.iloc[0]["positions"])

    def summary(self) -> pd.DataFrame:
        """Outcomes as a compact table: one row per selector and budget."""
        cols = ["selector", "budget", "n_recomputed", "answer", "flip", "flip_strict", "em", "dense_logprob"]
        return self.tables["outcomes"][cols]

    # ------------------------------------------------------------------ Jupyter

    def show(self, budget: float | None = None, selectors=None) -> None:
        """Draw the per-example figures inline (token strip, picks, heatmaps, residual deviation)."""
        if "show" not in _renderer:
            raise WorkbenchError("no renderer registered: import workbench.plots")
        _renderer["show"](self, budget=budget, selectors=selectors)

    def _repr_html_(self) -> str:
        return _renderer["html"](self) if "html" in _renderer else f"<pre>{self!r}</pre>"

    # ------------------------------------------------------------------ files

    def to_document(self) -> dict:
        """diagnosis.json's content (schema version 2)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "example": self.example.to_dict(),
            "config": self.config.to_dict(),
            "model": self.model,
            "answers": {"dense": asdict(self.answers.dense), "spliced": asdict(self.answers.spliced)},
            "context": asdict(self.context),
            "timing": asdict(self.timing),
            "attribution": asdict(self.attribution) if self.attribution else None,
            "draft_ids": list(self.draft_ids),
            "workbench_version": self.workbench_version,
            **({"hooks": self.hooks} if self.hooks else {}),  # written only when hooked: older documents read alike
        }

    def save(self, folder: str | Path, overwrite: bool = False, guard: Callable[[], None] | None = None) -> Path:
        """Write diagnosis.json + one parquet per table into `folder`, atomically (`guard`, raising, stops
        the write before anything is made or renamed: `atomic.atomic_folder`)."""
        folder = Path(folder)
        if folder.exists() and not overwrite:
            raise WorkbenchError(f"{folder} exists; pass overwrite=True (or --force) to replace it")
        return write_folder(folder, {FILE: self.to_document()}, self.tables, guard)

    @classmethod
    def from_document(cls, doc: dict, tables: dict[str, pd.DataFrame]) -> Diagnosis:
        """The record from diagnosis.json's content and its tables (schema 1 or 2)."""
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if version == 1:
            doc, tables = _upgrade_v1(doc, tables)
        elif version != SCHEMA_VERSION:
            raise WorkbenchError(f"diagnosis schema version {version!r} is not one this version reads "
                                 f"(1 or {SCHEMA_VERSION}); re-run the diagnosis with this version")
        answers = doc["answers"]
        attribution = doc.get("attribution")
        example = Example.from_dict(doc["example"])
        outcomes = tables.get("outcomes")
        if outcomes is not None and "answer" in outcomes and "retrieved" not in outcomes:  # made before it was
            tables = {**tables, "outcomes": outcomes.assign(  # recorded: a function of the text and the example
                retrieved=[example.retrieved(str(a)) for a in outcomes["answer"]])}
        return cls(
            example=example,
            config=DiagnoseConfig.from_dict(doc["config"]),
            model=doc.get("model", {}),
            answers=Answers(AnswerRecord.from_dict(answers["dense"], example),
                            AnswerRecord.from_dict(answers["spliced"], example)),
            context=ContextSummary(**{**doc["context"], "segments": tuple(doc["context"].get("segments", ())),
                                      "rope_floor": tuple(doc["context"].get("rope_floor", ())),
                                      "evidence": _tuple_or_none(doc["context"].get("evidence"))}),
            tables=tables,
            timing=Timing(**doc.get("timing", {})),
            attribution=AttributionSummary(**attribution) if attribution else None,
            draft_ids=tuple(doc.get("draft_ids", ())),
            workbench_version=doc.get("workbench_version", ""),
            hooks=doc.get("hooks") or None,
        )

    @classmethod
    def load(cls, folder: str | Path) -> Diagnosis:
        """Read a folder written by `save` (or by a sweep): a clear error for anything else."""
        folder = Path(folder)
        meta = folder / FILE
        if not meta.is_file():
            raise WorkbenchError(f"{folder} holds no {FILE}: not a saved Diagnosis "
                                 f"(make one with `kvwb diagnose ... --out {folder}`)")
        try:
            doc = json.loads(meta.read_text())
            tables = {p.stem: pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))}
        except (OSError, ValueError) as err:
            raise WorkbenchError(f"{folder}: a file of this diagnosis is unreadable ({type(err).__name__}: "
                                 f"{err})") from None
        try:
            return cls.from_document(doc, tables)
        except (KeyError, TypeError) as err:
            raise WorkbenchError(f"{meta}: not a diagnosis document (missing or malformed {err})") from None


def hook_record(hooks) -> dict[str, list[str]] | None:
    """What a diagnosis ran under, for its record: {hook point: [each function's qualified name]}, or
    None without hooks. `hooks` is a mapping {name: fn or [fn]} or any object holding one as `fns`
    (`engine.hooks.Hooks`); only names are read, never a function called."""
    if hooks is None:
        return None
    fns = getattr(hooks, "fns", hooks)
    if not isinstance(fns, Mapping):
        return {"(hooks)": [qualified_name(hooks)]}
    out = {}
    for name, fn in fns.items():
        many = isinstance(fn, Iterable) and not callable(fn) and not isinstance(fn, (str, bytes, Mapping))
        out[str(name)] = [qualified_name(f) for f in (list(fn) if many else [fn])]
    return out or None


def hooks_text(hooks: dict | None) -> str:
    """A hook record in one line: `blocks.0.hook_attn_out: mod.fn; ...` ("" when None)."""
    return "; ".join(f"{name}: {', '.join(fns)}" for name, fns in (hooks or {}).items())


def _tuple_or_none(values) -> tuple | None:
    return None if values is None else tuple(values)


def _label(spec: str) -> str:
    """A schema-1 spec ("bcr:chunk") as today's label ("bcr"); unknown selectors stay as written."""
    try:
        return parse_selector(spec).label
    except WorkbenchError:
        return spec


def _upgrade_v1(doc: dict, tables: dict[str, pd.DataFrame]) -> tuple[dict, dict[str, pd.DataFrame]]:
    """A schema-1 document (one `info` dict; a `layout` column) read as schema 2."""
    info = doc["info"]
    config = dict(info.get("config", {}))
    config["selectors"] = [_label(s) for s in config.get("selectors", [])]
    upgraded = {
        "schema_version": SCHEMA_VERSION, "example": doc["example"], "config": config,
        "model": info.get("model", {}), "answers": info["answers"],
        "context": {"n_tokens": info.get("n_tokens", 0), "n_reused": info.get("n_reused", 0),
                    "segments": info.get("segments", []), "layer0_error": info.get("layer0_error", {})},
        "timing": info.get("timing", {}),
        "attribution": ({"summary": info["attribution_summary"], "correlations": info["attribution_correlations"]}
                        if info.get("attribution_correlations") else None),
        "draft_ids": info.get("draft_ids", []), "workbench_version": info.get("workbench_version", ""),
    }
    renamed = {name: t.rename(columns={"layout": "unit"}) for name, t in tables.items()}
    return upgraded, renamed
