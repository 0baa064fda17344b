"""The explorer's attention by head and logit lens (issue 45, items 6 and 7): nothing runs before
the button; after it, both figures and where the answer looks while it is written (the cell's own
answer, then dense's), on a run with its tables and on one kept as a record (outcomes only: the
repaired cell's rows are chosen again)."""

from __future__ import annotations

import shutil

import pytest

from apptest import charts, ok, open_page
from small_runs import config, save_model
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.models import load_model

KEPT = {"diagnosis.json", "outcomes.parquet"}  # what docs/records/keep.py keeps of an example


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A one-example synthetic sweep on the tiny model (loaded from its folder, so the app loads it by
    the name the run records) and a copy of it stripped as keep.py keeps a record."""
    base = tmp_path_factory.mktemp("heads")
    _, folder = save_model(base)
    root = base / "runs"
    run_sweep(load_model(str(folder)), SweepConfig(dataset="synthetic", n=1, diagnose=config(budgets=(0.2,))),
              root / "synth", progress=False)
    shutil.copytree(root / "synth", root / "kept")
    for path in (root / "kept" / "diagnoses").rglob("*"):
        if path.is_file() and path.name not in KEPT:
            path.unlink()
    return root


@pytest.fixture(autouse=True)
def _env(runs, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def titles(at) -> list[str]:
    return [str(c.get("layout", {}).get("title", {}).get("text", "")) for c in charts(at)]


@pytest.mark.parametrize("run", ["synth", "kept"])
def test_the_explorer_shows_attention_by_head_and_the_logit_lens_on_demand(run):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value(run).run()
    ok(at)
    assert not any("attends to" in t or "Logit lens" in t for t in titles(at))  # nothing ran before the button
    at.selectbox(key="explorer_hl_cell").set_value("densedev").run()
    at.button(key="explorer_hl_go").click().run()
    ok(at)
    shown = titles(at)
    heads = [c for c in charts(at) if "attends to" in str(c["layout"]["title"]["text"])]
    lens = [c for c in charts(at) if "Logit lens" in str(c["layout"]["title"]["text"])]
    assert len(heads) == 1 and len(lens) == 1, shown
    assert [t["name"] for t in heads[0]["data"] if t["type"] == "heatmap"] == ["dense", "splice", "repaired cell"]
    assert [t["name"] for t in lens[0]["data"]] == ["dense", "splice", "repaired cell"]
    top = [d.value for d in at.dataframe if "dense" in d.value.columns and "splice" in d.value.columns]
    assert top and len(top[-1]) == 5  # the lens's top 5 tokens under each cache
    at.select_slider(key="explorer_hl_layer").set_value(0).run()  # another layer: cached, no button again
    ok(at)
    assert any("at layer 0" in t for t in titles(at))
    looks = [c for c in charts(at) if "Where the answer looks" in str(c["layout"]["title"]["text"])]
    assert len(looks) == 1 and at.radio(key="explorer_looks_whose").value == "own"  # the cell's own answer
    assert {t["name"] for t in looks[0]["data"]} >= {"the prompt", "the answer so far"}
    at.radio(key="explorer_looks_whose").set_value("dense").run()
    at.slider(key="explorer_looks_layers").set_value((1, 1)).run()
    ok(at)
    assert any("looks while it is written, layer 1 " in t for t in titles(at))


def test_a_token_chosen_in_the_strip_is_the_query():
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value("synth").run()
    token = at.selectbox(key="explorer_token")  # options shown as "pos 93: 'x'"
    chosen = int(token.options[-1].split(":")[0].removeprefix("pos "))  # a reused row of the last passage
    token.set_value(chosen).run()
    assert at.session_state["explorer_token"] == chosen
    at.radio(key="explorer_hl_query").set_value("chosen").run()
    at.button(key="explorer_hl_go").click().run()
    ok(at)
    heads = [c for c in charts(at) if "attends to" in str(c["layout"]["title"]["text"])]
    assert len(heads) == 1 and f"What token {chosen} " in heads[0]["layout"]["title"]["text"]
    notes = [i.value for i in at.info if "reused here" in i.value]  # the splice reused it: its sender's pass is not rerun
    assert any(n.startswith("splice:") for n in notes)
