"""Decision flips: examples x selectors at a budget (where the repaired answer flips against
dense, as each outcome records it; a run of more than 40 examples a page of 40 at a time, in the
chosen order, each example labelled and the selectors named above and below), which examples
each selector rescues, and how the rescues overlap."""

from __future__ import annotations

import streamlit as st

import state
from navigation import PAGES
from readable import compact, count, general, short, show_table
from widgets import choose_run, csv_button, ensure_choice, plain, show_figure, warn
from workbench import plots
from workbench.app_api import (
    WorkbenchError, flip_matrix, flip_rates, graded_rates, natural_key, rescue_overlap, rescues,
)


RATE_HEADERS = {"selector": "selector", "budget": "budget b", "flips": "flips", "n": "n", "flip_rate": "flip rate",
                "low": "95% low", "high": "95% high"}
GRADED_HEADERS = {"selector": "selector", "budget": "budget b", "flip_rate": "flip rate",
                  "f1_to_dense": "F1 to dense", "first_token_agree": "1st token = dense's", "first_kl": "KL 1st token",
                  "agree_prefix": "leading tokens = dense's", "dense_logprob_mean": "dense log-prob / token"}
FORMATS = {"budget": compact, "flips": general, "n": count, "first_kl": short}  # KL: 3 significant figures
PINNED = {"selector": "medium"}  # the pinned selector column wide enough for "cadence-grad"
RESCUE_HEADERS = {"selector": "selector", "rescued": "rescued", "broken": "broken",
                  "rescued_examples": "examples rescued", "broken_examples": "examples broken"}
RESCUE_LINE = 50  # characters of ids a list column holds on one line; longer lists wrap
RESCUE_IDS = 12  # ids a cell of the rescues table shows, then "… (+k more)": every id is in the expander under it
RESCUE_WIDTH = 340  # px of each list column: both beside the counts inside the page


def open_example(run: str, example: str, selector: str, budget: float) -> None:
    """The explorer on that example, at this budget, with that selector shown first."""
    st.switch_page(PAGES["explorer"].path, query_params={"run": run, "example": str(example), "budget": f"{budget:g}",
                                                         "selectors": selector})


def sort_rows(matrix, order: str):
    """The flip matrix's rows by example id (2 before 10), by disagreement among the selectors
    (p·(1 − p) of the share that flips; highest first), or by one selector's outcome (its flips
    first); ties by disagreement, then id."""
    by_id = matrix.reindex(sorted(matrix.index, key=natural_key))
    if order == "id":
        return by_id
    share = by_id.mean(axis=1)
    keys = by_id.assign(_split=-(share * (1 - share)), _id=range(len(by_id)))
    columns = (["_split"] if order == "disagreement" else [order, "_split"]) + ["_id"]
    if order != "disagreement":
        keys[order] = -keys[order]
    return by_id.loc[keys.sort_values(columns, kind="stable").index]


PER_PAGE = 40  # examples per page of the flip matrix: each one labelled, the selectors named above and below


def page_of(matrix, order: str):
    """The rows of the flip matrix shown (all of a small run; of a larger one, a page of PER_PAGE in
    the chosen order, picked by a row of buttons under the sort) and the title's words for them."""
    if len(matrix) <= PER_PAGE:
        return matrix, ""
    starts = list(range(0, len(matrix), PER_PAGE))
    spans = {s: f"{s + 1}–{min(s + PER_PAGE, len(matrix))}" for s in starts}
    if st.session_state.get("flips_page_order") != order:  # a new order opens on its first page
        st.session_state["flips_page_order"], st.session_state["flips_page"] = order, 0
    ensure_choice("flips_page", starts, 0)
    start = st.radio(f"Examples shown ({len(matrix)} in all, {PER_PAGE} a page, in the order above)", starts,
                     key="flips_page", horizontal=True, format_func=spans.get)
    return matrix.iloc[start:start + PER_PAGE], f", examples {spans[start]} of {len(matrix)}"


def ids_text(ids, most: int | None = None) -> str:
    """Example ids in order (2 before 10); past `most`, the first `most` and how many more."""
    ordered = sorted(map(str, ids), key=natural_key)
    if most is None or len(ordered) <= most:
        return ", ".join(ordered)
    return ", ".join(ordered[:most]) + f" … (+{len(ordered) - most} more)"


st.title("Decision flips")

run = choose_run(("sweep",), key="flips_run", stop_on_problems=True)
try:
    sweep = state.read_sweep(run.path)
    outcomes = sweep.outcomes
except WorkbenchError as err:
    warn(err)
    st.stop()

budgets = sorted(float(b) for b in outcomes["budget"].unique())
selectors = list(dict.fromkeys(outcomes["selector"]))
c1, c2, c3 = st.columns(3)
ensure_choice("flips_budget", budgets, budgets[0])
if len(budgets) > 1:
    budget = c1.select_slider("Budget", budgets, key="flips_budget", format_func=lambda b: f"{b:g}")
else:
    budget = budgets[0]
    c1.markdown(f"Budget: **{budget:g}**")
strict = c2.toggle("Token-exact flips", key="flips_strict",
                   help="On: any token differs from the dense answer. Off: the answers differ after SQuAD "
                        "normalization (case, punctuation, articles).")
ensure_choice("flips_baseline", selectors, "none" if "none" in selectors else selectors[0])
baseline = c3.selectbox("Rescued relative to", selectors, key="flips_baseline",
                        help="An example is rescued when this selector's answer flips and the other's does not.")

