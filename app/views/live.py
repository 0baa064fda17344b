"""Live: type or paste passages and a question (or load an example of any data set kind: synthetic,
ruler, hotpotqa, ...), choose selectors and budgets, diagnose it on the model now, explore it with
the same views as the Example explorer, and save it as a run."""

from __future__ import annotations

import re
import time

import streamlit as st

import jobs
import state
from live_fields import example_fields
from status import report_error, session_label
from heads_lens_panel import heads_lens_panel
from diagnosis_panel import diagnosis_panel
from widgets import plain
import workbench.app_api as wb
from workbench.app_api import DiagnoseConfig, WorkbenchError, check_budgets, parse_dataset_spec, parse_selectors

FIRST_EXAMPLE = "synthetic#5"  # a synthetic example whose splice flips the embedded model's answer
ARG_HELP = ("synthetic: a seed (empty: 0); ruler: a task (niah_single, niah_multikey, niah_multivalue, "
            "variable_tracking; made at 1024 of the model's tokens); hotpotqa, 2wiki, jsonl, musique: a file path")


def selector_options() -> list[str]:
    """The quick selectors, then every registered selector in each of its units, then the coin matched
    to each informed quick selector (`coin:bcr`: BCR's own control)."""
    specs = list(state.quick_selectors())
    for name in wb.selector_choices():
        info = wb.selector_info(name)
        if not info.matched:  # a matched coin needs its selector: offered below as coin:NAME
            specs += [name] + [f"{name}:{unit}" for unit in info.units if unit != info.default_unit]
    informed = [s for s in state.quick_selectors() if not (wb.selector_info(s.partition(":")[0]).drawn
                                                            or wb.selector_info(s.partition(":")[0]).is_reference)]
    return list(dict.fromkeys(specs + [f"coin:{s}" for s in informed]))


def load_into_fields(spec: str) -> None:
    """Fill the inputs from the example `spec` names (ruler data is made with the model's tokenizer)."""
    tokenizer = max_positions = None
    if parse_dataset_spec(spec).kind == "ruler":
        model = state.get_model()
        tokenizer, max_positions = model.tokenizer, model.max_positions
    example = wb.load_example(spec, tokenizer=tokenizer, max_positions=max_positions)
    st.session_state.update(example_fields(example, spec))
    st.session_state.pop("live_opened_from", None)


def load_chosen() -> None:
    """The load button's callback (runs before the widgets): the chosen data set's example, or a message."""
    kind = st.session_state.get("live_kind", "synthetic")
    arg = (st.session_state.get("live_arg") or "").strip()
    spec = f"{kind}:{arg}" if arg else kind
    spec += f"#{(st.session_state.get('live_example_id') or '').strip()}"
    try:
        load_into_fields(spec)
    except WorkbenchError as err:
        st.session_state["live_load_error"] = f"Could not load {spec!r}: {err}"


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
    try:
        return wb.Example(st.session_state.get("live_id") or "live", tuple(passages), question, gold,
                          system=(st.session_state.get("live_system") or "").strip() or None,
                          meta={"answer_lead": st.session_state.get("live_lead") or "", "source": "app Live page",
                                "scoring": "all" if st.session_state.get("live_all") else "any"})
    except WorkbenchError as err:
        st.warning(plain(err))
        return None


def read_config() -> DiagnoseConfig | None:
    """The DiagnoseConfig the fields ask for, or None after a message."""
    text = st.session_state.get("live_budgets", "")
    try:
        budgets = check_budgets([float(b) for b in re.split(r"[,\s]+", text) if b.strip()])
    except ValueError:
        st.warning(f"Budgets must be numbers between 0 and 1, e.g. 0.1, 0.3; got {plain(repr(text))}.")
        return None
    try:
        specs = parse_selectors(list(st.session_state.get("live_selectors") or []))
        return DiagnoseConfig(selectors=tuple(s.label for s in specs), budgets=budgets,
                              max_new_tokens=int(st.session_state.get("live_max_new", 16)),
                              attribution=bool(st.session_state.get("live_attribution")),
                              stop_at_newline=not st.session_state.get("live_whole", False)).checked()
    except WorkbenchError as err:
        st.warning("Choose at least one selector." if "no selectors" in str(err) else plain(err))
        return None


