"""The per-example view shared by the Example explorer and Live: the example as text, the
answers, the token strip, each selector's picks, layer x token heatmaps, the deviation left
after repair, and the exports. Every figure comes from `workbench.plots.diagnosis`."""

from __future__ import annotations

import streamlit as st

from answer_tables import answers_table, draws_table, picks_table
from compare_panel import selectors_against
from readable import count, short, show_table
from token_choice import take_click, token_card, token_picker
from widgets import csv_button, ensure_choice, plain, show_figure
from workbench.app_api import (
    Diagnosis, Manifest, WorkbenchError, reference_selectors, render_report, signal_is_log, signal_label,
)
from workbench.plots import diagnosis as figures
from workbench.plots.answer import answer_tokens_figure

BUDGET_HELP = ("The candidate pool: the rows computed under another prefix (every passage after the first), "
               "or every passage row where the run chose --pool all.")

KINDS = {"k": "keys (post-RoPE)", "v": "values"}
DEVIATION = "deviation"  # the strip's colouring by the splice's own deviation (not a registered signal)
DEVIATION_LABEL = "KV deviation (splice vs dense) at a layer"


def example_text(d: Diagnosis) -> None:
    """The example and its context as plain text (never markdown: data is shown, not rendered)."""
    ex = d.example
    st.text(f"Question: {ex.question}")
    st.text(f"Gold: {' | '.join(ex.gold) or '(none given)'}")
    floor = max(d.context.rope_floor, default=None)
    rounding = (f" · {d.context.rerotation} re-rotation; its RoPE rounding alone moves keys by up to {floor:.1e} "
                f"(relative), so key deviation below that is rounding, not splice error") if floor else ""
    st.caption(f"{d.context.n_tokens} tokens, {d.context.n_reused} reused · model {plain(d.model.get('name', '?'))}"
               f"{rounding}")
    with st.expander(f"Passages ({len(ex.passages)})"):
        for i, passage in enumerate(ex.passages, 1):
            st.text(f"Passage {i}: {passage}")


# the answers table's columns as shown: what each cache said first, then its scores (the CSV keeps them all),
# under short headers (the whole name over each) and in narrow columns, so that at 1440 px every one fits
ANSWER_HEADERS = {"cache": "cache", "rows recomputed": "rows", "flip vs dense": "flip", "answer": "answer",
                  "note": "note", "EM": "EM", "F1": "F1", "F1 to dense": "F1 to dense",
                  "first token = dense's": "1st token", "retrieved": "retrieved", "ran on": "ran on",
                  "evidence recall": "evidence"}
ANSWER_HELPS = {"rows recomputed": "rows the repair recomputes",
                "flip vs dense": "whether the answer flips against dense's", "EM": "exact match with a gold answer",
                "F1": "token F1 against the gold answers",
                "F1 to dense": "token F1 against dense's answer",
                "first token = dense's": "whether the first answer token is dense's",
                "retrieved": "the task's retrieval measure (RULER's string match, or whole-word contains)",
                "ran on": "whether the answer runs on past where dense's ended",
                "evidence recall": "evidence recall: the share of the gold evidence rows recomputed"}
DRAWN = "; a drawn control: the mean over its draws"
# pixels: a score's header or "0.467", whichever is wider; text columns wrap
ANSWER_WIDTHS = {"rows recomputed": 48, "flip vs dense": 92, "EM": 50, "F1": 50, "F1 to dense": 82,
                 "first token = dense's": 74, "retrieved": 72, "ran on": 58, "evidence recall": 72}
DRAW_SCORES = ("f1_to_dense", "first_token_agree", "em", "f1")
DRAW_HEADERS = {"selector": "selector", "draw": "draw", "rows recomputed": "rows recomputed", "answer": "answer",
                "flip": "flip vs dense", "f1_to_dense": "F1 to dense", "first_token_agree": "1st token = dense's",
                "em": "EM", "f1": "F1"}
