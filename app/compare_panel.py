"""A against B on one example: two selectors (the rows only A picks, only B picks, both; their
answers, graded outcomes and deviation left per layer side by side), or two runs that both hold
the example (another model, another number of passages): paired by content (question and
passages), never by id alone. A kept record (`docs/records/keep.py`) holds only its outcomes:
`missing_tables` names what it lacks, `with_no_picks` lets its answers table show."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

import state
from answer_tables import answers_table
from readable import count, show_table
from widgets import ensure_choice, plain, show_figure
from workbench.app_api import Diagnosis, Example, WorkbenchError, reference_selectors
from workbench.plots import diagnosis as figures
from workbench.plots.compare import compare_figure, picks_compared


DRAWN_TABLES = ("tokens", "selections", "token_signals", "deviation", "residual")  # what the views draw from


def missing_tables(d: Diagnosis) -> list[str]:
    """The tables the per-example views draw from that `d` lacks (a kept record: all of them)."""
    return [name for name in DRAWN_TABLES if name not in d.tables]


def with_no_picks(d: Diagnosis) -> Diagnosis:
    """`d` itself, or (a record without selections) `d` with an empty one: its answers table then
    shows every cell from `outcomes`, no picks noted."""
    if "selections" in d.tables:
        return d
    return replace(d, tables={**d.tables, "selections": pd.DataFrame(columns=["selector", "budget"])})


def outcome_budgets(d: Diagnosis) -> list[float]:
    """The budgets `d`'s outcomes hold, ascending (a record's too: it keeps no selections)."""
    return sorted(float(b) for b in d.outcomes["budget"].dropna().unique()) if "outcomes" in d.tables else []


def _cell(value) -> str:
    """A value of the answers table as text: missing as empty, floats to 3 significant digits."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def side_by_side(answers: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The answers table's rows for `names` (its "cache" labels) as columns, one row per measure."""
    rows = answers.set_index("cache").reindex(names)
    return rows.T.map(_cell).reset_index(names="measure")


def selectors_against(d: Diagnosis, key: str, budget: float, token: int | None) -> None:
    """Two selectors of `d` at `budget`: their picks, answers and deviation left side by side."""
    selectors = [s for s in dict.fromkeys(d.selections["selector"]) if s not in reference_selectors()]
    if len(selectors) < 2:
        return
    st.subheader(f"A against B at b = {budget:g}")
    c1, c2 = st.columns(2)
    shown = figures.default_shown(selectors, 2)
    ensure_choice(f"{key}_vs_a", selectors, shown[0])
    ensure_choice(f"{key}_vs_b", selectors, shown[-1])
    a = c1.selectbox("A", selectors, key=f"{key}_vs_a")
    b = c2.selectbox("B", selectors, key=f"{key}_vs_b")
    if a == b:
        st.info("Choose two different selectors.")
        return
    show_figure(compare_figure(d, a, b, budget, highlight=token), f"a-vs-b-{d.example_id}-b{budget:g}",
                f"{key}_ab_picks")
    with st.expander("The rows only A, only B and both recompute, as a table"):
        st.dataframe(picks_compared(d, a, b, budget), hide_index=True, width="stretch")
    st.markdown("**Answers and graded outcomes** (against the dense answer)")
    answers = answers_table(d, [a, b], budget)
    st.dataframe(side_by_side(answers, ["dense", f"repaired: {a}", f"repaired: {b}"]), hide_index=True,
                 width="stretch", key=f"{key}_ab_answers")
    if not d.residual.empty:
        kind = st.session_state.get(f"{key}_res_kind", "v")
        references = [s for s in dict.fromkeys(d.residual["selector"]) if s in reference_selectors()]
        show_figure(figures.residual_figure(d, budget, kind, selectors=[*references, a, b]),
                    f"a-vs-b-residual-{d.example_id}-b{budget:g}", f"{key}_ab_residual")


def same_example(a: Example, b: Example) -> bool:
    """Whether two examples are one: the same question and passages (ids may differ or clash)."""
    return a.question == b.question and tuple(a.passages) == tuple(b.passages)


def _holds(folder: Path, example: Example) -> bool:
    try:
        return same_example(state.read_diagnosis(folder).example, example)
    except (WorkbenchError, OSError):
        return False


def runs_holding(example: Example, but: str) -> tuple[dict[str, Path], list[str]]:
    """The sweep and diagnosis runs other than `but` holding `example` (its question and passages,
    under any id): run name -> that example's folder; and the runs whose example of the same id
    differs (refused)."""
    same, differ = {}, []
    for run in state.scan_runs(("sweep", "diagnosis")):
        if run.name == but:
            continue
        try:
            ids, questions, folders = state.run_examples(run)
        except (WorkbenchError, OSError):
            continue
        asked = [i for i in ids if questions.get(i) == example.question]  # the question first: no file read
        asked.sort(key=lambda i: i != example.id)
        found = next((folders[i] for i in asked if _holds(folders[i], example)), None)
        if found is not None:
            same[run.name] = found
        elif example.id in ids:
            differ.append(run.name)
    return same, differ


def _one_run(column, name: str, diag: Diagnosis, budget: float, chosen: list[str], key: str) -> None:
    """One side of "Against another run": its answers at the budget nearest `budget`, its deviation left."""
    found = outcome_budgets(diag)
    if not found:
        column.info(f"{plain(name)} holds no outcomes for this example.")
        return
    at = min(found, key=lambda b: abs(b - budget))
    names = [s for s in chosen if s in set(diag.outcomes["selector"])]
    column.markdown(f"**{plain(name)}** · example {plain(diag.example_id)} · {plain(diag.model.get('name', '?'))} · "
                    f"{len(diag.example.passages)} passages, {diag.context.n_tokens} tokens · b = {at:g}")
    answers = answers_table(with_no_picks(diag), names, at)
    show_table(answers, {c: c for c in answers.columns}, {"rows recomputed": count}, key=f"{key}_answers",
               pinned=("cache",), into=column)  # dense's rows recomputed: blank
    residual = diag.tables.get("residual")
    if residual is not None and not residual.empty:
        with column:
            show_figure(figures.residual_figure(diag, at, "v", selectors=names or None),
                        f"residual-{name}-{diag.example_id}", key)
    elif residual is None:
        column.caption("A kept record: no deviation left per layer (it keeps only its outcomes).")


def runs_against(d: Diagnosis, key: str, run: str, budget: float, chosen: list[str]) -> None:
    """This example in this run against the same example (by content) in another run: answers and
    deviation left; runs whose example of this id differs are named and refused."""
    same, differ = runs_holding(d.example, run)
    if not same and not differ:
        return
    st.subheader("Against another run")
    if differ:
        st.caption(f"Not compared: {', '.join(plain(n) for n in differ)} "
                   f"{'holds' if len(differ) == 1 else 'hold'} an example {plain(d.example_id)} with another question "
                   f"or passages (runs are paired by the example's content, not its id).")
    if not same:
        return
    names = list(same)
    ensure_choice(f"{key}_other_run", names, names[0])
    other_name = st.selectbox(f"Another run holding this example ({len(names)}: the same question and passages)",
                              names, key=f"{key}_other_run")
    try:
        other = state.read_diagnosis(same[other_name])
    except (WorkbenchError, OSError) as err:
        st.warning(f"Could not read it: {plain(err)}")
        return
    for column, (name, diag, side) in zip(st.columns(2), ((run, d, "this"), (other_name, other, "other"))):
        _one_run(column, name, diag, budget, chosen, f"{key}_vs_{side}")
