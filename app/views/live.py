"""Live: type or paste passages and a question (or start from a synthetic example), choose
selectors and budgets, run a Diagnosis on the model now, explore it with the same views as the
Example explorer, and save it as a run."""

from __future__ import annotations

import re
import time
import traceback

import streamlit as st

import common
import workbench as wb
from workbench.diagnose import check_budgets, diagnose
from workbench.errors import WorkbenchError
from workbench.layout import PromptFormat, build_layout
from workbench.selectors import parse_selectors, selector_names

DEFAULT_SELECTORS = ["none", "full", "random", "cacheblend", "densedev", "bcr:grow"]
FIRST_EXAMPLE = 5  # a synthetic example whose splice flips the embedded model's answer

st.title("Live")
st.caption(f"Diagnose one example on `{common.model_spec()}` now: each passage is prefilled in isolation and "
           f"spliced, compared with the dense prefill, and repaired at each budget by each selector.")


def load_synthetic(index: int) -> None:
    """Fill the inputs from synthetic example `index` (a button callback: runs before the widgets)."""
    example = wb.load_example(f"synthetic#{index}")
    st.session_state.update(live_passages="\n\n".join(example.passages), live_question=example.question,
                            live_gold=" | ".join(example.gold),
                            live_lead=example.meta.get("answer_lead", PromptFormat.answer_lead),
                            live_id=f"synthetic-{index}")


if "live_passages" not in st.session_state:
    load_synthetic(FIRST_EXAMPLE)

with st.container(border=True):
    c1, c2 = st.columns([1, 3])
    index = c1.number_input("Synthetic example", min_value=0, max_value=100_000, value=FIRST_EXAMPLE, step=1,
                        key="live_synth")
    c2.button("Load this synthetic example into the fields", key="live_load", on_click=load_synthetic,
              args=(int(index),))
    st.text_area("Passages (one per paragraph: separate passages with an empty line)", key="live_passages",
                 height=200)
    st.text_input("Question", key="live_question")
    g1, g2 = st.columns(2)
    g1.text_input("Accepted answers (optional; separate with |)", key="live_gold")
    g2.text_input("Answer lead written on the assistant turn", key="live_lead",
                  help="Small models answer in a few scoreable tokens after a lead such as 'Answer:'.")
    s1, s2, s3 = st.columns([3, 2, 1])
    names = selector_names()
    options = list(dict.fromkeys(DEFAULT_SELECTORS + names + ["bcr:single", "bcr:chunk"]))
    if "live_selectors" not in st.session_state:
        st.session_state["live_selectors"] = [s for s in DEFAULT_SELECTORS if s.split(":")[0] in names]
    s1.multiselect("Selectors (type NAME:LAYOUT for another layout)", options, key="live_selectors",
                   accept_new_options=True)
    s2.text_input("Budgets (fractions of the reused rows, comma-separated)", value="0.1, 0.3", key="live_budgets")
    s3.number_input("Answer tokens", min_value=1, max_value=128, value=16, key="live_max_new")
    attribution = st.checkbox("Also run the attribution check (3 x 64 patched forwards: slower)",
                              key="live_attribution")
    run_clicked = st.button("Run diagnosis", type="primary", key="live_run")


def parse_passages(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]


def build_example() -> wb.Example | None:
    """The example from the fields, or None after a message saying what is wrong."""
    passages = parse_passages(st.session_state.get("live_passages", ""))
    question = (st.session_state.get("live_question") or "").strip()
    if not passages:
        st.warning("The passage is empty: type or paste at least one passage (or load a synthetic example).")
        return None
    if not question:
        st.warning("The question is empty: type the question the receiver answers from the passages.")
        return None
    gold = tuple(g.strip() for g in (st.session_state.get("live_gold") or "").split("|") if g.strip())
    lead = st.session_state.get("live_lead") or ""
    try:
        return wb.Example(st.session_state.get("live_id") or "live", tuple(passages), question, gold,
                          meta={"answer_lead": lead, "source": "app Live page"})
    except WorkbenchError as err:
        st.warning(str(err))
        return None


def check_length(model: wb.LoadedModel, example: wb.Example, max_new: int) -> bool:
    """Say the limit when the context is too long for the model (or for Live on this machine)."""
    layout = build_layout(model.tokenizer, example, PromptFormat())
    n = layout.n_tokens
    if n + max_new > model.max_positions:
        st.warning(f"The example is too long for the model: {n} context tokens + {max_new} answer tokens, and "
                   f"`{model.name}` takes at most {model.max_positions} positions. Shorten the passages.")
        return False
    limit = common.live_max_tokens()
    if n > limit:
        st.warning(f"The example is too long for Live: {n} tokens, the limit is {limit} tokens (set "
                   f"${common.LIVE_MAX_ENV} to raise it, or run `kvwb diagnose` from a shell).")
        return False
    return True


