"""Budget curves: the share of the gap closed (the headline), the contrast family (pre-registered
beside the run, or chosen here) with b / c, raw and Holm-adjusted p and a forest plot of the paired
differences, then accuracy, flips, a graded outcome and rows against accuracy per selector, and the
summary table; the selector chips filter every figure and table but the family."""

from __future__ import annotations

import streamlit as st

import state
from readable import against_itself_blank, compact, count, p_value, rate, show_table, signed
from widgets import choose_run, csv_button, ensure_choice, plain, show_figure, warn
from workbench import plots
from workbench.app_api import (
    CONTRAST_MEASURES, CREDIT_WORDS, PREREGISTRATION, RECITE_WORDS, WorkbenchError, anatomy_sentence, behind_sentence, blank_sentence, blank_table,
    cell_anatomy, family_selectors, read_preregistration, reference_selectors, resolve_reference, splice_anatomy, suggested_family,
    hardware_sentence, run_has_evidence, tokens_to_target, whole_answers,
)
from workbench.plots.anatomy import gap_anatomy_figure, silent_drawn
from workbench.plots.answer_lines import first_line_figure
from workbench.plots.answer_sources import answer_sources_figure
from workbench.plots.curves import SPEND_TOLERANCE, off_budget
from workbench.plots.forest import forest_figure

HEADERS = {"selector": "selector", "budget": "budget b", "n": "n", "em": "EM", "em_low": "EM low", "em_high": "EM high",
           "gap_recovered": "gap closed", "gap_recovered_low": "gap low", "gap_recovered_high": "gap high",
           "retrieved": "retrieved", "flip_rate": "flips", "flip_low": "flips low", "flip_high": "flips high",
           "rows_per_example": "rows / example", "share_recomputed": "share recomputed", "f1": "F1 (gold)",
           "f1_to_dense": "F1 to dense", "first_token_agree": "1st token = dense's",
           "dense_logprob_mean": "dense log-prob / token", "agree_prefix": "leading tokens = dense's",
           "first_kl": "KL 1st token", "ran_on": "ran on", "answer_tokens": "answer tokens",
           "ref_b": "b vs ref", "ref_c": "c vs ref", "ref_p": "p vs ref", "ref_p_holm": "Holm p vs ref",
           "dense_b": "b vs dense", "dense_c": "c vs dense", "dense_p": "p vs dense", "dense_p_holm": "Holm p vs dense"}
FORMATS = {"n": count, "ref_b": count, "ref_c": count, "dense_b": count, "dense_c": count, "ref_p": p_value,
           "ref_p_holm": p_value, "dense_p": p_value, "dense_p_holm": p_value, "budget": compact,
           "rows_per_example": lambda v: "" if v != v else f"{v:.1f}", "gap_recovered": signed,
           "gap_recovered_low": signed, "gap_recovered_high": signed}
CONTRAST_HEADERS = {"family": "family", "name": "contrast", "a": "A", "b": "B", "at": "budget", "n": "n",
                    "b_count": "b", "c_count": "c", "p_value": "p", "p_holm": "Holm p",
                    "rate_a": "A's rate", "rate_b": "B's rate", "difference": "A − B", "low": "95% low", "high": "95% high",
                    "draws": "b / c per draw", "draws_separating": "draws p < 0.05", "test": "test"}
CONTRAST_FORMATS = {"b_count": count, "c_count": count, "p_value": p_value, "p_holm": p_value, "difference": signed,
                    "low": signed, "high": signed, "draws_separating": count, "n": count}


MANY_SELECTORS = 6  # more than this many selectors' curves cannot be told apart: a pre-registered run opens on its own


def default_selectors(labels: list[str], pre) -> list[str]:
    """The selectors a run opens on: those its pre-registered contrasts name where it has more than
    MANY_SELECTORS, else all."""
    if pre is None or len(labels) <= MANY_SELECTORS:
        return labels
    try:
        return family_selectors(pre, labels) or labels
    except WorkbenchError:  # a contrast the run cannot read: said under Contrasts
        return labels


def read_or_warn(read, folder):
    """`read(folder)`, or None after a warning when a record under it is unreadable: the rest of the page stands."""
    try:
        return read(folder)
    except WorkbenchError as err:
        warn(err)
        return None


