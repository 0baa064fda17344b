"""`kvwb answer`, `kvwb diagnose`, `kvwb run` and `kvwb summary` end to end on the embedded model."""

import json

import pytest

from workbench import cli

pytestmark = pytest.mark.slow


def test_kvwb_answer_prints_the_three_answers_with_timings(capsys, smol):
    assert cli.main(["answer", "--example", "synthetic#1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for label in ("dense", "spliced", "repaired (all reused rows)", "timings:", "layer-0 splice vs dense"):
        assert label in out


@pytest.fixture
def smol_loaded(smol, monkeypatch):
    """The session's embedded model stands in for the CLI's own load (the answer test loads it for real)."""
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: smol)
    return smol


def test_kvwb_diagnose_writes_a_diagnosis_run(smol_loaded, tmp_path, capsys, monkeypatch):
    from workbench.cli import diagnose as command

    # The command's own config, its attribution check on 8 patched tokens, not 64: the check's
    # 3 x 64 batched forwards were 5/6 of this test's time on two cores, and 8 show the same path.
    config = command.diagnose_config
    monkeypatch.setattr(command, "diagnose_config", lambda args: config(args).with_(patch_max_tokens=8))
    out = tmp_path / "d3"
    assert cli.main(["diagnose", "--example", "synthetic#3", "--selectors", "cacheblend,bcr:grow",
                     "--budgets", "0.2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cacheblend" in printed and "bcr:grow" in printed and f"wrote {out}" in printed
    assert "Spearman rho(first-order, actual dL) over 8 tokens" in printed  # the check ran, on the 8
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "diagnosis" and manifest["model"]["name"] == "smollm2-135m"


def test_kvwb_run_with_one_selector_then_summary(smol_loaded, tmp_path, capsys):
    out = tmp_path / "grad"
    assert cli.main(["run", "--selectors", "cadence-grad", "--n", "1", "--budgets", "0.2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cadence-grad" in printed and "no reference selector" in printed.lower()
    assert cli.main(["summary", str(out), "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("selector,")