SHORT, WRAPPED = 96, 140  # an answer up to SHORT_CHARS on one line; longer ones and notes wrap at WRAPPED px
CACHE = 104  # px: "repaired: cadence-grad" on two lines, where rows are tall anyway
SHORT_CHARS, LINE_CHARS, MOST_LINES = 11, 17, 5  # characters a line of a SHORT / WRAPPED column holds


def answer_lines(answers) -> int:
    """Lines the tallest wrapped cell of the answers table needs (1: nothing wraps), at most MOST_LINES."""
    def lines(text: str, per: int) -> int:
        n, used = 1, 0
        for word in str(text).split():
            if used and used + 1 + len(word) > per:
                n, used = n + 1, len(word)
            else:
                used += (1 if used else 0) + len(word)
        return n
    texts = [(t, LINE_CHARS) for c in ("answer", "note") for t in answers[c].fillna("").astype(str)]
    texts += [(t, 14) for t in answers["flip vs dense"].fillna("").astype(str)]
    return min(MOST_LINES, max((lines(t, per) for t, per in texts), default=1))


def show_answers(answers, key: str) -> None:
    """The answers table (`answer_tables.answers_table`) as a reader wants it: a value a cache lacks
    (dense's rows recomputed, the splice's graded scores) blank, never "None"; scores in three
    significant digits; answers and notes whole, wrapped; every column in view at 1440 px."""
    long_answer = int(answers["answer"].fillna("").astype(str).str.len().max()) > SHORT_CHARS
    has_note = bool(answers["note"].fillna("").astype(str).str.len().max())
    lines = answer_lines(answers)
    widths = {**ANSWER_WIDTHS, "answer": WRAPPED if long_answer else SHORT, "note": WRAPPED if has_note else 56,
              "cache": CACHE if lines > 1 else None}
    drawn = answers["note"].fillna("").str.contains("averaged over").any()
    helps = {c: h + (DRAWN if drawn and c in ANSWER_WIDTHS and c != "rows recomputed" else "")
             for c, h in ANSWER_HELPS.items()}
    scores = dict.fromkeys(("EM", "F1", "F1 to dense", "first token = dense's", "retrieved", "ran on",
                            "evidence recall"), short)
    show_table(answers, ANSWER_HEADERS, {"rows recomputed": count, **scores},
               key=f"{key}_answers_table", pinned=("cache",), widths=widths, helps=helps,
               wrap=lines if lines > 1 else False)


def _choices(d: Diagnosis, key: str) -> tuple[float, list[str]]:
    """The budget and the selectors to show."""
    budgets = figures.budgets(d)
    selectors = list(dict.fromkeys(d.selections["selector"]))
    c1, c2 = st.columns([1, 2])
    ensure_choice(f"{key}_budget", budgets, budgets[0])
    if len(budgets) > 1:
        budget = c1.select_slider("Budget (share of the candidate rows recomputed)", budgets, key=f"{key}_budget",
                                  format_func=lambda b: f"{b:g}", help=BUDGET_HELP)
    else:
        budget = budgets[0]
        c1.markdown(f"Budget: **{budget:g}** (the only one in this diagnosis)")
    ensure_choice(f"{key}_selectors", selectors, figures.default_shown(figures.chosen_selectors(d)) or selectors[:4])
    chosen = c2.multiselect("Selectors", selectors, key=f"{key}_selectors")
    return budget, chosen