def grid(table) -> list[float]:
    """The budgets of a per-budget table, in order (none for no table)."""
    return [] if table is None else sorted(float(b) for b in table["budget"].dropna().unique())


def budget_choice(budgets: list[float], label: str, key: str) -> float:
    """A budget of `budgets` to draw at: a slider (0.2 first, else the grid's middle), or the one budget."""
    ensure_choice(key, budgets, 0.2 if 0.2 in budgets else budgets[len(budgets) // 2])
    return st.select_slider(label, budgets, key=key) if len(budgets) > 1 else budgets[0]


def contrast_lines(text: str) -> dict:
    """The "chosen here" family from the text box: one contrast a line, `NAME: A:B@b` or `A:B@b`."""
    family = {}
    for k, line in enumerate(t.strip() for t in text.splitlines()):
        if not line:
            continue
        name, sep, rest = line.partition(" ")
        named = sep and name.endswith(":") and "@" not in name
        family[name[:-1] if named else f"C{k + 1}"] = rest.strip() if named else line
    return family


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
    why = "" if resolve_reference(sweep, None) else " (this run has neither cacheblend nor random, the default ones)"
    st.info(f"No reference selector is chosen{why}: the `ref_*` columns are left out. Choose a selector above to "
            "compare against it.")
pre, pre_error = None, None  # the run's pre-registered families, read once (said under Contrasts when malformed)
try:
    pre = read_preregistration(run.path)
except WorkbenchError as err:
    pre_error = err
if st.session_state.get("curves_measure_of") != run.name:  # each run opens on its pre-registered measure, else EM
    st.session_state["curves_measure"] = pre.measure if pre is not None and pre.measure in ("em", "retrieved") else "em"
    st.session_state["curves_measure_of"] = run.name
measure = st.radio("Gap and tests on", ["em", "retrieved"], key="curves_measure", horizontal=True,
                   format_func={"em": "exact match", "retrieved": "retrieved (the task's string match)"}.get,
                   help="Exact match counts an answer that names the gold and runs on as wrong (where every value "
                        "must be named, RULER's multi-value and variable tracking, it is 1 when all are named); "
                        "retrieved reads the task's retrieval rule: RULER's string match, the share of the values "
                        "named, or whole-word contains for QA. A run opens on the measure its pre-registration "
                        "names, else exact match.")
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
               if "dense_retrieved" in ex else "")
            + (" · answers scored whole (made with `--no-stop-at-newline`: decoded past the first line break, "
               "as RULER reads a prediction)" if whole_answers(sweep) else ""))
machines = hardware_sentence(manifest.segments, name=plain)  # CPU names are data
if machines:
    st.caption(machines[0].upper() + machines[1:] + ".")
anatomy = anatomy_sentence(splice_anatomy(ex), hint=False)
if anatomy:
    (st.warning if "Most of this EM gap" in anatomy else st.caption)(
        anatomy + (" Read the gap and tests on *retrieved* above, and see \"What the lost exact matches are\" "
                   "below." if "Most of this EM gap" in anatomy else ""))
blank = blank_sentence(blank_table(sweep.outcomes, ex), whole_answers(sweep), name=plain)  # labels are data
if blank:
    (st.caption if whole_answers(sweep) else st.warning)(blank)

labels = [s for s in dict.fromkeys(summary["selector"]) if s not in reference_selectors()]
first = default_selectors(labels, pre)
if st.session_state.get("curves_selectors_of") != run.name:  # another run: its default again
    st.session_state["curves_selectors"], st.session_state["curves_selectors_of"] = first, run.name
ensure_choice("curves_selectors", labels, first)
shown = st.multiselect("Selectors shown in every figure and table below (the references, reuse all and full "
                       "recompute, are always lines)", labels, key="curves_selectors",
                       help=f"A run of more than {MANY_SELECTORS} selectors with a pre-registration opens on those "
                            "its contrasts name; any other run on all.") or labels
in_view = against_itself_blank(summary[summary["selector"].isin([*shown, *reference_selectors()])], reference)