def run_live() -> None:
    example = build_example()
    if example is None:
        return
    try:
        specs = parse_selectors(list(st.session_state.get("live_selectors") or []))
        budgets = check_budgets([float(b) for b in re.split(r"[,\s]+", st.session_state.get("live_budgets", ""))
                                 if b.strip()])
    except ValueError:
        st.warning(f"Budgets must be numbers between 0 and 1, e.g. 0.1, 0.3; got "
                   f"{st.session_state.get('live_budgets')!r}.")
        return
    except WorkbenchError as err:
        st.warning(str(err))
        return
    if not specs:
        st.warning("Choose at least one selector.")
        return
    try:
        model = common.get_model()
    except WorkbenchError as err:
        st.error(f"Could not load the model `{common.model_spec()}`: {err}")
        return
    max_new = int(st.session_state.get("live_max_new", 16))
    try:
        if not check_length(model, example, max_new):
            return
    except WorkbenchError as err:
        st.warning(str(err))
        return
    lock = common.model_lock()
    if not lock.acquire(blocking=False):
        job = common.demo_job()
        st.warning(f"The model is busy with the demo run ({job.done()} of {job.n} examples done); Live runs as "
                   f"soon as it finishes. Press **Run diagnosis** again then.")
        return
    started = time.perf_counter()
    try:
        with st.status("Diagnosing...", expanded=True) as status:
            bar = st.progress(0.0, text="1/3 · prefilling each passage in isolation, splicing, dense prefill")
            ctx = wb.build_context(model, example)
            n_repairs = len(specs) * len(budgets)
            bar.progress(0.34, text=f"2/3 · signals, selections and {n_repairs} repairs with answers "
                                    f"({ctx.layout.n_tokens} tokens, {ctx.n_reused} reused)")
            diagnosis = diagnose(model, example, [str(s) for s in specs], budgets, ctx=ctx, progress=False,
                                 attribution=bool(attribution), max_new_tokens=max_new)
            bar.progress(1.0, text="3/3 · done")
            status.update(label=f"Diagnosed in {time.perf_counter() - started:.1f} s", state="complete",
                          expanded=False)
    except WorkbenchError as err:
        st.warning(str(err))
        return
    except Exception as err:  # noqa: BLE001 - a message in the page, the details folded away
        st.error(f"The diagnosis failed: {type(err).__name__}: {err}")
        with st.expander("Details"):
            st.code(traceback.format_exc())
        return
    finally:
        lock.release()
    diagnosis.__dict__.pop("ctx", None)  # the caches behind it: not needed by the views
    st.session_state["live_diagnosis"] = diagnosis
    st.session_state["live_model_spec"] = common.model_spec()


if run_clicked:
    run_live()

diagnosis = st.session_state.get("live_diagnosis")
if diagnosis is None:
    st.info("Press **Run diagnosis**: a synthetic example is already filled in. On the embedded model on a CPU "
            "it takes some seconds to a minute, depending on the selectors and the length.")
    st.stop()

st.divider()
st.header(f"Diagnosis of `{diagnosis.example_id}`")
common.diagnosis_view(diagnosis, "liveview")

st.subheader("Save as a run")
default_name = f"live-{diagnosis.example_id}-{time.strftime('%Y%m%d-%H%M%S')}"
if "live_save_name" not in st.session_state:
    st.session_state["live_save_name"] = default_name
n1, n2 = st.columns([3, 1])
name = n1.text_input(f"Run name (a folder under `{common.runs_root()}`)", key="live_save_name")
if n2.button("Save as run", key="live_save"):
    clean = (name or "").strip()
    if not clean or not re.fullmatch(r"[A-Za-z0-9._-]+", clean) or clean.startswith("."):
        st.warning("Use a run name of letters, digits, '.', '_' and '-' (not starting with '.').")
    else:
        try:
            out = common.save_as_run(diagnosis, common.get_model(), common.runs_root() / clean)
        except (WorkbenchError, OSError) as err:
            st.warning(f"Could not save: {err}")
        else:
            st.success(f"Saved to `{out}`: open it in the Example explorer and the other pages.")
