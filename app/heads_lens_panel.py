"""Attention by head and the logit lens of one example, computed on demand: the example is laid out,
spliced and prefilled again on its model (the diagnosis keeps no caches), then one query row's
pattern per layer and head (dense, the splice, a repaired cell), the lens on every token of dense's
answer, and where an answer (dense's or the cell's own) looks while it is written. Nothing runs before
the button; each result is cached for the process, and the model is taken through the one gate every
session shares (`state.model_gate`)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import state
from model_work import gated, model_spec_for
from widgets import ensure_choice, plain, show_figure
import workbench.app_api as wb
from workbench.app_api import Diagnosis, Manifest, WorkbenchError
from workbench.plots import head_pattern_figure, logit_lens_figure
from workbench.plots.answer_attention import answer_attention_figure
from workbench.plots.text import visible

LAST, CHOSEN, OTHER = "last", "chosen", "other"
DENSE, OWN = "dense", "own"  # whose answer the attention figure follows
TOP_K = 5


@st.cache_resource(max_entries=2, show_spinner=False)
def _context(example_key: str, spec: str, _d: Diagnosis):
    model = state.load_model(spec)
    return gated(f"attention by head / the logit lens (example {_d.example_id})",
                 lambda: wb.reopen_context(model, _d))


@st.cache_resource(max_entries=16, show_spinner=False)
def _cell(example_key: str, spec: str, selector: str, budget: float, _d: Diagnosis):
    ctx = _context(example_key, spec, _d)
    return gated(f"the rows of {selector} (example {_d.example_id})", lambda: wb.cell_rows(ctx, _d, selector, budget))


@st.cache_resource(max_entries=16, show_spinner=False)
def _heads(example_key: str, spec: str, selector: str, budget: float, query: int, _d: Diagnosis) -> wb.HeadPatterns:
    ctx = _context(example_key, spec, _d)
    rows, context = _cell(example_key, spec, selector, budget, _d)
    return gated(f"attention by head (example {_d.example_id})",
                 lambda: wb.head_patterns(ctx, query, rows, context))


@st.cache_resource(max_entries=16, show_spinner=False)
def _lens(example_key: str, spec: str, selector: str, budget: float, _d: Diagnosis) -> pd.DataFrame:
    ctx = _context(example_key, spec, _d)
    rows, context = _cell(example_key, spec, selector, budget, _d)
    return gated(f"the logit lens (example {_d.example_id})",
                 lambda: wb.logit_lens(ctx, _d.answers.dense.token_ids, rows, context, k=TOP_K))


def cell_answer(d: Diagnosis, selector: str, budget: float) -> str:
    """The answer `selector` wrote at `budget` in `d` (a drawn one's first draw)."""
    o = d.outcomes
    cell = o[(o["selector"] == selector) & ((o["budget"] - budget).abs() < 1e-9)]
    return "" if cell.empty else str(cell.sort_values("draw")["answer"].iloc[0] if "draw" in cell else cell["answer"].iloc[0])


@st.cache_resource(max_entries=16, show_spinner=False)
def _looks(example_key: str, spec: str, selector: str, budget: float, whose: str, _d: Diagnosis) -> pd.DataFrame:
    ctx = _context(example_key, spec, _d)
    rows, context = _cell(example_key, spec, selector, budget, _d)
    ids = (list(_d.answers.dense.token_ids) if whose == DENSE
           else wb.written_answer_ids(ctx, cell_answer(_d, selector, budget)))
    return gated(f"where the answer looks (example {_d.example_id})",
                 lambda: wb.answer_attention(ctx, ids, rows, context))


def heads_lens_panel(d: Diagnosis, key: str, example_key: str, budget: float, chosen: list[str],
                     token: int | None, manifest: Manifest | None = None, model_spec: str | None = None) -> None:
    """The panel; `example_key` names the example for the caches (a run's folder and id)."""
    st.subheader("Attention by head and the logit lens")
    spec = model_spec_for(d, manifest, model_spec)
    cells = [s for s in dict.fromkeys(d.outcomes["selector"]) if s != "none"] if not d.outcomes.empty else []
    if not cells:
        st.info("This diagnosis holds no repaired cell to compare.")
        return
    n = d.context.n_tokens
    c1, c2 = st.columns([1, 2])
    ensure_choice(f"{key}_hl_cell", cells, next((s for s in chosen if s in cells and s != "full"), cells[0]))
    selector = c1.selectbox(f"Repaired cell (at b = {budget:g})", cells, key=f"{key}_hl_cell")
    options = [LAST] + ([CHOSEN] if token is not None else []) + [OTHER]
    ensure_choice(f"{key}_hl_query", options, LAST)
    labels = {LAST: f"the question's last row (position {n - 1}: it reads the first answer token)",
              CHOSEN: f"the token chosen in the strip (position {token})", OTHER: "another position"}
    which = c2.radio("Query row", options, key=f"{key}_hl_query", format_func=labels.get, horizontal=True)
    query = n - 1 if which == LAST else token if which == CHOSEN else int(
        c2.number_input("Position", 0, n - 1, n - 1, key=f"{key}_hl_position"))
    asked = (example_key, spec, selector, float(budget), int(query))
    done = st.session_state.setdefault("kvwb_heads_lens_done", set())
    if asked not in done:
        ask = st.empty()  # the offer, cleared once the views are drawn
        with ask.container():
            st.caption(f"Runs {plain(spec)} again on this example ({n} tokens: its context rebuilt once, then a pass "
                       f"per cache); nothing is computed until you ask.")
            if not st.button("Compute attention by head and the logit lens", key=f"{key}_hl_go"):
                return
        ask.empty()
    try:
        found = _heads(*asked, d)
        lens = _lens(*asked[:4], d)
    except WorkbenchError as err:
        st.warning(f"Could not compute them: {plain(err)}")
        return
    done.add(asked)
    _heads_view(found, key, selector, budget)
    _lens_view(lens, key, d)
    _looks_view(d, key, asked[:4], selector, budget)


def _heads_view(found: wb.HeadPatterns, key: str, selector: str, budget: float) -> None:
    for cache, note in found.notes.items():
        if note:
            st.info(f"{cache}: {plain(note)}")
    if not any(p is not None for p in found.patterns.values()):
        return
    any_pattern = next(p for p in found.patterns.values() if p is not None)
    layers = list(range(any_pattern.shape[0]))
    distance = found.distance()
    default = int(distance.argmax()) if distance is not None else layers[-1]
    ensure_choice(f"{key}_hl_layer", layers, default)
    layer = st.select_slider("Layer", layers, key=f"{key}_hl_layer")
    if distance is not None:
        st.caption(f"Repaired cell: {plain(selector)} at b = {budget:g} ({len(found.cell)} rows). The slider starts at "
                   f"layer {default}, where the splice's pattern differs most from dense's (total variation "
                   f"{float(distance[default]):.3f}, mean over heads); here it is {float(distance[layer]):.3f}.")
    show_figure(head_pattern_figure(found, layer), f"heads-{found.query}-layer{layer}", f"{key}_heads")


def _lens_view(lens: pd.DataFrame, key: str, d: Diagnosis) -> None:
    st.markdown("**Logit lens on every token of dense's answer**")
    show_figure(logit_lens_figure(lens), f"logit-lens-{d.example_id}", f"{key}_lens")
    steps = sorted(set(lens["step"]))
    targets = lens.drop_duplicates("step").set_index("step")["target_token"]
    layers = sorted(set(lens["layer"]))
    c1, c2 = st.columns(2)
    ensure_choice(f"{key}_lens_step", steps, steps[0])
    step = c1.selectbox("Answer token", steps, key=f"{key}_lens_step",
                        format_func=lambda s: f"{s}: {visible(targets[s])!r}")
    ensure_choice(f"{key}_lens_layer", layers, layers[-1])
    layer = c2.select_slider("Lens after layer", layers, key=f"{key}_lens_layer")
    at = lens[(lens["step"] == step) & (lens["layer"] == layer)].set_index("cache")
    table = pd.DataFrame({cache: [f"{visible(t)!r} {p:.3f}" for t, p in zip(row["top_tokens"], row["top_probs"])]
                          for cache, row in at.iterrows()}, index=pd.RangeIndex(1, TOP_K + 1, name="rank"))
    st.caption(f"The lens's top {TOP_K} tokens at layer {layer} for answer token {step} "
               f"({visible(targets[step])!r}); p of that token: "
               + ", ".join(f"{c} {row['p_target']:.3f} (rank {row['rank']})" for c, row in at.iterrows()))
    st.dataframe(table, width="stretch")


def _looks_view(d: Diagnosis, key: str, asked: tuple, selector: str, budget: float) -> None:
    st.markdown("**Where the answer looks while it is written**")
    ensure_choice(f"{key}_looks_whose", [DENSE, OWN], OWN)
    whose = st.radio("Answer followed", [DENSE, OWN], key=f"{key}_looks_whose", horizontal=True,
                     format_func={DENSE: "dense's answer", OWN: f"{selector}'s own answer"}.get)
    try:
        table = _looks(*asked, whose, d)
    except WorkbenchError as err:
        st.info(f"Nothing to show: {plain(err)}")
        return
    last = int(table["layer"].max())
    held = st.session_state.get(f"{key}_looks_layers")
    if not (isinstance(held, (tuple, list)) and len(held) == 2 and 0 <= held[0] <= held[1] <= last):
        st.session_state[f"{key}_looks_layers"] = (0, last)  # every layer, until another model's depth
    layers = st.slider("Layers (their mean)", 0, last, key=f"{key}_looks_layers")
    show_figure(answer_attention_figure(table, tuple(layers)), f"answer-attention-{d.example_id}", f"{key}_looks")
    st.caption("Each bar: the attention of the row that writes that answer token (mean over heads and the layers "
               "chosen), teacher-forced on the answer followed under each cache, split by what it reads: the gold "
               "evidence, the prompt, the rest of the passages that hold evidence, the passages that hold none and "
               "the answer so far (the colours of the answers' word sources on Budget curves). "
               + ("The cell's own answer is its recorded text tokenized again, which can split a word otherwise "
                  "than its decode did." if whose == OWN else ""))