gap_title = {"em": "EM", "retrieved": "retrieval"}[measure]
show_figure(plots.gap_curve(summary, f"Share of the {gap_title} gap closed against budget (paired bootstrap 95%)",
                            selectors=shown),
            f"gap-{run.name}", "curves_gap")
if (off_budget(summary)[summary["selector"].isin(shown)] != "").any():
    st.caption(f"A hollow marker (a coin's, hollow already, with a dot) in the curves: the selector recomputed more "
               f"than {SPEND_TOLERANCE:.0%} more or fewer rows there than a budget-matched selector (one that picks "
               "whole chunks may fit fewer rows than the budget, or none); hover says how many.")

st.subheader("Contrasts")
if pre_error is not None:
    warn(pre_error)
sources = (["pre"] if pre else []) + ["chosen"]
ensure_choice("curves_family_source", sources, sources[0])
source = st.radio("Family", sources, key="curves_family_source", horizontal=True,
                  format_func=lambda v: (f"pre-registered ({pre.count} contrasts in {len(pre.families)} families"
                                         f"{', ' + pre.source if pre.source else ''})" if v == "pre" else
                                         "chosen here"),
                  help=f"A run or kept record may hold its pre-registered families in `{PREREGISTRATION}` beside its "
                       "manifest; they open by default. Holm adjusts p within each family.")
if source == "pre":
    families, default_measure = pre.families, pre.measure
else:
    if st.session_state.get("curves_family_of") != run.name:
        st.session_state["curves_family_text"] = "\n".join(
            suggested_family(sweep.outcomes["selector"].unique(), sweep.outcomes["budget"].unique()))
        st.session_state["curves_family_of"] = run.name
    text = st.text_area("Contrasts, one a line: `A:B@budget` (`A:coin@b`: A's matched coin; `@auc`: the area over "
                        "the budgets), optionally named `NAME: A:B@b`; together they are one family under Holm",
                        key="curves_family_text", height=140)
    families, default_measure = {"chosen": contrast_lines(text)}, measure
measures = list(CONTRAST_MEASURES)
if st.session_state.get("curves_contrast_measure_of") != (run.name, source):
    st.session_state["curves_contrast_measure"] = default_measure if default_measure in measures else "em"
    st.session_state["curves_contrast_measure_of"] = (run.name, source)
contrast_measure = st.selectbox("Contrasts tested on", measures, key="curves_contrast_measure",
                                format_func=lambda m: f"{m}: {CONTRAST_MEASURES[m].description}")
contrasts = None
if not any(families.values()):
    st.info("No contrast given: write one a line above, e.g. `cadence-grad:cacheblend@0.2`.")
else:
    try:
        contrasts = state.run_contrasts(run.path, families, contrast_measure)
    except WorkbenchError as err:
        warn(err)
if contrasts is not None and len(contrasts):
    st.caption("b = examples where A is right and B wrong, c the reverse (exact McNemar, on a binary measure); "
               "on a graded measure, or against a drawn control (a coin, on its mean over draws, each draw's b / c "
               "beside it), the sign-flip test on the paired differences: exact on a lattice, else sampled. "
               "p raw and Holm-adjusted within each family; A − B is the paired difference with its bootstrap 95% "
               "interval. The whole family is tested whichever selectors are shown above.")
    show_table(contrasts, CONTRAST_HEADERS, CONTRAST_FORMATS, key="curves_contrasts_table", pinned=("name",))
    csv_button(contrasts, f"contrasts-{run.name}", "curves_contrasts_csv", "Contrasts as CSV")
    show_figure(forest_figure(contrasts, f"Paired differences A − B on {contrast_measure} (filled: Holm p < 0.05)"),
                f"forest-{run.name}", "curves_forest")
    tested = {f"{family} {name}: {text}": text for family, group in families.items() for name, text in group.items()}
    b1, b2 = st.columns([4, 1])
    ensure_choice("curves_behind", list(tested), next(iter(tested)))
    chosen = b1.selectbox("Read the examples behind a contrast", list(tested), key="curves_behind",
                          help="Before a difference is reported, read some of the examples it rests on: an answer "
                               "that runs on, or a value inside a longer number, can make a difference that is not "
                               "one of evidence.")
    k = int(b2.number_input("Examples", 1, 50, 10, key="curves_behind_k"))
    try:
        behind = state.run_behind(run.path, tested[chosen], contrast_measure, k)
    except WorkbenchError as err:
        warn(err)
    else:
        st.caption(behind_sentence(behind) + ("." if len(behind.shown) else ": none."))
        if len(behind.shown):
            answers = {**{c: "small" for c in behind.shown.columns},
                       **{c: "medium" for c in ("dense", behind.a, behind.b)},  # the answers to read get the room
                       "note": "large"}  # what they recite, where the run's examples define evidence
            headers = {c: c.replace("_", " ") for c in behind.shown.columns}
            headers.update({f"{side} {behind.measure}": behind.measure for side in (behind.a, behind.b)})  # beside its answer
            show_table(behind.shown, headers, {"budget": compact},
                       key="curves_behind_table", pinned=("example_id",), widths=answers, wrap=True)

