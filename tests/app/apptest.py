"""What the AppTest tests share: opening a page, checking it, reading its tables and figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

from workbench import plots
from workbench.runstore import load_sweep

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "app" / "Home.py"
PLUGIN = Path(__file__).with_name("toy_plugin.py")
LEAK = "![x](http://127.0.0.1:9/leak.png)"
TIMEOUT = 120


@pytest.fixture
def world(app_world) -> dict:
    """The session's run folders (tests/conftest.py builds them once)."""
    return app_world


@pytest.fixture
def _env(world, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(world["runs"]))
    monkeypatch.setenv("KVWB_MODEL", str(world["model"]))
    monkeypatch.delenv("KVWB_LIVE_MAX_TOKENS", raising=False)
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def open_page(page: str, runs: Path | None = None) -> AppTest:
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    if runs is not None:
        at.session_state["runs_dir"] = str(runs)
    at.run()
    at.switch_page(page)
    at.run()
    ok(at)
    return at


def ok(at: AppTest) -> None:
    """No exception; every figure's axes show all of its data and no text sits on a plotting area
    (`plots.figure_problems`)."""
    assert not at.exception, [(e.value, e.stack_trace) for e in at.exception]
    for chart in charts(at):
        assert not plots.figure_problems(chart), (chart.get("layout", {}).get("title"), plots.figure_problems(chart))


def frame_with(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first dataframe shown whose columns include `columns`."""
    for element in at.dataframe:
        value = element.value
        if all(c in value.columns for c in columns):
            return value
    raise AssertionError(f"no dataframe with columns {columns}; have {[list(d.value.columns) for d in at.dataframe]}")


def seen(element) -> pd.DataFrame:
    """A shown table as the browser draws it, each cell its text: the Styler's display text, and
    the table's placeholder where a value is missing (Streamlit's "None" when it has none)."""
    value, styler = element.value, element.proto.arrow_data.styler
    text = (dataframe_util.convert_arrow_bytes_to_pandas_df(styler.display_values) if styler.display_values
            else value.astype(str)).reset_index(drop=True)
    missing = value.reset_index(drop=True).isna()
    blank = element.proto.placeholder if element.proto.HasField("placeholder") else "None"
    return text.astype(object).where(~missing, blank)


def drawn_with(at: AppTest, *columns: str) -> pd.DataFrame:
    """`seen`: the first dataframe shown whose columns include `columns`, as the browser draws it."""
    for element in at.dataframe:
        if all(c in element.value.columns for c in columns):
            return seen(element)
    raise AssertionError(f"no dataframe with columns {columns}; have {[list(d.value.columns) for d in at.dataframe]}")


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def array(value) -> list:
    """A plotly array from a figure's JSON: a list, or plotly's typed-array encoding {dtype, bdata, shape}."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np

        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        if "shape" in value:
            out = out.reshape([int(n) for n in str(value["shape"]).split(",")])
        return out.tolist()
    return list(value)


def outlined(strip: dict) -> int:
    """How many token cells the strip outlines as recomputed (a marker trace or one shape per cell)."""
    markers = sum(len(array(t["x"])) for t in strip["data"] if t.get("name") == "recomputed")
    return markers + sum(1 for s in strip["layout"].get("shapes", []) if s.get("name") == "recomputed")


def unescape(markdown: str) -> str:
    """Text written with the app's `plain` (markdown characters backslash-escaped) as read."""
    return re.sub(r"\\(.)", r"\1", markdown)


def texts(at: AppTest) -> str:
    parts = [e.value for kind in ("warning", "info", "error", "success", "markdown", "caption")
             for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def stored(world, example_id: str, table: str) -> pd.DataFrame:
    return pd.read_parquet(load_sweep(world["runs"] / "tiny").diagnosis_folder(example_id) / f"{table}.parquet")


def positions_of(table: pd.DataFrame, selector: str) -> set[int]:
    return set(table.loc[table[selector], "position"].astype(int))


def at_budget(table: pd.DataFrame, budget: float) -> pd.DataFrame:
    return table[(table["budget"] - budget).abs() < 1e-9]


def finish_live(at: AppTest, timeout: float = 300) -> None:
    """Wait for the Live page's job (its own thread) to end, then draw the page again."""
    job = at.session_state["live_job"] if "live_job" in at.session_state else None
    if job is not None:
        job.thread.join(timeout)
        assert not job.active, f"the Live job is still {job.state}"
    at.run()
    ok(at)


def select(at: AppTest, element, selection: dict) -> AppTest:
    """What a click on a selectable chart or table sends (AppTest has no such interaction): the
    element's widget state set to {"selection": selection}, then the page run again."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    states = at._tree.get_widget_states()
    kept = [w for w in states.widgets if w.id != element.proto.id]
    del states.widgets[:]
    states.widgets.extend(kept)
    states.widgets.append(WidgetState(id=element.proto.id, string_value=json.dumps({"selection": selection})))
    at._run(states)
    ok(at)
    return at


def chart_with(at: AppTest, trace_name: str):
    """The first plotly chart element that has a trace named `trace_name`, and its figure."""
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        if any(t.get("name") == trace_name for t in spec["data"]):
            return element, spec
    raise AssertionError(f"no chart with a trace {trace_name!r}")


def chosen_marks(spec: dict) -> list[dict]:
    return [s for s in spec["layout"].get("shapes", []) if s.get("name") == "chosen token"]


def strip_of(at: AppTest) -> dict:
    """The token strip's figure (the chart whose clickable cells are the trace "tokens")."""
    return chart_with(at, "tokens")[1]
