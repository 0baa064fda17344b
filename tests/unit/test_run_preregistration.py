"""`kvwb run --preregistration FILE` copies the families beside the run before its first example,
checked against the run's selectors and budgets; one written after results is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sample.jsonl"
FAMILIES = {"measure": "retrieved", "families": {"A": {"A1": "cacheblend:random@auc", "A2": "full:none@0.5"}}}


@pytest.fixture(scope="module")
def model_folder(tiny_llama, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama.hf.save_pretrained(folder)
    tiny_llama.tokenizer.save_pretrained(folder)
    return str(folder)


def _argv(model_folder, out, pre, n=2) -> list:
    return ["run", "--model", model_folder, "--dataset", f"jsonl:{FIXTURE}", "--n", str(n), "--selectors",
            "none,full,random,cacheblend", "--budgets", "0.2,0.5", "--max-new-tokens", "2", "--out", str(out),
            *(["--preregistration", str(pre)] if pre is not None else [])]


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_the_file_lands_beside_the_manifest_byte_for_byte_and_a_resume_keeps_it(model_folder, tmp_path, capsys):
    pre = _write(tmp_path / "pre.json", FAMILIES)
    out = tmp_path / "run"
    assert run_cli(_argv(model_folder, out, pre)) == 0
    assert (out / "preregistration.json").read_bytes() == pre.read_bytes()
    assert run_cli(_argv(model_folder, out, pre)) == 0  # a resume with the same file
    capsys.readouterr()
    assert run_cli(["summary", str(out), "--preregistered"]) == 0
    assert "Family A (A1, A2)" in capsys.readouterr().out
    other = _write(tmp_path / "other.json", {**FAMILIES, "measure": "em"})
    assert run_cli(_argv(model_folder, out, other)) == 2
    assert "already holds another pre-registration" in capsys.readouterr().err
    assert (out / "preregistration.json").read_bytes() == pre.read_bytes()


def test_one_given_after_examples_ran_is_refused(model_folder, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(_argv(model_folder, out, None, n=1)) == 0
    capsys.readouterr()
    assert run_cli(_argv(model_folder, out, _write(tmp_path / "pre.json", FAMILIES), n=1)) == 2
    assert "already holds 1 example(s) and no pre-registration" in capsys.readouterr().err
    assert not (out / "preregistration.json").exists()


@pytest.mark.parametrize("families, message", [
    ({"A": {"A1": "cadence-grad:cacheblend@auc"}}, "names 'cadence-grad', which this run does not run"),
    ({"A": {"A1": "cacheblend:random@0.3"}}, "tests budget 0.3, off the run's grid (0.2, 0.5)"),
    ({"A": {"A1": "cacheblend:coin@0.2"}}, "the run has no coin:cacheblend"),
    ({}, "holds no families"),
])
def test_a_file_the_run_cannot_test_is_refused_before_the_model_loads(model_folder, tmp_path, capsys, monkeypatch,
                                                                     families, message):
    import workbench.cli.run as run

    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    out = tmp_path / "run"
    assert run_cli(_argv(model_folder, out, _write(tmp_path / "pre.json", {"families": families}))) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
