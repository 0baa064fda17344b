"""KV Repair Workbench: the browser face. `make app` serves this page.

Until the full multi-page app lands, this page loads the embedded model once per process,
answers one example from the dense, spliced and repaired caches, and shows the splice's
deviation per layer.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import workbench as wb
from workbench.kv import relative_error
from workbench.repair import budget_rows

st.set_page_config(page_title="KV Repair Workbench", layout="wide")


@st.cache_resource(show_spinner="Loading the embedded model (once per process)...")
def model() -> wb.LoadedModel:
    return wb.load_model("smollm2-135m", device="cpu")


st.title("KV Repair Workbench")
st.caption("Splice isolated passage caches, compare with the dense prefill, repair a budget of rows exactly.")

spec = st.text_input("Example (DATASET#ID)", "synthetic#0")
budget = st.slider("Budget: share of reused rows recomputed (the first rows of passages 2..k)", 0.0, 1.0, 0.2, 0.05)
try:
    example = wb.load_example(spec)
except wb.WorkbenchError as err:
    st.error(str(err))
    st.stop()

for i, passage in enumerate(example.passages, 1):
    st.markdown(f"**Passage {i}.** {passage}")
st.markdown(f"**Question.** {example.question} &nbsp; **Gold:** {' | '.join(example.gold)}")

with st.spinner("Splicing, prefilling and repairing..."):
    ctx = wb.build_context(model(), example)
    n = budget_rows(budget, ctx.n_reused)
    fixed = ctx.repair(ctx.reused_positions[-n:] if n else [])
    answers = pd.DataFrame({
        "cache": ["dense", "spliced", f"repaired ({n} of {ctx.n_reused} rows)"],
        "answer": [ctx.answer(ctx.dense), ctx.answer(ctx.spliced), ctx.answer(fixed)],
    })
st.dataframe(answers, hide_index=True)

err = relative_error(ctx.spliced, ctx.dense)
st.subheader("Relative deviation of the splice from dense, per layer")
st.line_chart(pd.DataFrame({"keys": err["k"].numpy(), "values": err["v"].numpy()}))