def _strip(d: Diagnosis, key: str, budget: float, chosen: list[str]) -> int | None:
    """The token strip, coloured by a signal of the diagnosis, the chosen selector's picks outlined;
    a click on a token chooses it (returned: its position, or None)."""
    names = list(dict.fromkeys(d.token_signals["signal"])) if not d.token_signals.empty else []
    options = ([DEVIATION] if not d.deviation.empty else []) + names
    if not options:
        st.info("This diagnosis holds no token signals.")
        return None
    ensure_choice(f"{key}_signal", options, options[0])
    signal = st.selectbox("Colour tokens by", options, key=f"{key}_signal",
                          format_func=lambda s: DEVIATION_LABEL if s == DEVIATION else signal_label(s, "token"))
    layer, kind, metric = None, "v", "rel_l2"
    if signal == DEVIATION:
        dev = d.deviation
        layers = sorted(int(v) for v in dev["layer"].unique())
        kinds = sorted(dev["kind"].unique(), reverse=True)  # v before k
        metrics = list(dict.fromkeys(dev["metric"]))
        c1, c2, c3 = st.columns(3)
        ensure_choice(f"{key}_layer", layers, layers[-1])
        layer = c1.select_slider("Layer", layers, key=f"{key}_layer")
        ensure_choice(f"{key}_kind", kinds, kinds[0])
        kind = c2.radio("Kind", kinds, key=f"{key}_kind", horizontal=True, format_func=lambda k: KINDS.get(k, k))
        ensure_choice(f"{key}_metric", metrics, "rel_l2" if "rel_l2" in metrics else metrics[0])
        metric = c3.selectbox("Metric", metrics, key=f"{key}_metric")
    outline = None
    o1, o2 = st.columns(2)
    if chosen:
        ensure_choice(f"{key}_outline", chosen, chosen[0])
        outline = o1.selectbox("Outline the rows picked by", chosen, key=f"{key}_outline")
    token = token_picker(d, key, o2)
    segments = _segments_shown(d, key, budget, outline, token, chosen)
    fig = figures.strip_figure(d, budget, signal, outline=outline, layer=layer, kind=kind, metric=metric,
                               segments=segments, highlight=token, selectors=chosen or None)
    show_figure(fig, f"tokens-{d.example_id}", f"{key}_strip", select=lambda: take_click(key))
    token_card(d, key, budget, chosen, token)
    return token


LONG_CONTEXT = 600  # tokens; above this the strip shows one segment at a time by default
ALL_SEGMENTS = "all segments"


def _segments_shown(d: Diagnosis, key: str, budget: float, outline: str | None, token: int | None,
                    chosen: list[str]) -> list[str] | None:
    """For a long context, which segment the strip shows; None shows all. It opens (again whenever
    the example, budget, outlined selector or chosen token changes, unless all segments are shown)
    on `default_segment`, and a line says which segment is shown and why."""
    if d.context.n_tokens <= LONG_CONTEXT:
        return None
    default, why = default_segment(d, budget, outline, token, chosen)
    names = [str(n) for n in dict.fromkeys(d.tokens["segment"])]
    options = [ALL_SEGMENTS, *names]
    opened_for, before = (d.example_id, d.context.n_tokens, budget, outline, token), st.session_state.get(f"{key}_segment_for")
    if before != opened_for:  # a user's own choice stays until then; "all segments" while on one example
        st.session_state[f"{key}_segment_for"] = opened_for
        if not (st.session_state.get(f"{key}_segment") == ALL_SEGMENTS and before and before[:2] == opened_for[:2]):
            st.session_state[f"{key}_segment"] = default
    ensure_choice(f"{key}_segment", options, default)
    shown = st.selectbox(f"Show ({d.context.n_tokens} tokens: one segment at a time keeps the strip readable)",
                         options, key=f"{key}_segment")
    st.caption(f"The strip shows {plain(shown)}" + (f": {why}" if shown == default else " (chosen above)") + ".")
    return None if shown == ALL_SEGMENTS else [shown]


def default_segment(d: Diagnosis, budget: float, outline: str | None, token: int | None,
                    chosen: list[str] = ()) -> tuple[str, str]:
    """The segment a long strip opens on and why: the chosen token's, else the one holding the most
    rows `outline` picks at `budget` (the first of equals), else the most rows any of `chosen`
    picks, else the first passage."""
    tokens = d.tokens
    segment = dict(zip(tokens["position"].astype(int), tokens["segment"].astype(str)))
    if token is not None and token in segment:
        return segment[token], f"the chosen token (pos {token}) is there"
    for who, what in (([outline] if outline else []), "rows {} recomputes"), (chosen, "picks of the selectors shown"):
        picked = [segment[p] for s in who for p in d.picks(s, budget) if p in segment]
        if picked:
            held = {name: picked.count(name) for name in dict.fromkeys(segment.values())}
            most = max(held, key=held.get)  # the first of equals, in context order
            return most, (f"it holds {held[most]} of the {len(picked)} {what.format(plain(outline))} at b = {budget:g}, "
                          f"the most of any segment")
    names = list(dict.fromkeys(segment.values()))
    first = next((n for n in names if n.startswith("passage")), names[0])
    return first, f"no selector shown recomputes a row at b = {budget:g}"


