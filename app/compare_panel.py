"""A against B on one example: two selectors (the rows only A picks, only B picks, both; their
answers, graded outcomes and deviation left per layer side by side), or two runs that both hold
the example (another model, another number of passages)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import state
from answer_tables import answers_table
from widgets import ensure_choice, plain, show_figure
from workbench.app_api import Diagnosis, RunFolder, WorkbenchError, reference_selectors
from workbench.plots import diagnosis as figures
from workbench.plots.compare import compare_figure, picks_compared


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


def runs_holding(example_id: str, but: str) -> dict[str, RunFolder]:
    """The sweep and diagnosis runs other than `but` that hold a finished `example_id`."""
    found = {}
    for run in state.scan_runs(("sweep", "diagnosis")):
        if run.name == but:
            continue
        try:
            ids, _, _ = state.run_examples(run)
        except (WorkbenchError, OSError):
            continue
        if example_id in ids:
            found[run.name] = run
    return found


def runs_against(d: Diagnosis, key: str, run: str, budget: float, chosen: list[str]) -> None:
    """This example in this run against the same example in another run: answers and deviation left."""
    others = runs_holding(d.example_id, run)
    if not others:
        return
    st.subheader("Against another run")
    ensure_choice(f"{key}_other_run", list(others), next(iter(others)))
    other_name = st.selectbox(f"Another run holding example {d.example_id}", list(others), key=f"{key}_other_run")
    try:
        _, _, folders = state.run_examples(others[other_name])
        other = state.read_diagnosis(folders[d.example_id])
    except (WorkbenchError, OSError) as err:
        st.warning(f"Could not read it: {plain(err)}")
        return
    columns = st.columns(2)
    for column, (name, diag) in zip(columns, ((run, d), (other_name, other))):
        at = min(figures.budgets(diag), key=lambda b: abs(b - budget))
        names = [s for s in chosen if s in set(diag.selections["selector"])]
        column.markdown(f"**{plain(name)}** · {plain(diag.model.get('name', '?'))} · {len(diag.example.passages)} "
                        f"passages, {diag.context.n_tokens} tokens · b = {at:g}")
        column.dataframe(answers_table(diag, names, at), hide_index=True, width="stretch")
        if not diag.residual.empty:
            with column:
                show_figure(figures.residual_figure(diag, at, "v", selectors=names or None),
                            f"residual-{name}-{d.example_id}", f"{key}_vs_{'this' if diag is d else 'other'}")
