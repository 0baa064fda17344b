"""Example explorer: one example of a run, its tokens coloured by a signal, which rows each
selector picks at a budget, layer x token heatmaps, the answers and the deviation left.
The examples can be searched, filtered and sorted, and stepped through (P / N). The URL holds
the view: /explorer?run=NAME&example=ID&budget=0.2&selectors=cadence-grad,cacheblend&signal=...&layer=5,
kept current as the widgets change, and opening such a link restores it (also the chosen token,
&token=POSITION, and the two selectors set against each other, &a=...&b=...); the URL is written
however the page ends. A kept record (docs/records/keep.py: outcomes only) shows its answers and
outcomes, one line on what it lacks and the command that regenerates it, and a button that rebuilds
the example here (rebuild_panel.py); once rebuilt, every view is drawn from the rebuild, under a line
on how it agrees with the record. Below, on demand (a
button), attention by head and the logit lens of the example, run again on its model
(heads_lens_panel.py)."""

from __future__ import annotations

import shlex

import streamlit as st

import state
from answer_tables import answers_table
from compare_panel import missing_tables, outcome_budgets, runs_against, with_no_picks
from diagnosis_panel import BUDGET_HELP, DEVIATION, diagnosis_panel, example_text, show_answers
from example_finder import find, previous_next
from heads_lens_panel import heads_lens_panel
from live_fields import open_in_live
from model_work import model_spec_for
from permalink import Permalink
from readable import show_table
from rebuild_panel import rebuild_offer, rebuilt_diagnosis, rebuilt_folder
from status import report_error
from widgets import choose_run, csv_button, ensure_choice, plain
from workbench.app_api import DiagnoseConfig, Diagnosis, RunFolder, WorkbenchError, make_command, reference_selectors
from workbench.plots import diagnosis as figures

LINK = Permalink({"run": "explorer_run", "example": "explorer_example", "budget": "explorer_budget",
                  "selectors": "explorer_selectors", "signal": "explorer_signal", "layer": "explorer_layer",
                  "token": "explorer_token", "a": "explorer_vs_a", "b": "explorer_vs_b"},
                 page="explorer")

# the diagnosis settings `kvwb diagnose` takes as options, with their defaults (named only when they differ)
DIAGNOSE_DEFAULTS = {"pool": "changed", "coin_draws": 5, "chunk_scope": "span", "grow_max_span": 64,
                     "rerotation": "delta", "epic_k": None, "relaxkv_context": None, "densedev_norm": "none"}
FLAGS = {"attribution": "--no-attribution", "stop_at_newline": "--no-stop-at-newline"}  # named when False
COMMAND_KEYS = ("selectors", "budgets", "seed", "max_new_tokens", *FLAGS, *DIAGNOSE_DEFAULTS)


def regenerate_command(run: RunFolder, d: Diagnosis) -> str | None:
    """`kvwb diagnose` of this example with the run's model, data set options and diagnosis settings;
    None where the record's config holds a setting the command has no option for (the rebuild
    button still takes it whole)."""
    m = run.manifest
    if m is None or not m.dataset:
        return make_command("diagnosis")
    c = d.config.to_dict()
    if DiagnoseConfig.of(**{k: c[k] for k in COMMAND_KEYS if k in c}).to_dict() != c:
        return None
    options = {f"--{k.replace('_', '-')}": v for k, v in (m.args.get("dataset_options") or {}).items()}
    settings = {f"--{k.replace('_', '-')}": 0 if k == "grow_max_span" and c.get(k) is None else c.get(k)
                for k, v in DIAGNOSE_DEFAULTS.items() if c.get(k, v) != v}  # --grow-max-span 0: no cap
    asked = {"--model": model_spec_for(d, m), "--example": f"{m.dataset}#{d.example_id}",  # the button's model
             **options, "--selectors": ",".join(c["selectors"]), "--budgets": ",".join(f"{b:g}" for b in c["budgets"]),
             "--seed": c.get("seed"), "--max-new-tokens": c.get("max_new_tokens"), **settings,
             "--out": str(rebuilt_folder(run, d))}
    words = [str(x) for k, v in asked.items() if v is not None for x in (k, v)]
    return shlex.join(["kvwb", "diagnose", *words, *(flag for k, flag in FLAGS.items() if not c.get(k, True))])


