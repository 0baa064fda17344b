"""Budget curves says what an EM gap is made of: on a record whose lost exact matches all ran on
(Gemma's niah_single at 2048), a warning under the header and the anatomy figure."""

from __future__ import annotations

import pytest

from apptest import ok, open_page

RECORD = "study-ruler-single-gemma3"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, restore_record):
    root = tmp_path_factory.mktemp("records") / "runs"
    restore_record(RECORD, root)
    return root


def test_budget_curves_warns_when_the_em_gap_is_how_answers_end(runs, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(runs))
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value(RECORD).run()
    ok(at)
    warnings = [w.value for w in at.warning if "lost exact matches" in w.value]
    assert len(warnings) == 1
    assert "79 name it and ran on past dense's answer" in warnings[0] and "0 lost the gold" in warnings[0]
    assert "What the lost exact matches are" in [h.value for h in at.subheader]
    assert at.select_slider(key="curves_anatomy_budget").value == 0.2
