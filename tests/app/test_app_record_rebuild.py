"""A kept record's example rebuilt in the explorer (issue 45 item 1): the record keeps only its
outcomes; the button diagnoses the example again on its model under the record's config, writes it
where the regenerate command writes, and every view is then drawn from it under one line on how
it agrees with the record. The library half (`rebuild`, `compare_outcomes`) is tested here too: a
rebuild on the same code reproduces the run's tables, and a changed decision is named."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from apptest import ok, open_page, texts, unescape
from small_runs import SAMPLE, config, save_model
from workbench.diagnosis import Diagnosis
from workbench.diagnosis.rebuild import compare_outcomes, rebuild
from workbench.errors import WorkbenchError
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.models import load_model

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-study"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny sweep (loaded from a folder, so the record names its model by path), kept by
    docs/records/keep.py and restored into runs/ as a record: outcomes only."""
    if str(ROOT / "docs" / "records") not in sys.path:
        sys.path.insert(0, str(ROOT / "docs" / "records"))
    import keep  # docs/records is no package

    base = tmp_path_factory.mktemp("rebuild")
    _, folder = save_model(base)
    model = load_model(str(folder))
    run_sweep(model, SweepConfig(dataset=f"jsonl:{SAMPLE}", n=2, diagnose=config()), base / "work" / NAME,
              progress=False)
    keep.save(base / "work" / NAME, records=base / "records")
    keep.restore(NAME, records=base / "records", runs=base / "runs")
    return {"model": model, "folder": folder, "work": base / "work" / NAME, "runs": base / "runs"}


@pytest.fixture(autouse=True)
def _env(world, monkeypatch):
    monkeypatch.setenv("KVWB_RUNS", str(world["runs"]))
    monkeypatch.setenv("KVWB_MODEL", str(world["folder"]))
    monkeypatch.delenv("KVWB_PLUGINS", raising=False)


def _record(world, example: str = "q1") -> Diagnosis:
    return Diagnosis.load(world["runs"] / NAME / "diagnoses" / example)


def test_a_rebuild_on_the_same_code_reproduces_the_runs_tables(world, tmp_path):
    record, original = _record(world), Diagnosis.load(world["work"] / "diagnoses" / "q1")
    assert "selections" not in record.tables  # a record: outcomes only
    rebuilt = Diagnosis.load(rebuild(world["model"], record).save(tmp_path / "q1"))  # read back as the run's were
    for name in ("tokens", "selections", "token_signals"):
        pd.testing.assert_frame_equal(rebuilt.tables[name], original.tables[name], check_exact=True)
    agreement = compare_outcomes(record, rebuilt)
    assert agreement.same and agreement.scores_within and agreement.rows == len(record.outcomes)
    assert agreement.score_gap == 0.0
    assert str(agreement).startswith(f"answers and flips equal on {len(record.outcomes)} of {len(record.outcomes)}")


def test_a_changed_decision_or_a_score_past_the_tolerance_is_named(world):
    record = _record(world)
    outcomes = record.outcomes.copy()
    at = outcomes.index[outcomes["selector"] == "random"][0]
    outcomes.loc[at, "answer"] = outcomes.loc[at, "answer"] + " (changed)"
    changed = replace(record, tables={**record.tables, "outcomes": outcomes})
    agreement = compare_outcomes(record, changed)
    assert not agreement.same
    assert agreement.differing[["selector", "column"]].values.tolist() == [["random", "answer"]]
    assert f"equal on {len(outcomes) - 1} of {len(outcomes)}" in str(agreement)
    shifted = record.outcomes.copy()
    shifted["dense_logprob"] += 2e-4
    drifted = compare_outcomes(record, replace(record, tables={**record.tables, "outcomes": shifted}))
    assert drifted.same and drifted.score_gap == pytest.approx(2e-4) and not drifted.scores_within
    assert str(drifted).endswith("differ by at most 2.0e-04 nats (above 1e-04)")


def test_a_hooked_record_is_refused_in_one_line(world):
    hooked = replace(_record(world), hooks={"blocks.0.attn.hook_z": ["m.ablate"]})
    with pytest.raises(WorkbenchError, match="diagnosed with hooks"):
        rebuild(world["model"], hooked)


def _explorer(example: str):
    at = open_page("views/explorer.py")
    at.selectbox(key="explorer_run").set_value(NAME).run()
    at.selectbox(key="explorer_example").set_value(example).run()
    ok(at)
    return at