def record_view(d: Diagnosis, run: RunFolder) -> tuple[float, list[str]] | None:
    """A kept record's example: its answers and outcomes, and one line on what it lacks."""
    example_text(d)
    command = regenerate_command(run, d)
    how = (f"with `{command}` or the button below" if command else
           "with the button below (`kvwb diagnose` has no option for every setting of this record's config)")
    st.info(f"A kept record keeps only this example's outcomes: no {', '.join(missing_tables(d))} tables, so the "
            f"token strip, picks, heatmaps and deviation are not drawn. Regenerate them {how}")
    rebuild_offer(run, d)
    budgets = outcome_budgets(d)
    if not budgets:
        return None
    selectors = list(dict.fromkeys(d.outcomes["selector"]))
    c1, c2 = st.columns([1, 2])
    ensure_choice("explorer_budget", budgets, budgets[0])
    budget = c1.select_slider("Budget (share of the candidate rows recomputed)", budgets, key="explorer_budget",
                              format_func=lambda b: f"{b:g}", help=BUDGET_HELP) if len(budgets) > 1 else budgets[0]
    shown = figures.default_shown([s for s in selectors if s not in reference_selectors()]) or selectors[:4]
    ensure_choice("explorer_selectors", selectors, shown)
    chosen = c2.multiselect("Selectors", selectors, key="explorer_selectors")
    st.subheader("Answers")
    show_answers(answers_table(with_no_picks(d), chosen, budget), "explorer")
    with st.expander("Outcomes (every selector, budget and draw)"):
        show_table(d.outcomes, None, key="explorer_record_outcomes", pinned=("selector", "budget"))
        csv_button(d.outcomes, f"outcomes-{d.example_id}", "explorer_outcomes_csv", "Outcomes as CSV")
    return budget, chosen


def page() -> None:
    """The explorer's body (the caller writes the URL however it ends)."""
    run = choose_run(("sweep", "diagnosis"), key="explorer_run")
    try:
        ids, questions, folders = state.run_examples(run)
    except WorkbenchError as err:
        st.warning(f"{plain(run.path)} holds no finished example yet ({plain(err)}). Run "
                   f"`kvwb run ... --out RUN` again (it resumes), or wait for a run in progress.")
        st.stop()

    shown = ids
    if run.kind == "sweep" and len(ids) > 1:
        sweep = state.read_sweep(run.path)
        found = find(sweep.examples[sweep.examples["example_id"].astype(str).isin(set(ids))], sweep.outcomes, "explorer")
        shown = [i for i in found if i in folders]
        if not shown:
            st.info("No example matches the search and the filter: change them above.")
            st.stop()
    if st.session_state.get("explorer_example") not in shown:
        st.session_state["explorer_example"] = shown[0]
    example_id = st.selectbox("Example", shown, key="explorer_example",  # options are plain text, never markdown
                              format_func=lambda i: f"{i}: {questions[i]}" if i in questions else i)
    if len(shown) > 1:
        previous_next("explorer_example", shown)
    try:
        diagnosis = state.read_diagnosis(folders[example_id])
    except (WorkbenchError, OSError) as err:
        report_error(f"Could not read example {example_id} of {run.path}: {err}", once=f"read-{run.path}-{example_id}")
        st.error(f"Could not read this example of {plain(run.path)}: {plain(err)}")
        st.stop()
    if st.button("Open in Live (edit the passages and run again)", key="explorer_to_live",
                 help="The Live page with this example's passages, question, selectors and budgets in its fields."):
        open_in_live(diagnosis)
    if missing_tables(diagnosis):  # a kept record: drawn from its rebuild where there is one
        rebuilt = rebuilt_diagnosis(run, diagnosis)
        if rebuilt is not None:
            diagnosis = rebuilt  # every view below drawn from the rebuild, said in the line above
    if missing_tables(diagnosis):
        shown_view = record_view(diagnosis, run)
    else:
        shown_view = diagnosis_panel(diagnosis, "explorer", run.manifest)
    if shown_view is not None:
        heads_lens_panel(diagnosis, "explorer", f"{run.path}#{example_id}", *shown_view,
                         st.session_state.get("explorer_token"), run.manifest)
        runs_against(diagnosis, "explorer", run.name, *shown_view)


st.title("Example explorer")
LINK.apply()
try:
    page()
finally:  # written before anything can fail: a stop or an error leaves the URL following the view
    url = LINK.write(skip=() if st.session_state.get("explorer_signal") == DEVIATION else ("layer",))
st.caption("Link to this view (the URL above follows every change; the button at the right of the box copies it):")
st.code(url, language=None)
