"""Budget curves says when a run scored its answers whole (`--no-stop-at-newline`), and only then."""

from __future__ import annotations

import pytest

from apptest import ok, open_page, unescape
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.sweep import SweepConfig, run_sweep


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("whole") / "runs"
    for name, rule in (("whole", False), ("first", True)):
        config = SweepConfig(dataset="synthetic", n=2, diagnose=DiagnoseConfig(
            selectors=("none", "full", "cacheblend"), budgets=(0.2, 0.5), max_new_tokens=3, attribution=False,
            stop_at_newline=rule))
        run_sweep(tiny_llama, config, root / name, progress=False)
    return root


@pytest.mark.parametrize("name, said", [("whole", True), ("first", False)])
def test_budget_curves_names_the_answer_rule_of_a_whole_answer_run(runs, monkeypatch, name, said):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value(name).run()
    ok(at)
    header = [m.value for m in at.markdown if m.value.startswith(f"{name}:")]
    assert len(header) == 1 and ("answers scored whole" in header[0]) is said
    section = "What the whole answers name beyond their first lines"
    assert (section in [h.value for h in at.subheader]) is said  # the first-line figure: a whole-answer run's only


def test_open_in_live_keeps_a_whole_answer_records_rule(runs, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from apptest import HOME, TIMEOUT
    from workbench.runstore import load_sweep

    monkeypatch.setenv("KVWB_RUNS", str(runs))
    example = load_sweep(runs / "whole").example_ids[0]
    at = AppTest.from_file(str(HOME), default_timeout=TIMEOUT)
    at.query_params.update(run="whole", example=example)
    at.run()
    at.switch_page("views/explorer.py").run()
    ok(at)
    at.button(key="explorer_to_live").click().run()
    ok(at)
    assert at.checkbox(key="live_whole").value is True


def test_an_unreadable_diagnosis_under_a_whole_answer_run_warns_and_the_page_stands(runs, monkeypatch, tmp_path):
    import shutil

    from workbench.runstore import load_sweep

    root = tmp_path / "runs"
    shutil.copytree(runs / "whole", root / "whole")
    broken = load_sweep(root / "whole").diagnosis_folder(load_sweep(root / "whole").example_ids[0])
    (broken / "diagnosis.json").write_text("{")
    monkeypatch.setenv("KVWB_RUNS", str(root))
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value("whole").run()
    ok(at)
    assert any("diagnosis.json is unreadable" in unescape(w.value) for w in at.warning)
    assert "Summary" in [h.value for h in at.subheader]  # the rest of the page


def test_budget_curves_warns_of_blank_answers_on_a_first_line_run_only(runs, monkeypatch):
    from workbench.experiments import blank_answers

    monkeypatch.setattr(blank_answers, "BLANK_SHARE", 0.0)  # every selector named, whatever its share
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    at = open_page("views/curves.py")
    for name, warned in (("first", True), ("whole", False)):
        at.selectbox(key="curves_run").set_value(name).run()
        ok(at)
        warnings = [unescape(w.value) for w in at.warning if "Blank answers" in unescape(w.value)]
        captions = [unescape(c.value) for c in at.caption if "Blank answers" in unescape(c.value)]
        assert (len(warnings), len(captions)) == ((1, 0) if warned else (0, 1))
        assert ("--no-stop-at-newline" in (warnings or captions)[0]) is warned


def test_budget_curves_names_the_cpus_of_a_run_computed_on_several(runs, monkeypatch, tmp_path):
    import json
    import shutil

    root = tmp_path / "runs"
    for name in ("first", "whole"):
        shutil.copytree(runs / name, root / name)
    manifest = json.loads((root / "first" / "manifest.json").read_text())
    (segment,) = manifest["segments"]
    other = {**segment, "environment": {**segment["environment"], "device": {"cpu": "Another CPU", "gpu": None}},
             "examples": segment["examples"][:1]}
    manifest["segments"] = [other, {**segment, "examples": segment["examples"][1:]}]
    (root / "first" / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("KVWB_RUNS", str(root))
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value("first").run()
    ok(at)
    said = [unescape(c.value) for c in at.caption if "Computed on" in unescape(c.value)]
    assert len(said) == 1 and "Another CPU (1 examples)" in said[0]
    at.selectbox(key="curves_run").set_value("whole").run()  # one CPU: nothing said
    assert not [c for c in at.caption if "Computed on" in unescape(c.value)]