st.subheader("Curves")
show_figure(plots.budget_curve(summary, "em", "Exact match against budget (95%: Wilson; a coin: bootstrap)",
                               selectors=shown), f"accuracy-{run.name}", "curves_em")
show_figure(plots.budget_curve(summary, "flip_rate", "Flip rate against dense (95%: Wilson; a coin: bootstrap)",
                               selectors=shown),
            f"flips-{run.name}", "curves_flips")
graded = [c for c in plots.METRIC_TITLES
          if c not in ("em", "flip_rate") and c in summary and summary[c].notna().any()]
if graded:
    ensure_choice("curves_graded", graded, graded[0])
    metric = st.selectbox("Another outcome against budget", graded, key="curves_graded",
                          format_func=lambda c: plots.METRIC_TITLES[c],
                          help="How far the output moved, beside the binary flip: F1 to the dense answer, whether "
                               "the first token is dense's, the dense answer's mean log-probability per token, how "
                               "many leading tokens agree, the KL of the first token's distribution from dense's; "
                               "and, where the run records them, retrieved, ran on, answer length and evidence "
                               "recall and precision.")
    show_figure(plots.budget_curve(summary, metric, f"{plots.METRIC_TITLES[metric]} against budget", selectors=shown),
                f"{metric}-{run.name}", "curves_graded_fig")
else:
    st.caption("This run was made before the graded outcomes were recorded: only flips and gold scores.")
show_figure(plots.rows_vs_accuracy(summary, "Rows recomputed per example against exact match", selectors=shown),
            f"rows-{run.name}", "curves_rows")
cells = cell_anatomy(sweep.outcomes, ex)
if not cells.empty:
    st.subheader("What the lost exact matches are")
    budgets = grid(cells)
    at = budget_choice(budgets, "Budget of the repairs in the anatomy", "curves_anatomy_budget")
    show_figure(gap_anatomy_figure(cells, at, selectors=["none", *shown]), f"anatomy-{run.name}", "curves_anatomy")
    st.caption("Each bar: the examples where dense is right and the answer (none: the splice) is wrong, split "
               "against dense's answer: it lost the gold; it names the gold only inside a longer word (RULER's "
               "substring match still counts it retrieved); it names the gold and ran on past where dense stopped; "
               "it ends otherwise. Mostly \"ran on\" means a gap in stopping, not in the evidence."
               + {True: " Of the lost gold, the answers of no token (the first token an end of turn: the receiver "
                        "named nothing) are drawn apart.",
                  False: " None of the lost gold here ended at once (an end of turn first).",
                  None: ""}[silent_drawn(cells, at, ["none", *shown])]
               + (" This run's cells predate the recorded run-on: it is read from the text."
                  if cells.attrs.get("ran_on_rule") != "recorded" else ""))
lines = read_or_warn(state.run_first_lines, run.path) if whole_answers(sweep) else None
line_budgets = grid(lines)
if line_budgets:
    st.subheader("What the whole answers name beyond their first lines")
    at = budget_choice(line_budgets, "Budget of the repairs in the first-line figure", "curves_lines_budget")
    show_figure(first_line_figure(lines, at, selectors=shown), f"first-lines-{run.name}", "curves_lines")
    st.caption("This run kept every answer whole. Grey: retrieved as the default rule scores it (the first line, "
               "where decoding would have stopped); blue: the whole answer. Where they part, the answer named the "
               "gold after a line break (a ':' and then a list), which a first-line reading counts as lost.")