def test_the_explorer_rebuilds_a_records_example_and_draws_it(world):
    at = _explorer("q2")
    assert any("A kept record keeps only" in i.value for i in at.info)
    assert not at.get("plotly_chart")  # nothing drawn from tables a record lacks
    at.button(key="explorer_rebuild").click().run()
    ok(at)
    folder = world["runs"] / f"{NAME}-q2"
    assert (folder / "diagnosis.json").is_file() and (folder / "selections.parquet").is_file()
    said = unescape(texts(at))
    n = len(_record(world, "q2").outcomes)
    assert f"Drawn from a rebuild of this example ({folder}" in said
    assert f"answers and flips equal on {n} of {n} outcome rows" in said
    assert [s for s in at.success if "Drawn from a rebuild" in s.value]
    assert at.get("plotly_chart")  # the strip, picks and heatmaps, from the rebuild
    assert not any("A kept record keeps only" in i.value for i in at.info)
    tokens = Diagnosis.load(folder).tokens
    position = int(tokens[tokens["reused"]]["position"].iloc[5])
    at.selectbox(key="explorer_token").set_value(position).run()  # as a click in the strip sets it
    ok(at)
    assert at.query_params["token"] == str(position)
    assert f"Token at position {position}" in unescape(texts(at))  # its card, from the rebuild's signals


def test_the_regenerate_command_writes_the_folder_the_explorer_draws_from(world):
    """The command the page shows, run as given, rebuilds under the record's own config (the record was
    made without the attribution check; `kvwb diagnose` ran it by default and the explorer refused the
    folder as "diagnosed under another config")."""
    import re
    import shlex
    import shutil

    from workbench.cli.main import main as kvwb

    at = _explorer("q1")
    [shown] = [i.value for i in at.info if "A kept record keeps only" in i.value]
    argv = shlex.split(re.search(r"`(kvwb diagnose [^`]*)`", shown).group(1))
    assert "--no-attribution" in argv
    folder = world["runs"] / f"{NAME}-q1"
    try:
        assert kvwb(argv[1:]) == 0
        assert Diagnosis.load(folder).config.to_dict() == _record(world, "q1").config.to_dict()
        at = _explorer("q1")
        said = unescape(texts(at))
        assert f"Drawn from a rebuild of this example ({folder}" in said and "another config" not in said
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_record_config_the_command_cannot_say_is_left_to_the_button(world):
    """draft_k has no `kvwb diagnose` option: a command without it would rebuild under another config."""
    import json

    kept = world["runs"] / NAME / "diagnoses" / "q2" / "diagnosis.json"
    text = kept.read_text()
    try:
        doc = json.loads(text)
        doc["config"]["draft_k"] = doc["config"]["draft_k"] + 1
        kept.write_text(json.dumps(doc))
        [shown] = [i.value for i in _explorer("q2").info if "A kept record keeps only" in i.value]
        assert "kvwb diagnose` has no option for every setting" in shown and "`kvwb diagnose --" not in shown
    finally:
        kept.write_text(text)


def test_a_record_scored_on_whole_answers_is_rebuilt_by_a_command_that_says_so(world):
    """A record made with --no-stop-at-newline: the shown command carries the flag, and it parses to the
    record's own config (without it, the rebuild would score first lines)."""
    import json
    import re
    import shlex

    from workbench.cli.diagnose import diagnose_config
    from workbench.cli.main import build_parser

    kept = world["runs"] / NAME / "diagnoses" / "q2" / "diagnosis.json"
    text = kept.read_text()
    try:
        doc = json.loads(text)
        doc["config"]["stop_at_newline"] = False
        kept.write_text(json.dumps(doc))
        [shown] = [i.value for i in _explorer("q2").info if "A kept record keeps only" in i.value]
        argv = shlex.split(re.search(r"`(kvwb diagnose [^`]*)`", shown).group(1))
        assert "--no-stop-at-newline" in argv
        assert diagnose_config(build_parser().parse_args(argv[1:])).to_dict() == doc["config"]
    finally:
        kept.write_text(text)


def test_a_rebuild_that_disagrees_with_the_record_says_so(world, tmp_path):
    record_outcomes = world["runs"] / NAME / "diagnoses" / "q1" / "outcomes.parquet"
    kept = record_outcomes.read_bytes()
    try:
        at = _explorer("q1")
        at.button(key="explorer_rebuild").click().run()
        ok(at)
        outcomes = pd.read_parquet(record_outcomes)  # the record now says another answer for one cell
        outcomes.loc[outcomes["selector"] == "full", "flip"] = ~outcomes.loc[outcomes["selector"] == "full", "flip"]
        outcomes.to_parquet(record_outcomes)
        at = _explorer("q1")
        warned = [w.value for w in at.warning if "Drawn from a rebuild" in w.value]
        n, changed = len(outcomes), int((outcomes["selector"] == "full").sum())
        assert warned and f"answers and flips equal on {n - changed} of {n} outcome rows" in unescape(warned[0])
        assert "The record's outcomes are the evidence" in warned[0]
    finally:
        record_outcomes.write_bytes(kept)