def _picks(d: Diagnosis, key: str, budget: float, chosen: list[str], token: int | None) -> None:
    st.subheader(f"Rows each selector recomputes at b = {budget:g}")
    show_figure(figures.picks_figure(d, budget, chosen, highlight=token), f"picks-{d.example_id}-b{budget:g}",
                f"{key}_picks")
    table = picks_table(d, chosen, budget)
    with st.expander("Picks as a table (reused tokens)"):
        show_table(table, None, key=f"{key}_picks_table", pinned=("position",))
    csv_button(table, f"picks-{d.example_id}-b{budget:g}", f"{key}_picks_csv", "Picks as CSV")


def _heatmaps(d: Diagnosis, key: str, token: int | None) -> None:
    st.subheader("Layer × token")
    dev = d.deviation
    if dev.empty:
        st.info("No deviation table in this diagnosis.")
    else:
        kinds = sorted(dev["kind"].unique(), reverse=True)
        metrics = list(dict.fromkeys(dev["metric"]))
        c1, c2 = st.columns(2)
        ensure_choice(f"{key}_hm_kind", kinds, kinds[0])
        kind = c1.radio("Deviation of", kinds, key=f"{key}_hm_kind", horizontal=True,
                        format_func=lambda k: KINDS.get(k, k))
        ensure_choice(f"{key}_hm_metric", metrics, "rel_l2" if "rel_l2" in metrics else metrics[0])
        metric = c2.selectbox("Deviation metric", metrics, key=f"{key}_hm_metric")
        show_figure(figures.deviation_figure(d, kind, metric, highlight=token), f"deviation-{d.example_id}",
                    f"{key}_dev_heatmap")
        if figures.has_layer_types(d):
            st.caption("This model mixes local layers (circles), which attend only within a sliding window, "
                       "and global ones (diamonds), which attend to the whole context. Below the first global "
                       "layer a row's splice error can only come from tokens within its layers' reach "
                       "(window × depth), so rows deep in a long passage stay exact there.")
            show_figure(figures.layer_type_figure(d, kind, metric), f"layer-types-{d.example_id}",
                        f"{key}_dev_layer_types")
    signals = d.layer_signals
    if signals.empty:
        st.info("No per-layer saliency or attention here: run `cadence`/`cadence-grad` (gradients), "
                "`bcr` (draft attention) or `qattn` (question attention) to get them.")
        return
    names = list(dict.fromkeys(signals["signal"]))
    c1, c2 = st.columns(2)
    ensure_choice(f"{key}_hm_signal", names, names[0])
    name = c1.selectbox("Saliency / attention", names, key=f"{key}_hm_signal",
                        format_func=lambda s: signal_label(s, "layer"))
    log = c2.checkbox("log10 scale", key=f"{key}_hm_log_{name}", value=signal_is_log(name, "layer"))
    show_figure(figures.layer_signal_figure(d, name, log=log, highlight=token), f"{name}-{d.example_id}",
                f"{key}_sal_heatmap")


def _residual(d: Diagnosis, key: str, budget: float, chosen: list[str]) -> None:
    st.subheader("Deviation left per layer after each repair")
    res = d.residual
    if res.empty:
        st.info("No residual deviation in this diagnosis.")
        return
    kinds = sorted(res["kind"].unique(), reverse=True)
    ensure_choice(f"{key}_res_kind", kinds, kinds[0])
    kind = st.radio("Residual of", kinds, key=f"{key}_res_kind", horizontal=True, format_func=lambda k: KINDS.get(k, k))
    references = [s for s in dict.fromkeys(res["selector"]) if s in reference_selectors() and s not in chosen]
    show_figure(figures.residual_figure(d, budget, kind, selectors=references + chosen),
                f"residual-{d.example_id}-b{budget:g}", f"{key}_residual")