sources = read_or_warn(state.run_answer_sources, run.path) if run_has_evidence(sweep) else None
source_budgets = grid(sources)
if source_budgets:
    st.subheader("Where the answers' words come from")
    at = budget_choice(source_budgets, "Budget of the repairs in the sources figure", "curves_sources_budget")
    show_figure(answer_sources_figure(sources, at, selectors=shown), f"sources-{run.name}", "curves_sources")
    st.caption("Each answer word is traced to the runs of answer words around it found word for word in the gold "
               "evidence, the prompt, the rest of the passages that hold evidence and the passages that hold none: "
               f"the first of these whose run is the longest, or at least {CREDIT_WORDS} words long, takes it; a word "
               f"none holds is new. An answer recites the passages where at least {RECITE_WORDS} consecutive words "
               f"are credited to them, outside the evidence, each by a run of at least {RECITE_WORDS} (the "
               "haystack's filler, a distractor's sentence): "
               "read a repair against dense, whose own answers may quote the passages."
               + (f" {sources.attrs['left_out']} example(s) define no evidence and are left out."
                  if sources.attrs.get("left_out") else ""))
ranking, attention = read_or_warn(state.run_evidence, run.path) or (None, None)
if attention is not None and not attention.empty:
    budgets = grid(attention)
    at = budget_choice(budgets, "Budget of the repairs in the attention figure", "curves_evidence_budget")
    show_figure(plots.evidence_attention_figure(attention, at, selectors=shown), f"evidence-{run.name}",
                "curves_evidence")
    st.caption("Where the repaired lines move from the splice's toward dense's (up or down: the splice can "
               "attend to the evidence more than dense does), the repair gave the question back its view of the "
               "gold evidence (RULER's needles, HotpotQA's supporting sentences). Each selector's average "
               "precision against the evidence rows, beside chance:")
    show_table(ranking[ranking["selector"].isin(shown)] if "selector" in ranking else ranking,
               {"scorer": "scorer", "selector": "selector", "kind": "kind", "n": "examples",
                "average_precision": "average precision", "chance": "chance", "lift": "lift (AP / chance)"},
               {"n": count, "average_precision": rate, "chance": rate, "lift": lambda v: rate(v) and f"{float(v):.2f}"},
               key="curves_evidence_table")

st.subheader("Summary")
st.caption("McNemar b/c: b = the selector right where the other is wrong; p Holm-corrected within each budget "
           "(a coin: the exact sign-flip test on its mean over draws, no b/c). "
           + (f"\"vs ref\": against {plain(reference)}, " if reference else "") + "\"vs dense\": against the dense "
           "prefill. Blank: not defined (no gap, a coin's b / c, no reference).")
show_table(in_view, HEADERS, FORMATS, key="curves_summary_table", pinned=("selector", "budget"))
csv_button(in_view, f"summary-{run.name}", "curves_summary_csv", "Summary as CSV")

st.subheader("Rows needed to reach a target")
t1, t2 = st.columns(2)
share = t1.slider(f"Share of dense {'EM' if measure == 'em' else measure}", 0.5, 1.0, 0.9, 0.05, key="curves_share")
max_flip = t2.slider("Largest flip rate", 0.0, 0.5, 0.2, 0.05, key="curves_max_flip")
targets = tokens_to_target(in_view, ex, share_of_dense=share, max_flip_rate=max_flip)
reach, flip_cap = targets.columns[1:3]
show_table(targets, {"selector": "selector", reach: f"rows to {share:g} of dense {reach.rsplit('_', 1)[-1]}",
                     flip_cap: f"rows to flip rate ≤ {max_flip:g}"},
           {reach: FORMATS["rows_per_example"], flip_cap: FORMATS["rows_per_example"]}, key="curves_targets_table")
st.caption("Empty where no budget of the run reaches the target.")
csv_button(targets, f"targets-{run.name}", "curves_targets_csv")
