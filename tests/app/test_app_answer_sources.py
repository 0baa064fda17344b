"""Budget curves shows where the answers' words come from on a run whose examples define evidence:
the subheader, the budget slider at 0.2, the figure, and the example without evidence named as left out."""

from __future__ import annotations

from apptest import ok, open_page


def test_budget_curves_traces_the_answers_words(evidence_run, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(evidence_run.parent))
    at = open_page("views/curves.py")
    at.selectbox(key="curves_run").set_value(evidence_run.name).run()
    ok(at)
    assert "Where the answers' words come from" in [h.value for h in at.subheader]
    assert at.select_slider(key="curves_sources_budget").value == 0.2
    captions = [c.value for c in at.caption if "traced to the runs of answer words" in c.value]
    assert len(captions) == 1 and "1 example(s) define no evidence and are left out." in captions[0]
