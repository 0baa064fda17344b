"""Widgets every page shares: the run picker, figures with their exports, CSV buttons, valid
widget state, and `plain`, the one way data text goes into a markdown string."""

from __future__ import annotations

import re

import pandas as pd
import plotly.io as pio
import streamlit as st

import state
from navigation import PAGES
from workbench.app_api import RunFolder, make_command

_MARKDOWN_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def plain(value) -> str:
    """Text from data or the file system, safe inside a markdown string: every markdown (and
    Streamlit directive) character backslash-escaped, line breaks as spaces. Questions, answers,
    ids and paths are shown as text, never rendered (no image in a question is ever fetched)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def ensure_choice(key: str, options: list, default) -> None:
    """Keep a keyed widget's state valid when its options change (another run or example)."""
    value = st.session_state.get(key)
    if isinstance(default, list):
        if not isinstance(value, list) or any(v not in options for v in value):
            st.session_state[key] = [v for v in (value or []) if v in options] or default
    elif value not in options:
        st.session_state[key] = default


# ----------------------------------------------------------------------------- runs

def how_to_get_data(kind: str) -> None:
    """The message pages show instead of an error when no run of a kind exists."""
    what = {"sweep": "sweep runs", "curve": "unit-of-choice curve runs", "fidelity": "fidelity runs",
            "pipeline": "multi-agent pipeline runs"}.get(kind, "runs")
    root = state.runs_root()
    text = f"No {what} under {plain(root)} yet. Make one from a shell with `{make_command(kind, root)}`"
    if kind == "sweep":
        text += ", or press **Compute demo run** on the Runs page (several minutes on a CPU)"
    st.info(text + ". The **Live** page works without any run.")
    if kind == "sweep":
        st.page_link(PAGES["runs"].path, label="Runs page (compute demo run)", icon=PAGES["runs"].icon)
    st.page_link(PAGES["live"].path, label="Live: diagnose an example now", icon=PAGES["live"].icon)


def _run_label(run: RunFolder) -> str:
    bits = [run.kind or "?", run.status] + (["incomplete"] if run.problems else [])
    return f"{run.name} ({', '.join(bits)})"


def pick_run(runs: list[RunFolder], key: str, label: str = "Run") -> RunFolder:
    """A select box of runs; the choice is shared between pages (session key `kvwb_run`) and
    taken from a deep link (?run=NAME) when the page opens."""
    names = [r.name for r in runs]
    asked = st.query_params.get("run")
    if key not in st.session_state and asked in names:
        st.session_state[key] = asked
    if st.session_state.get(key) not in names:
        current = st.session_state.get("kvwb_run")
        st.session_state[key] = current if current in names else names[0]
    by_name = {r.name: r for r in runs}
    name = st.selectbox(label, names, key=key, format_func=lambda n: _run_label(by_name[n]))
    st.session_state["kvwb_run"] = name
    return by_name[name]


def show_problems(run: RunFolder) -> None:
    for problem in run.problems:
        st.warning(f"{plain(run.path)}: {plain(problem)}. Showing what is there.")


def choose_run(kinds: tuple[str, ...], key: str, stop_on_problems: bool = False) -> RunFolder:
    """The header every run view shares: the runs of `kinds` (how to make one when there is
    none), the picker, and what the chosen run lacks (stopping there if asked)."""
    runs = state.scan_runs(kinds)
    if not runs:
        how_to_get_data(kinds[0])
        st.stop()
    run = pick_run(runs, key=key)
    show_problems(run)
    if stop_on_problems and run.problems:  # the tables the view needs are missing or too old
        st.stop()
    return run


def warn(err: Exception | str) -> None:
    """An error from the library as a warning (its text may quote data: shown plain)."""
    st.warning(plain(err))


# ----------------------------------------------------------------------------- figures and exports

def has_kaleido() -> bool:
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return True


# Importing streamlit makes its "streamlit" template plotly's default: placeholder colours
# (#000001..#000040) that only its chart component replaces. Figures in the app must look like
# the same figures in notebooks and reports, and exports must carry real colours.
pio.templates.default = "plotly"
# The chart component rewrites those placeholder colours in any figure's JSON, even with
# theme=None, so a genuine one (Magma's first stop is #000004) is nudged by one unit of red.
_PLACEHOLDER_COLOR = re.compile(r'"#0000([0-3][0-9]|40)"', re.IGNORECASE)


def streamlit_safe(fig):
    """The same figure with any colour Streamlit would replace nudged by one unit of red."""
    spec = fig.to_json()
    if not _PLACEHOLDER_COLOR.search(spec):
        return fig
    return pio.from_json(_PLACEHOLDER_COLOR.sub(lambda m: f'"#0100{m.group(1)}"', spec))


def show_figure(fig, name: str, key: str, select=False):
    """The figure as `workbench.plots` drew it (no Streamlit theme), with its exports: standalone
    HTML (plotly.js embedded, opens offline) and PNG where kaleido is installed. With `select`, a
    click on a point reruns the page and the selection is returned (else None); `select` may be a
    callback, run before the page with the chart's event in `st.session_state[key + "_chart"]`."""
    event = st.plotly_chart(streamlit_safe(fig), key=f"{key}_chart", width="stretch", theme=None,
                            **({"on_select": "rerun" if select is True else select, "selection_mode": "points"}
                               if select else {}))
    row = st.container(horizontal=True, vertical_alignment="center")
    row.download_button("Figure as HTML", data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),
                        file_name=f"{name}.html", mime="text/html", key=f"{key}_html", on_click="ignore")
    if has_kaleido():
        row.download_button("Figure as PNG", data=lambda: fig.to_image(format="png", scale=2),
                            file_name=f"{name}.png", mime="image/png", key=f"{key}_png", on_click="ignore")
    return event if select else None


def csv_button(table: pd.DataFrame, name: str, key: str, label: str = "Table as CSV") -> None:
    st.download_button(label, data=lambda: table.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
                       key=key, on_click="ignore")