def fits(model: wb.LoadedModel, example: wb.Example, max_new: int) -> bool:
    """Say the limit when the context is too long for the model (or for Live on this machine)."""
    n = wb.context_length(model, example)
    if n + max_new > model.max_positions:
        st.warning(f"The example is too long for the model: {n} context tokens + {max_new} answer tokens, and "
                   f"{plain(model.name)} takes at most {model.max_positions} positions. Shorten the passages.")
        return False
    limit = state.live_max_tokens()
    if n > limit:
        st.warning(f"The example is too long for Live: {n} tokens, the limit is {limit} tokens (set "
                   f"${state.LIVE_MAX_ENV} to raise it, or run `kvwb diagnose` from a shell).")
        return False
    return True


# Share of the bar each stage fills: the repairs (batched cells with their answers) dominate.
STAGE_SPAN = {"context": (0.0, 0.05), "signals": (0.05, 0.25), "repairs": (0.25, 1.0)}
STAGE_TEXT = {"context": "splice and dense reference", "signals": "signals and selections",
              "repairs": "repairs with their answers"}
# How often the progress redraws: each redraw is a script run that takes the GIL from the job's thread
# (the status box redraws each second too; state.keep_redraws_light keeps those runs short).
POLL_S = 1.0
JOB, NOTICE = "live_job", "live_notice"  # session keys: the run in flight, how the last one ended
ASKED, USED = "live_asked", "live_used"  # the field values the run in flight / the diagnosis shown was computed with
FIELDS = {"model_spec": "model", "live_passages": "passages", "live_question": "question",
          "live_gold": "accepted answers", "live_system": "system prompt", "live_lead": "answer lead",
          "live_all": "every answer must be named", "live_selectors": "selectors", "live_budgets": "budgets",
          "live_max_new": "answer tokens", "live_whole": "answers scored whole", "live_attribution": "attribution check"}


def field_values() -> dict:
    """The fields as they are now (what a run started now would be computed with)."""
    return {key: st.session_state.get(key) for key in FIELDS}


def computed_with(d, asked: dict | None) -> None:
    """Which field values the diagnosis shown was computed with, and which fields differ now."""
    ex, c = d.example, d.config
    st.caption(f"Computed with: model {plain(d.model.get('name', '?'))}; example {plain(ex.id)} ({len(ex.passages)} "
               f"passages; question: {plain(ex.question)}); selectors {plain(', '.join(c.selectors))}; budgets "
               f"{', '.join(f'{b:g}' for b in c.budgets)}; {c.max_new_tokens} answer tokens"
               f"{'' if c.stop_at_newline else ', scored whole'}{'; the attribution check' if c.attribution else ''}.")
    changed = [label for key, label in FIELDS.items() if asked is not None and asked.get(key) != st.session_state.get(key)]
    if changed:
        st.warning(f"The fields have changed since this diagnosis was computed ({', '.join(changed)}): it shows the "
                   f"values above, not the fields'. Press **Run diagnosis** to compute it with the fields as they are.")


def progress_report(job: jobs.Job, ctx):
    """A `diagnose` progress callback that moves the job's progress: stage, then cells done of cells."""
    def report(stage: str, done: int, total: int) -> None:
        low, high = STAGE_SPAN.get(stage, (0.0, 1.0))
        unit = "cells" if stage == "repairs" else "selectors" if stage == "signals" else "steps"
        if stage == "repairs" and done >= total:  # the cells are done; dense's pass, the outcomes and tables follow
            job.progress(0.97, f"all {total} cells done: the dense reference's pass, the outcomes, the tables and "
                               f"the layer effects ({ctx.layout.n_tokens} tokens)")
            return
        job.progress(low + (high - low) * done / max(1, total),
                     f"{STAGE_TEXT.get(stage, stage)}: {done} of {total} {unit} "
                     f"({ctx.layout.n_tokens} tokens, {ctx.n_reused} reused)")
    return report