matrix = flip_matrix(outcomes, budget, strict=strict)
orders = ["id", "disagreement", *matrix.columns]
ensure_choice("flips_sort", orders, "id")
order = st.selectbox("Rows sorted by", orders, key="flips_sort",
                     format_func=lambda o: {"id": "example id",
                                            "disagreement": "disagreement (selectors split most evenly first)"}.get(
                         o, f"{o}'s outcome (its flips first)"),
                     help="Disagreement: the share of selectors that flip, p, as p·(1 − p): highest where the "
                          "selectors split evenly, 0 where all flip or none does. A coin counts by the share of its "
                          "draws that flip.")
matrix = sort_rows(matrix, order)
page, pages = page_of(matrix, order)
questions = dict(zip(sweep.examples["example_id"].astype(str), sweep.examples["question"].astype(str)))
draws = outcomes.groupby(["selector", "example_id", "budget"]).size().groupby("selector").max().to_dict()
event = show_figure(plots.flip_matrix_figure(page, f"Flips against dense at b = {budget:g} "
                                                   f"({'token-exact' if strict else 'normalized'}){pages}; click a "
                                                   f"cell to open the example", questions=questions, draws=draws),
                    f"flip-matrix-{run.name}-b{budget:g}", "flips_matrix", select=True)
clicked = [p.get("customdata") for p in (event.selection.points if event else []) if p.get("customdata")]
if clicked:
    open_example(run.name, *clicked[0][:2], budget)
o1, o2 = st.columns([3, 1])
ensure_choice("flips_open", list(matrix.index), matrix.index[0])
chosen = o1.selectbox("Or pick an example to open", list(matrix.index), key="flips_open",
                      format_func=lambda i: f"{i}: {questions.get(str(i), '')}")
o2.page_link(PAGES["explorer"].path, label="Open in the explorer", icon=PAGES["explorer"].icon,
             query_params={"run": run.name, "example": str(chosen), "budget": f"{budget:g}"})
shown = matrix.round(3).reset_index()
with st.expander("Flip matrix as a table (1 = flip; a coin: the share of its draws that flip)"):
    show_table(shown, {"example_id": "example", **{c: c for c in matrix.columns}},  # no outcome of a selector: blank
               dict.fromkeys(matrix.columns, compact), key="flips_matrix_table", pinned=("example_id",))
csv_button(shown, f"flip-matrix-{run.name}-b{budget:g}", "flips_matrix_csv", "Flip matrix as CSV")

st.subheader(f"Rescues at b = {budget:g} (relative to {plain(baseline)})")
st.caption("Rescued: the baseline flips, the repair keeps dense's answer; broken: the reverse. A coin, as the "
           "repair or the baseline, counts by the share of its draws that flip (the expected count for one draw "
           "of each, never a vote); its examples are those any draw rescues or breaks.")
resc = rescues(outcomes, budget, baseline, strict=strict)
lists = ("rescued_examples", "broken_examples")
whole = resc.assign(**{c: resc[c].map(ids_text) for c in lists})
shown_resc = resc.assign(**{c: resc[c].map(lambda ids: ids_text(ids, RESCUE_IDS)) for c in lists})
longest = max((len(t) for c in lists for t in shown_resc[c]), default=0)
show_table(shown_resc, RESCUE_HEADERS, {"rescued": count, "broken": count}, key="flips_rescues_table",
           pinned=("selector",), wrap=longest > RESCUE_LINE, widths=dict.fromkeys(lists, RESCUE_WIDTH))
cut = whole[(whole[list(lists)] != shown_resc[list(lists)]).any(axis=1)]
if len(cut):
    with st.expander(f"Every example id rescued and broken (the table shows the first {RESCUE_IDS} of each)"):
        for r in cut.itertuples():
            st.markdown(f"**{plain(r.selector)}** rescued {count(r.rescued)}: {plain(r.rescued_examples) or 'none'}  \n"
                        f"broken {count(r.broken)}: {plain(r.broken_examples) or 'none'}")
csv_button(whole, f"rescues-{run.name}-b{budget:g}", "flips_rescues_csv", "Rescues as CSV")
st.markdown("**Overlap of rescues** (examples both selectors rescue; the diagonal: the examples each one rescues, "
            "a coin's those any draw rescues, not its expected count above)")
overlap = rescue_overlap(outcomes, budget, baseline, strict=strict)
show_table(overlap.reset_index(names="selector"), {"selector": "selector", **{c: c for c in overlap.columns}},
           dict.fromkeys(overlap.columns, count), key="flips_overlap_table", pinned=("selector",))
csv_button(overlap.reset_index(names="selector"), f"rescue-overlap-{run.name}-b{budget:g}", "flips_overlap_csv",
           "Overlap as CSV")

st.subheader("Flip rate per selector and budget")
rates = flip_rates(outcomes, strict=strict)
show_table(rates, RATE_HEADERS, FORMATS, key="flips_rates_table", pinned=("selector", "budget"), widths=PINNED)
csv_button(rates, f"flip-rates-{run.name}", "flips_rates_csv", "Flip rates as CSV")

st.subheader("Graded outcomes beside the flip")
st.caption("A flip says only that the output changed against dense. Beside it, per selector and budget: "
           "F1 of the output to the dense answer, whether the first answer token is dense's and the KL of its "
           "distribution from dense's, how many leading tokens agree, and the dense answer's mean log-probability "
           "per token under the repair (runs made before these were recorded show them empty).")
graded = graded_rates(outcomes, strict=strict)
show_table(graded, GRADED_HEADERS, FORMATS, key="flips_graded_table", pinned=("selector", "budget"), widths=PINNED)
csv_button(graded, f"graded-{run.name}", "flips_graded_csv", "Graded outcomes as CSV")
