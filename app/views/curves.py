"""Budget curves: accuracy, the share of the EM gap closed and flip rate against budget per selector
with their intervals, recomputed rows against accuracy, and the summary table with McNemar b/c and
Holm-corrected p."""

from __future__ import annotations

import streamlit as st

import state
from widgets import choose_run, csv_button, ensure_choice, plain, show_figure, warn
from workbench import plots
from workbench.app_api import WorkbenchError, reference_selectors, resolve_reference, tokens_to_target

COLUMNS = ["selector", "budget", "n", "em", "em_low", "em_high", "retrieved", "ran_on", "answer_tokens", "f1",
           "flip_rate", "flip_low", "flip_high",
           "f1_to_dense", "first_token_agree", "dense_logprob_mean", "agree_prefix", "first_kl", "gap_recovered",
           "rows_per_example", "share_recomputed", "ref_b", "ref_c", "ref_p", "ref_p_holm",
           "dense_b", "dense_c", "dense_p", "dense_p_holm"]

st.title("Budget curves")

run = choose_run(("sweep",), key="curves_run", stop_on_problems=True)
try:
    sweep = state.read_sweep(run.path)
except WorkbenchError as err:
    warn(err)
    st.stop()

options = ["", *dict.fromkeys(sweep.outcomes["selector"])]  # "": no reference comparison
ensure_choice("curves_reference", options, resolve_reference(sweep, None) or "")
reference = st.selectbox("Reference selector for the paired tests", options, key="curves_reference",
                         format_func=lambda s: s or "(no reference: leave that comparison out)") or None
if reference is None:
    st.info("No reference selector is chosen (this run has neither cacheblend nor random, the default ones): "
            "the `ref_*` columns are left out. Choose a selector above to compare against it.")
measure = st.radio("Gap and tests on", ["em", "retrieved"], key="curves_measure", horizontal=True,
                   format_func={"em": "exact match", "retrieved": "retrieved (the task's string match)"}.get,
                   help="Exact match counts an answer that names the gold and runs on as wrong; retrieved asks "
                        "only whether the answer names it (RULER's string match, or whole-word contains).")
try:
    summary = state.run_summary(run.path, reference, measure)
except WorkbenchError as err:
    warn(err)
    st.stop()
ex, manifest = sweep.examples, sweep.manifest
st.markdown(f"{plain(run.name)}: {len(ex)} examples, model {plain(manifest.model_name or '?')}, "
            f"data set {plain(manifest.dataset or '?')} · dense EM "
            f"{ex['dense_em'].mean():.3f}, splice EM {ex['spliced_em'].mean():.3f}"
            + (f" · dense retrieved {ex['dense_retrieved'].mean():.3f}, splice retrieved "
               f"{ex['spliced_retrieved'].mean():.3f}, splice ran on past dense's {ex['spliced_ran_on'].mean():.0%}"
               if "dense_retrieved" in ex else ""))

labels = [s for s in dict.fromkeys(summary["selector"]) if s not in reference_selectors()]
if st.session_state.get("curves_selectors_of") != run.name:  # another run: every selector again
    st.session_state["curves_selectors"], st.session_state["curves_selectors_of"] = labels, run.name
ensure_choice("curves_selectors", labels, labels)
shown = st.multiselect("Selectors in the figures (the references, reuse all and full recompute, are always lines)",
                       labels, key="curves_selectors") or labels
show_figure(plots.budget_curve(summary, "em", "Exact match against budget (Wilson 95%)", selectors=shown),
            f"accuracy-{run.name}", "curves_em")
gap_title = {"em": "EM", "retrieved": "retrieval"}[measure]
show_figure(plots.gap_curve(summary, f"Share of the {gap_title} gap closed against budget (paired bootstrap 95%)",
                            selectors=shown),
            f"gap-{run.name}", "curves_gap")
show_figure(plots.budget_curve(summary, "flip_rate", "Flip rate against dense (Wilson 95%)", selectors=shown),
            f"flips-{run.name}", "curves_flips")
graded = [c for c in plots.METRIC_TITLES
          if c not in ("em", "flip_rate") and c in summary and summary[c].notna().any()]
if graded:
    ensure_choice("curves_graded", graded, graded[0])
    metric = st.selectbox("Graded outcome against the dense answer", graded, key="curves_graded",
                          format_func=lambda c: plots.METRIC_TITLES[c],
                          help="How far the output moved, beside the binary flip: F1 to the dense answer, whether "
                               "the first token is dense's, the dense answer's mean log-probability per token, how "
                               "many leading tokens agree, the KL of the first token's distribution from dense's.")
    show_figure(plots.budget_curve(summary, metric, f"{plots.METRIC_TITLES[metric]} against budget", selectors=shown),
                f"{metric}-{run.name}", "curves_graded_fig")
else:
    st.caption("This run was made before the graded outcomes were recorded: only flips and gold scores.")
show_figure(plots.rows_vs_accuracy(summary, "Rows recomputed per example against exact match", selectors=shown),
            f"rows-{run.name}", "curves_rows")
ranking, attention = state.run_evidence(run.path)
if not attention.empty:
    budgets = sorted(float(b) for b in attention["budget"].dropna().unique())
    ensure_choice("curves_evidence_budget", budgets, 0.2 if 0.2 in budgets else budgets[len(budgets) // 2])
    at = st.select_slider("Budget of the repairs in the attention figure", budgets, key="curves_evidence_budget")
    show_figure(plots.evidence_attention_figure(attention, at, selectors=shown), f"evidence-{run.name}",
                "curves_evidence")
    st.caption("Where the repaired lines climb from the splice's toward dense's, the repair gave the question back "
               "its view of the gold evidence (RULER's needles, HotpotQA's supporting sentences). Each selector's "
               "average precision against the evidence rows, beside chance:")
    st.dataframe(ranking, hide_index=True)

st.subheader("Summary")
st.caption("McNemar b/c: b = the selector right where the other is wrong; p Holm-corrected within each budget "
           "(a coin: the exact sign-flip test on its mean over draws, no b/c). "
           + (f"`ref_*` against {plain(reference)}, " if reference else "") + "`dense_*` against the dense prefill.")
st.dataframe(summary[[c for c in COLUMNS if c in summary.columns]], hide_index=True, width="stretch")
csv_button(summary, f"summary-{run.name}", "curves_summary_csv", "Summary as CSV")

st.subheader("Rows needed to reach a target")
t1, t2 = st.columns(2)
share = t1.slider("Share of dense EM", 0.5, 1.0, 0.9, 0.05, key="curves_share")
max_flip = t2.slider("Largest flip rate", 0.0, 0.5, 0.2, 0.05, key="curves_max_flip")
targets = tokens_to_target(summary, ex, share_of_dense=share, max_flip_rate=max_flip)
st.dataframe(targets, hide_index=True)
st.caption("Empty where no budget of the run reaches the target.")
csv_button(targets, f"targets-{run.name}", "curves_targets_csv")
