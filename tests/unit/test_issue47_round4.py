"""Issue 47, round 4: outputs that wrote where they should not, refusals that came late, and
contrasts that were tested twice or in a half-checked form."""

import pytest

from workbench.errors import WorkbenchError
from workbench.runstore.manifest import new_manifest, write_manifest


def _run(folder, kind="sweep", model="m"):
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, new_manifest(kind, {"name": model}, {"dataset": "synthetic"}))
    return folder


def _no_model(*a, **k):
    raise AssertionError("the model was loaded before the output was checked")


# item 1: answerability --csv

@pytest.mark.parametrize("where", ["manifest.json", "diagnoses/x.csv", "x.csv"])
def test_answerability_csv_inside_a_run_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys, where):
    from workbench.cli import main

    run = _run(tmp_path / "run")
    before = (run / "manifest.json").read_bytes()
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    assert main(["answerability", "--n", "1", "--csv", str(run / where), "--force"]) == 2
    assert "inside the sweep run" in capsys.readouterr().err
    assert (run / "manifest.json").read_bytes() == before and not (run / "x.csv").exists()


def test_answerability_csv_replaces_an_existing_file_only_with_force(tmp_path, monkeypatch, capsys):
    from workbench.cli import main

    mine = tmp_path / "mine.csv"
    mine.write_text("keep me")
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    assert main(["answerability", "--n", "1", "--csv", str(mine)]) == 2
    assert "pass --force" in capsys.readouterr().err and mine.read_text() == "keep me"
    with pytest.raises(AssertionError, match="was loaded"):  # with --force the check passes; the model is next
        main(["answerability", "--n", "1", "--csv", str(mine), "--force"])


# item 4: a lock that is a symlink

def test_a_lock_that_is_a_symlink_is_refused_and_its_target_left_whole(tmp_path):
    from workbench.runstore import run_lock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(victim)
    with pytest.raises(WorkbenchError, match="symbolic link"):
        with run_lock(tmp_path / "run"):
            pass
    assert victim.read_text() == "precious"


# items 10-12 of the issue: contrasts

@pytest.mark.parametrize("text, why", [
    ("coin:bcr:bcr@0.2", "drawn control coin:bcr first"),
    ("coin:bcr:grow:bcr@0.2", "drawn control coin:bcr:grow first"),  # another unit's coin, written in reverse
    ("random:bcr@0.2", "drawn control random first"),
    ("bcr:bcr@0.2", "with itself"),
    ("bcr:bcr:chunk@0.2", "with itself"),  # two spellings of one selector
])
def test_a_contrast_whose_control_comes_first_or_that_compares_a_selector_with_itself_is_refused(text, why):
    from workbench.experiments.contrasts import parse_contrast

    with pytest.raises(WorkbenchError, match=why):
        parse_contrast(text)


def test_a_control_of_another_unit_is_refused_whichever_way_the_pair_is_written():
    from test_gap_auc import make_run

    from workbench.experiments.contrasts import contrast_family

    run = make_run()
    for text in ("bcr:random@0.2", "random:bcr@0.2"):
        with pytest.raises(WorkbenchError, match="units|first"):
            contrast_family(run, [text])


@pytest.mark.parametrize("family", [["cadence:cacheblend@0.2", "cadence:cacheblend@0.2"],
                                    ["cadence:cacheblend@0.2", "cadence:cacheblend@.20"],
                                    ["cadence:cacheblend@0.2", "cacheblend:cadence@0.2"],
                                    ["cadence:coin@auc", "cadence:coin:cadence@AUC"]])
def test_a_contrast_given_twice_in_any_spelling_is_refused_not_counted_twice_in_holm(family):
    from test_gap_auc import make_run

    from workbench.experiments.contrasts import contrast_family

    with pytest.raises(WorkbenchError, match="same test"):
        contrast_family(make_run(), family)


def test_csv_summary_keeps_stdout_one_csv_table_and_puts_the_contrasts_on_stderr(tmp_path, capsys):
    import io

    import pandas as pd
    from test_gap_auc import make_run, write_folder

    from workbench import cli

    folder = write_folder(make_run(), tmp_path / "run")
    assert cli.main(["summary", str(folder), "--format", "csv", "--contrast", "cadence:cacheblend@0.2"]) == 0
    captured = capsys.readouterr()
    table = pd.read_csv(io.StringIO(captured.out))
    assert "selector" in table and "|" not in captured.out
    assert "| cadence vs cacheblend |" in captured.err


def test_a_graded_contrast_on_one_example_is_refused_in_one_line(tmp_path, capsys):
    import numpy as np
    from test_gap_auc import make_run

    from workbench.experiments.contrasts import contrast_family
    from workbench.runstore import SweepRun

    run = make_run()
    keep = run.outcomes["example_id"] == "e0"
    outcomes = run.outcomes[keep].assign(f1=np.random.default_rng(0).random(int(keep.sum())) * 0.37)
    one = SweepRun(run.folder, run.manifest, run.examples[run.examples["example_id"] == "e0"], outcomes)
    for text in ("cadence:cacheblend@0.2", "cadence:random@0.2", "cadence:cacheblend@auc"):
        with pytest.raises(WorkbenchError, match="at least two examples"):
            contrast_family(one, [text], "f1")