def run_live() -> None:
    """Check the fields, then start the diagnosis as a job on the model gate (its own thread: a
    widget change while it runs reruns the page, never the diagnosis)."""
    example = build_example()
    config = read_config() if example is not None else None
    if config is None:
        return
    try:
        model = state.get_model()
        if not fits(model, example, config.max_new_tokens):
            return
    except WorkbenchError as err:
        report_error(f"Could not load or use the model {state.model_spec()}: {err}")
        st.error(f"Could not load or use the model {plain(state.model_spec())}: {plain(err)}")
        return

    def work(job: jobs.Job):
        job.progress(0.0, "prefilling each passage in isolation, splicing, dense prefill")
        diagnosis = wb.live_diagnose(model, example, config, progress_for=lambda ctx: progress_report(job, ctx))
        job.progress(1.0, "done")
        return diagnosis

    st.session_state.pop(NOTICE, None)
    st.session_state[ASKED] = field_values()
    st.session_state[JOB] = jobs.start(jobs.Job(f"a Live diagnosis of example {example.id}", owner=session_label()),
                                       state.model_gate(), work)
    st.rerun()  # the page again, now with the run in flight (its progress, the Cancel button)


def cancel() -> None:
    job = st.session_state.get(JOB)
    if job is not None:
        job.cancel_requested = True


def collect() -> None:
    """A job that ended: its diagnosis into the page, or a notice that says how it ended."""
    job = st.session_state.get(JOB)
    if job is None or job.active:
        return
    del st.session_state[JOB]
    if job.state == "done":
        st.session_state.update(live_diagnosis=job.result, live_seconds=job.seconds)
        st.session_state[USED] = st.session_state.get(ASKED)
    elif job.state == "cancelled":
        st.session_state[NOTICE] = ("warning", "The diagnosis was cancelled (Cancel was pressed); nothing was "
                                               "kept. Press **Run diagnosis** to start again.", None)
    else:
        st.session_state[NOTICE] = ("error", f"The diagnosis failed: {plain(job.error)}", job.trace)
        report_error(f"The Live diagnosis failed: {job.error}", job.trace)


def _progress() -> None:
    """The job in flight (polled): waiting for the model, or its stage; the whole page once it ends."""
    job = st.session_state.get(JOB)
    if job is None:
        return
    if not job.active:
        st.rerun()
    if job.state == "waiting":
        st.info(plain(state.model_gate().busy_text(job)))
    else:
        st.progress(job.share, text=f"{job.text or 'starting'} · {job.seconds:.0f} s since it got the model")
    st.caption("Changing the fields now does not stop this run: it finishes with the fields as they were when "
               "you pressed Run, and its diagnosis replaces the one below.")