def _layer_effects(d: Diagnosis, key: str, budget: float, chosen: list[str]) -> None:
    """Where the repair recovers the answer, layer by layer (when the diagnosis holds the table)."""
    shown = [s for s in chosen if figures.layer_effects_view(d, budget, s) is not None]
    if not shown:
        return
    st.subheader("Where the repair recovers the answer, layer by layer")
    ensure_choice(f"{key}_effects_selector", shown, shown[0])
    selector = st.selectbox("Repair of", shown, key=f"{key}_effects_selector")
    show_figure(figures.layer_effects_view(d, budget, selector), f"layer-effects-{d.example_id}-b{budget:g}",
                f"{key}_layer_effects")


def _details(d: Diagnosis, key: str, manifest: Manifest | None) -> None:
    with st.expander("Outcomes, costs and the attribution check"):
        show_table(d.outcomes, None, key=f"{key}_outcomes_table", pinned=("selector", "budget"))
        csv_button(d.outcomes, f"outcomes-{d.example_id}", f"{key}_outcomes_csv", "Outcomes as CSV")
        if not d.costs.empty:
            show_table(d.costs, None, key=f"{key}_costs_table", pinned=("selector",))
        st.text(f"Attribution check: {d.attribution_text}")
    st.markdown("**Per-example report**")
    name = f"report-{d.example_id}"
    row = st.container(horizontal=True, vertical_alignment="center")
    row.download_button("Report (HTML)", data=lambda: render_report(d, "html", manifest), file_name=f"{name}.html",
                        mime="text/html", key=f"{key}_report_html", on_click="ignore")
    row.download_button("Report (JSON)", data=lambda: render_report(d, "json", manifest), file_name=f"{name}.json",
                        mime="application/json", key=f"{key}_report_json", on_click="ignore")


def _answer_tokens(d: Diagnosis, key: str, budget: float, chosen: list[str]) -> None:
    """Dense's answer token by token: the probability of each of its tokens under each cell."""
    with st.expander("The dense answer token by token: its probability under each cell", expanded=True):
        try:
            fig = answer_tokens_figure(d, budget, chosen)
        except WorkbenchError as err:
            st.info(plain(err))
            return
        st.caption("Each column is a token of the dense answer, teacher-forced: the probability each cache gives it "
                   "after the answer so far. A repair that keeps the decision keeps these near dense's row; the "
                   "first pale cell is where a cell starts to lose the answer.")
        show_figure(fig, f"answer-tokens-{d.example_id}-b{budget:g}", f"{key}_answer_tokens")


def diagnosis_panel(d: Diagnosis, key: str, manifest: Manifest | None = None) -> tuple[float, list[str]] | None:
    """Every per-example view of `d`; widget keys start with `key`. Returns the budget and the
    selectors shown (None when the diagnosis holds no selections)."""
    example_text(d)
    if d.selections.empty:
        st.warning("This diagnosis holds no selections (no selector was run).")
        return None
    budget, chosen = _choices(d, key)
    st.subheader("Answers")
    answers = answers_table(d, chosen, budget)
    show_answers(answers, key)
    csv_button(answers, f"answers-{d.example_id}-b{budget:g}", f"{key}_answers_csv")
    draws = draws_table(d, chosen, budget)
    if not draws.empty:
        with st.expander(f"Each draw of {', '.join(dict.fromkeys(draws['selector']))} (the table above shows the "
                         f"first draw's answer and the mean over draws)"):
            show_table(draws, DRAW_HEADERS, {"rows recomputed": count, **dict.fromkeys(DRAW_SCORES, short)},
                       key=f"{key}_draws_table", pinned=("selector", "draw"))
    _answer_tokens(d, key, budget, chosen)
    st.subheader("Tokens")
    token = _strip(d, key, budget, chosen)
    if chosen:
        _picks(d, key, budget, chosen, token)
    _heatmaps(d, key, token)
    _residual(d, key, budget, chosen)
    _layer_effects(d, key, budget, chosen)
    selectors_against(d, key, budget, token)
    _details(d, key, manifest)
    return budget, chosen
