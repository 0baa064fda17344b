"""Multi-agent reuse: a `kvwb pipeline` run (BCR §2–§4, KVComm): each call's decision on the
agent graph, the entropy gate against its threshold, reuse against accuracy with the allocation
line, the tokenization tax and the warm-up."""

from __future__ import annotations

import streamlit as st

import state
from readable import count, p_value, readable_headers, show_table, signed
from widgets import choose_run, csv_button, ensure_choice, plain, show_figure, warn
from workbench import plots
from workbench.app_api import WorkbenchError, gate_reasons, repair_summary, summarize_pipeline
from workbench.plots import pipeline as figures

TAX_HEADERS = {"chat_template": "chat-template", "token_matched": "token-matched", "kvcomm": "KVComm", "gap": "gap",
               "tokenization": "tokenization", "approximation": "approximation", "calls_differ": "calls differ"}
TAX_HELPS = {"chat_template": "chat-template's accuracy", "token_matched": "token-matched's accuracy",
             "kvcomm": "KVComm's accuracy", "gap": "chat-template − KVComm",
             "tokenization": "chat-template − token-matched", "approximation": "token-matched − KVComm",
             "calls_differ": "the share of calls whose two token sequences differ"}


def warmup_header(column: str) -> str:
    """A warm-up column's header: "acc_kvcomm" -> "kvcomm accuracy", "block" -> "requests"."""
    measure, _, method = column.partition("_")
    return {"acc": f"{method} accuracy", "reuse": f"{method} reuse"}.get(
        measure, "requests" if column == "block" else column)


st.title("Multi-agent reuse")
st.caption("A request runs on a pipeline of agents; each reads the shared task and the earlier agents' outputs "
           "as segments whose caches a reuse method predicts (KVComm) or prefills densely. Accuracy = the final "
           "answer contains an accepted answer.")

run = choose_run(("pipeline",), key="pipeline_run", stop_on_problems=True)
try:
    data = state.read_pipeline(run.path)
    tables = summarize_pipeline(data.requests, data.calls)
except (WorkbenchError, OSError, KeyError) as err:
    warn(err)
    st.stop()

args = data.manifest.args
spec = args.get("spec") or {}
edges = [tuple(e) for e in spec.get("edges", [])]
st.markdown(f"{plain(run.name)}: model {plain(data.manifest.model_name or '?')}, "
            f"{args.get('agents', '?')} agents ({plain(args.get('topology', '?'))}), "
            f"{data.requests['index'].nunique()} requests, status {plain(data.manifest.status)}.")

st.subheader("Reuse against accuracy")
show_figure(figures.reuse_vs_accuracy(tables["methods"]), f"reuse-accuracy-{run.name}", "pipe_line")
COUNTS = ("n", "b_anchor", "c_anchor", "b_ref", "c_ref")
# a call the gate never judged (a dense method, a first call) has no entropy, threshold or anchors: blank
CALL_HEADERS = {"agent": "agent", "role": "role", "depth": "depth", "reused": "reused", "max_entropy": "max entropy",
                "threshold": "threshold", "min_anchors": "least anchors", "confidence": "confidence",
                "template_differs": "template differs", "output": "output"}
show_table(tables["methods"], readable_headers(tables["methods"]),  # a missing test blank, never "None"
           {"p_anchor": p_value, "p_ref": p_value} | dict.fromkeys(COUNTS, count), key="pipeline_methods_table",
           pinned=("method",))
csv_button(tables["methods"], f"methods-{run.name}", "pipe_methods_csv", "Methods as CSV")

methods = list(dict.fromkeys(data.requests["method"]))
st.subheader("One request on the agent graph")
c1, c2 = st.columns(2)
ensure_choice("pipe_method", methods, "kvcomm" if "kvcomm" in methods else methods[0])
method = c1.selectbox("Method", methods, key="pipe_method")
done = sorted(data.requests[data.requests["method"] == method]["index"].unique().tolist())
labels = {i: f"request {i + 1} (example {data.requests[(data.requests['index'] == i)]['example_id'].iloc[0]})"
          for i in done}
ensure_choice("pipe_request", done, done[0])
index = c2.selectbox("Request", done, key="pipe_request", format_func=lambda i: labels[i])
calls = data.calls[(data.calls["method"] == method) & (data.calls["index"] == index)]
answer = data.requests[(data.requests["method"] == method) & (data.requests["index"] == index)].iloc[0]
show_figure(figures.agent_graph(calls, edges, title=f"{plain(method)}: request {index + 1}"),
            f"graph-{run.name}-{method}-{index + 1}", "pipe_graph")
st.text(f"Final answer: {answer['answer']}   (gold: {answer['gold']}; contains: {bool(answer['contains'])})")
show_table(calls, CALL_HEADERS, {"depth": count, "min_anchors": count}, key="pipeline_calls_table",  # blank, not "None"
           pinned=("agent",), widths={"output": "medium"}, wrap=True)

st.subheader("The entropy gate, call by call")
st.caption("KVComm reuses a call only when every slot's gate says so: at least 2 anchors and the entropy at or under "
           "γ·log2 n, decided once per message and kept. So a call under the threshold may still be prefilled "
           "densely (a slot with fewer anchors, another slot's lower threshold, a call policy, OpenGate's draft) and "
           "one over it reused (the pool already holds this agent's Δ); each marker's legend entry says which.")
try:
    chosen = data.calls[data.calls["method"] == method]
    show_figure(figures.gate_entropy(chosen.assign(reason=gate_reasons(chosen))),
                f"gate-{run.name}-{method}", "pipe_gate")
except WorkbenchError as err:
    st.info(plain(err))

st.subheader("Repair on top of the predicted final calls")
repair = repair_summary(data.repair)
if repair.empty:
    st.info("No repair in this run: `kvwb pipeline --repair-on kvcomm` repairs the final call of KVComm wherever "
            "it was served from a predicted cache, with BCR's selectors, cacheblend, densedev and cadence-grad "
            "against the five-draw coin.")
else:
    st.caption(f"{data.repair['index'].nunique()} final calls of {plain(data.repair['method'].iloc[0])} served "
               f"from a predicted cache; flips against each call's token-matched Dense.")
    show_figure(plots.budget_curve(repair, "flip_rate"), f"repair-{run.name}", "pipe_repair")
    show_table(repair, None, key="pipeline_repair_table", pinned=("selector", "budget"))  # a coin's b / c blank

st.subheader("Tokenization tax and warm-up")
if tables["tax"].empty:
    st.info("The tax needs chat-template, token-matched and kvcomm in the run.")
else:
    st.caption("Accuracy of each method; the gap between chat-template and KVComm split into the tokenization tax "
               "(chat-template − token-matched) and the approximation (token-matched − KVComm); the share of calls "
               "whose two token sequences differ.")
    show_table(tables["tax"], TAX_HEADERS, dict.fromkeys(("gap", "tokenization", "approximation"), signed),
               key="pipeline_tax_table", helps=TAX_HELPS)
warmup = tables["warmup"]
show_table(warmup, {c: warmup_header(c) for c in warmup.columns}, key="pipeline_warmup_table", pinned=("block",))
with st.expander("Manifest"):
    st.json(data.manifest.to_dict(), expanded=1)