def save_panel(diagnosis) -> None:
    """Save the diagnosis as a run folder of kind "diagnosis" (through the run store)."""
    st.subheader("Save as a run")
    if "live_save_name" not in st.session_state:
        st.session_state["live_save_name"] = (f"live-{wb.folder_name(diagnosis.example_id)}-"
                                              f"{time.strftime('%Y%m%d-%H%M%S')}")
    n1, n2 = st.columns([3, 1])
    name = n1.text_input(f"Run name (a folder under {plain(state.runs_root())})", key="live_save_name")
    if not n2.button("Save as run", key="live_save"):
        return
    clean = (name or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", clean):
        st.warning("Use a run name of letters, digits, '.', '_' and '-' (not starting with '.').")
        return
    try:
        out = wb.check_out(state.runs_root() / clean, kind="diagnosis")
        wb.save_diagnosis(out, diagnosis, state.get_model())
    except (WorkbenchError, OSError) as err:
        report_error(f"Could not save the Live diagnosis as {clean}: {err}")
        st.warning(f"Could not save: {plain(err)}")
    else:
        st.success(f"Saved to {plain(out)}: open it in the Example explorer.")


st.title("Live")
st.caption(f"Diagnose one example on {plain(state.model_spec())} now: each passage is prefilled in isolation and "
           f"spliced, compared with the dense prefill, and repaired at each budget by each selector.")
if "live_passages" not in st.session_state:
    load_into_fields(FIRST_EXAMPLE)
collect()
busy = st.session_state.get(JOB) is not None

with st.container(border=True):
    c1, c2, c3, c4 = st.columns([1, 2, 1, 1])
    c1.selectbox("Data set", wb.dataset_choices(), key="live_kind")
    c2.text_input("Seed, task or file", key="live_arg", help=ARG_HELP)
    c3.text_input("Example id", value=FIRST_EXAMPLE.split("#")[1], key="live_example_id")
    c4.button("Load into the fields", key="live_load", on_click=load_chosen)
    if st.session_state.get("live_load_error"):
        st.warning(plain(st.session_state["live_load_error"]))
    st.text_area("Passages (one per paragraph: separate passages with an empty line)", key="live_passages",
                 height=200)
    st.text_input("Question", key="live_question")
    st.text_input("System prompt (the prefix every sender shares; optional)", key="live_system")
    g1, g2, g3 = st.columns([2, 2, 1.5])  # the checkbox label whole at 1440 px
    g1.text_input("Accepted answers (optional; separate with |)", key="live_gold")
    g2.text_input("Answer lead written on the assistant turn", key="live_lead",
                  help="Small models answer in a few scoreable tokens after a lead such as 'Answer:'.")
    g3.checkbox("Every answer must be named", key="live_all",
                help="Exact match means all the listed values appear in the answer (RULER's multi-value and "
                     "variable-tracking tasks), not one of them.")
    if "live_selectors" not in st.session_state:
        st.session_state["live_selectors"] = state.quick_selectors()
    options = list(dict.fromkeys(selector_options() + list(st.session_state["live_selectors"])))  # and those opened
    st.multiselect("Selectors (type NAME:UNIT for another unit of choice)", options, key="live_selectors",
                   accept_new_options=True)  # a row of its own: every chip in view
    s2, s3 = st.columns([3, 1])
    s2.text_input("Budgets (fractions of the candidate rows, passages after the first, comma-separated)", value="0.1, 0.3", key="live_budgets")
    s3.number_input("Answer tokens", min_value=1, max_value=128, value=16, key="live_max_new")
    c1, c2 = st.columns(2)
    c1.checkbox("Score the whole answer, past its first line break", key="live_whole",
                help="By default an answer ends at its first line break and that line is scored: a model that "
                     "writes ':' and then a list on the next lines scores nothing. Checked, the answer runs to "
                     "the answer tokens or an end of turn and all of it is scored, as RULER reads a prediction "
                     "(kvwb --no-stop-at-newline).")
    c2.checkbox("Also run the attribution check (3 x 64 patched forwards: slower)", key="live_attribution")
    b1, b2 = st.columns([1, 4])
    run_clicked = b1.button("Run diagnosis", type="primary", key="live_run", disabled=busy)
    if busy:
        b2.button("Cancel the run", key="live_cancel", on_click=cancel)

if run_clicked:
    run_live()
if st.session_state.get(JOB) is not None:
    st.fragment(run_every=POLL_S)(_progress)()
notice = st.session_state.get(NOTICE)
if notice is not None:
    kind, text, trace = notice
    getattr(st, kind)(text)
    if trace:
        with st.expander("Details"):
            st.code(trace)
diagnosis = st.session_state.get("live_diagnosis")
if diagnosis is None:
    if st.session_state.get(JOB) is None:
        opened = st.session_state.get("live_opened_from")
        filled = (f"example {plain(opened)} from the explorer is in the fields, with its selectors and budgets: "
                  f"edit its passages or question first if you like" if opened else
                  "a synthetic example is already filled in")
        st.info(f"Press **Run diagnosis**: {filled}. On the embedded model on a CPU it takes some seconds to a "
                f"minute, depending on the selectors and the length.")
    st.stop()

st.divider()
st.header("Diagnosis")
timing = st.empty()
computed_with(diagnosis, st.session_state.get(USED))
shown = time.perf_counter()
view = diagnosis_panel(diagnosis, "liveview")
timing.caption(f"Diagnosed in {st.session_state.get('live_seconds', 0.0):.1f} s on the model; drawn in "
               f"{time.perf_counter() - shown:.1f} s (figures and tables).")
if view is not None:
    heads_lens_panel(diagnosis, "liveview", f"live:{id(diagnosis)}", *view, st.session_state.get("liveview_token"))
save_panel(diagnosis)
