"""The kvwb command line: help for every option, one-line errors for bad input (one table that
grows with every command), nothing written and no model loaded before an error, and the
commands that run on a tiny model."""

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_cli, tiny_model
from workbench import cli
from workbench.cli.common import printable


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its content (None for a folder)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


# ----------------------------------------------------------------------------- help


def test_every_subcommand_has_help(capsys):
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    commands = {"prepare", "answer", "diagnose", "run", "summary", "curve", "fidelity", "pipeline", "report", "bench",
                "answerability", "results"}
    assert set(subcommands) == commands
    for name in subcommands:
        with pytest.raises(SystemExit) as stop:
            cli.main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert "usage: kvwb " + name in out
        for action in subcommands[name]._actions:
            assert action.help, f"kvwb {name}: option {action.dest} has no help"


def test_console_script_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "answer" in out.stdout


# ----------------------------------------------------------------------------- bad input: one table

def _file(tmp):
    (tmp / "afile").write_text("not a folder")


def _users_folder(tmp):
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("a user's file")


def _plain_folder(tmp):
    (tmp / "plain").mkdir()
    (tmp / "plain" / "data.csv").write_text("a,b\n")


def _list_manifest(tmp):
    (tmp / "listrun").mkdir()
    (tmp / "listrun" / "manifest.json").write_text("[1, 2, 3]")


def _sweep_dir(tmp):
    (tmp / "run").mkdir()


def _extension(tmp):
    """A browser extension's folder: a manifest.json the workbench did not write, beside a user's file."""
    (tmp / "ext").mkdir()
    (tmp / "ext" / "manifest.json").write_text('{"manifest_version": 3}')
    (tmp / "ext" / "thesis.tex").write_text("years of work")


def _a_sweep(tmp):
    """A sweep's folder `s` (its manifest as the workbench writes one) with one example, m0."""
    from workbench.runstore import new_manifest, write_manifest

    (tmp / "s" / "diagnoses" / "m0").mkdir(parents=True)
    write_manifest(tmp / "s", new_manifest("sweep", None, {}))
    (tmp / "s" / "diagnoses" / "m0" / "diagnosis.json").write_text('{"schema_version": 2, "example": {"id": "m0"}}')


S = ["--selectors", "none,full,cacheblend", "--budgets", "0.2"]  # the issue's $S
HUGE = str(2 ** 70)


# (argv with {tmp} for the test's folder, what the one-line message says, setup, environment)
BAD_INPUT = {
    "unknown selector": (["run", "--selectors", "cadence-grad,nosuch", "--n", "1", "--out", "{tmp}/r"],
                         "unknown selector 'nosuch'", None, {}),
    "selector with an unknown unit": (["diagnose", "--selectors", "bcr:blob"], "cannot use unit 'blob'", None, {}),
    "budget 1.5": (["diagnose", "--budgets", "0.2,1.5", "--out", "{tmp}/d"], "budget must be a fraction in [0, 1]",
                   None, {}),
    "budgets not numbers": (["run", "--budgets", "0.1,lots", "--out", "{tmp}/r"], "comma-separated numbers", None, {}),
    "bench --repeats 0": (["bench", "repair", "--repeats", "0"], "--repeats: must be an integer >= 1", None, {}),
    "bench --lengths too short": (["bench", "saliency", "--lengths", "4"], "at least 32 tokens", None, {}),
    "run --out at a file": (["run", "--n", "1", "--out", "{tmp}/afile"], "is a file, not a folder", _file, {}),
    "run --out under a file": (["run", "--n", "1", "--out", "{tmp}/afile/run"], "is a file, not a folder", _file, {}),
    "run --reference not among the selectors": (["run", "--selectors", "random", "--reference", "cacheblend",
                                                 "--out", "{tmp}/r"], "is not among the selectors", None, {}),
    "run on an unknown data set": (["run", "--dataset", "nosuch:x", "--out", "{tmp}/r"], "unknown data set kind",
                                   None, {}),
    "run on a missing file": (["run", "--dataset", "jsonl:{tmp}/missing.jsonl", "--out", "{tmp}/r"], "missing.jsonl",
                              None, {}),
    "run without --out": (["run", "--n", "1"], "the following arguments are required: --out", None, {}),
    "summary of a non-run folder": (["summary", "{tmp}/plain"], "is not a run folder", _plain_folder, {}),
    "summary of a missing folder": (["summary", "{tmp}/nothing"], "is not a run folder", None, {}),
    "summary --html at a file": (["summary", "{tmp}/run", "--html", "{tmp}/afile"], "is a file, not a folder",
                                 lambda t: (_file(t), _sweep_dir(t)), {}),
    "summary --html at a user's folder": (["summary", "{tmp}/run", "--html", "{tmp}/mine"],
                                          "did not write", lambda t: (_users_folder(t), _sweep_dir(t)), {}),
    "summary --target-share 2": (["summary", "{tmp}/run", "--target-share", "2"], "must be a fraction", None, {}),
    "a manifest that is not a JSON object": (["summary", "{tmp}/listrun"], "is not a JSON object", _list_manifest, {}),
    "report without --example or --all": (["report", "{tmp}/run", "--out", "{tmp}/r.html"], "give --example ID",
                                          _sweep_dir, {}),
    "report with both --example and --all": (["report", "{tmp}/run", "--example", "1", "--all", "--out", "{tmp}/o"],
                                             "not allowed with", _sweep_dir, {}),
    "report of a missing folder": (["report", "{tmp}/nothing", "--all", "--out", "{tmp}/o"], "is not a folder",
                                   None, {}),
    "diagnose --out --force at a user's folder": (["diagnose", "--out", "{tmp}/mine", "--force"], "did not write",
                                                  _users_folder, {}),
    "diagnose --out under a file": (["diagnose", "--out", "{tmp}/afile/d"], "is a file, not a folder", _file, {}),
    "report --all --force at a user's folder": (["report", "{tmp}/run", "--all", "--out", "{tmp}/mine", "--force"],
                                                "did not write", lambda t: (_users_folder(t), _sweep_dir(t)), {}),
    "run --gpus-per-worker -1": (["run", "--executor", "ray", "--gpus-per-worker", "-1", "--n", "1", "--out",
                                  "{tmp}/r"], "--gpus-per-worker must be >= 0", None, {}),
    "run --executor spark": (["run", "--executor", "spark", "--out", "{tmp}/r"], "invalid choice: 'spark'", None, {}),
    "diagnose on an unknown example": (["diagnose", "--example", "synthetic#x"], "unknown synthetic example id",
                                       None, {}),
    "curve with one prompt": (["curve", "--prompts", "1", "--out", "{tmp}/c"], "prompts must be an integer >= 2",
                              None, {}),
    "curve --out at a file": (["curve", "--tokens", "64", "--prompts", "2", "--out", "{tmp}/afile"],
                              "is a file, not a folder", _file, {}),
    "fidelity with a bad cosine": (["fidelity", "--cosines", "0.5,1.5", "--out", "{tmp}/f"],
                                   "a cosine target must lie in (0, 1]", None, {}),
    "fidelity --threads 0": (["fidelity", "--threads", "0", "--out", "{tmp}/f"], "must be an integer >= 1", None, {}),
    "--device tpu": (["answer", "--device", "tpu"], "unknown device 'tpu'", None, {}),
    "--device meta": (["diagnose", "--device", "meta", "--out", "{tmp}/d"], "'meta' cannot run the workbench",
                      None, {}),
    "--dtype fp8": (["answer", "--dtype", "fp8"], "unknown dtype 'fp8'", None, {}),
    "a bad KVWB_CACHE": (["answer"], "KVWB_CACHE=", _file, {"KVWB_CACHE": "{tmp}/afile/cache"}),
    "prepare with a bad KVWB_CACHE": (["prepare"], "KVWB_CACHE=", _file, {"KVWB_CACHE": "{tmp}/afile/cache"}),
    "prepare --model foo": (["prepare", "--model", "foo"], "unknown embedded model 'foo'", None, {}),
    "a model that is no folder": (["answer", "--model", "{tmp}/nomodel"], "nomodel", None, {}),
    "answer --max-new-tokens 0": (["answer", "--max-new-tokens", "0"], "must be an integer >= 1", None, {}),
    "run --pool of an unknown kind": (["run", "--pool", "some", "--out", "{tmp}/r"], "invalid choice: 'some'",
                                      None, {}),
    "run --grow-max-span -1": (["run", "--grow-max-span", "-1", "--out", "{tmp}/r"], "argument --grow-max-span: must be an integer >= 0",
                               None, {}),
    "pipeline with six agents": (["pipeline", "--agents", "6", "--out", "{tmp}/p"], "1 to 5 agents", None, {}),
    "pipeline with an unknown method": (["pipeline", "--methods", "kvcomm,telepathy", "--out", "{tmp}/p"],
                                        "unknown reuse method 'telepathy'", None, {}),
    "prepare gemma3 with a bad KVWB_CACHE": (["prepare", "gemma3-270m"], "KVWB_CACHE=", _file,
                                             {"KVWB_CACHE": "{tmp}/afile/cache"}),
    "summary --contrast without a budget": (["summary", "{tmp}/run", "--contrast", "cadence:random"],
                                            "A:B@BUDGET", _sweep_dir, {}),
    "summary --contrast of unknown selectors": (["summary", "{tmp}/run", "--contrast", "a:b@0.2"],
                                                "unknown selector 'a'", _sweep_dir, {}),
    # issue 29: nothing lost, nothing mixed, nothing stuck
    "29.1 diagnose --force over a browser extension": (["diagnose", "--example", "synthetic#1", *S, "--out",
                                                        "{tmp}/ext", "--force"],
                                                       "ext/manifest.json, which the workbench did not write",
                                                       _extension, {}),
    "29.1 curve --force over a browser extension": (["curve", "--tokens", "256", "--prompts", "2", "--units", "16",
                                                     "--seeds", "1", "--out", "{tmp}/ext", "--force"],
                                                    "ext/manifest.json, which the workbench did not write",
                                                    _extension, {}),
    "29.2 diagnose --force over a sweep": (["diagnose", "--example", "synthetic#1", *S, "--out", "{tmp}/s",
                                            "--force"], "holds a 'sweep' run, not a 'diagnosis' run", _a_sweep, {}),
    "29.2 curve --force over a sweep": (["curve", "--tokens", "256", "--prompts", "2", "--out", "{tmp}/s", "--force"],
                                        "holds a 'sweep' run, not a 'curve' run", _a_sweep, {}),
    "29.2 fidelity --force over a sweep": (["fidelity", "--n", "2", "--out", "{tmp}/s", "--force"],
                                           "holds a 'sweep' run, not a 'fidelity' run", _a_sweep, {}),
    "29.2 pipeline into a sweep": (["pipeline", "--agents", "2", "--n", "1", "--out", "{tmp}/s"],
                                   "holds a 'sweep' run, not a 'pipeline' run", _a_sweep, {}),
    "29.4 run into another run's example folder": (["run", "--n", "1", *S, "--out", "{tmp}/s/diagnoses/m0"],
                                                   "is inside the sweep run", _a_sweep, {}),
    "29.4 report into another run's folder": (["report", "{tmp}/s", "--example", "m0", "--out", "{tmp}/s/m0.json"],
                                              "is inside the sweep run", _a_sweep, {}),
    "29.7 run --coin-draws 1000000000": (["run", "--coin-draws", "1000000000", "--n", "1", "--out", "{tmp}/r"],
                                         "coin_draws must be at most 100", None, {}),
    "29.9 KVWB_THREADS=100000": (["summary", "{tmp}/nothing"], "KVWB_THREADS='100000' must be a whole number of "
                                 "threads from 1 to", None, {"KVWB_THREADS": "100000"}),
    "29.10 KVWB_THREADS=abc": (["answer"], "KVWB_THREADS='abc' must be a whole number", None, {"KVWB_THREADS": "abc"}),
    "29.10 KVWB_THREADS=-2": (["answer"], "KVWB_THREADS='-2' must be a whole number", None, {"KVWB_THREADS": "-2"}),
    "29.11 diagnose --seed 2**70": (["diagnose", "--seed", HUGE, *S], "seed must be an integer from 0 to 4294967295",
                                    None, {}),
    "29.11 run --seed 2**70": (["run", "--seed", HUGE, "--n", "1", *S, "--out", "{tmp}/r"],
                               "seed must be an integer from 0 to 4294967295", None, {}),
    "29.11 curve --seed 2**70": (["curve", "--tokens", "64", "--prompts", "2", "--seed", HUGE, "--out", "{tmp}/c"],
                                 "seed must be an integer from 0 to 4294967295", None, {}),
    "29.11 fidelity --seed 2**70": (["fidelity", "--n", "2", "--seed", HUGE, "--out", "{tmp}/f"],
                                    "seed must be an integer from 0 to 4294967295", None, {}),
    "29.11 pipeline --seed 2**70": (["pipeline", "--agents", "2", "--n", "1", "--seed", HUGE, "--out", "{tmp}/p"],
                                    "seed must be an integer from 0 to 4294967295", None, {}),
    "29.12 run --gpus-per-worker nan": (["run", "--executor", "ray", "--gpus-per-worker", "nan", "--n", "1", "--out",
                                         "{tmp}/r"], "--gpus-per-worker: must be a finite number", None, {}),
    "29.12 curve --budget inf": (["curve", "--budget", "inf", "--out", "{tmp}/c"], "--budget: must be a finite number",
                                 None, {}),
    "29.12 diagnose --budgets nan": (["diagnose", "--budgets", "0.2,nan"], "--budgets: must be a finite number",
                                     None, {}),
    "29 bench executors --workers 0": (["bench", "executors", "--workers", "0", "--examples", "1"],
                                       "worker counts (--workers) must be integers >= 1", None, {}),
    "29 run --target-words 10000000": (["run", "--target-words", "10000000", "--n", "1", "--out", "{tmp}/r"],
                                       "target_words must be None or an integer from 1 to 1,000,000", None, {}),
}


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_before_any_work_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    argv, message, setup, env = BAD_INPUT[case]
    if setup:
        setup(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    monkeypatch.setattr("workbench.models._load_folder", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr("workbench.models._convert_gguf", lambda *a, **k: pytest.fail("the model was converted"))
    before = tree(tmp_path)

    code = run_cli([a.format(tmp=tmp_path) for a in argv])

    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("kvwb"), err
    assert message in err, err
    assert out == ""
    assert tree(tmp_path) == before, "something was written"


def test_a_file_system_error_is_one_line(tmp_path, monkeypatch, capsys):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "examples.parquet"))

    monkeypatch.setattr("workbench.runstore.load_sweep", denied)
    assert run_cli(["summary", tmp_path]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvwb: error: ") and len(err.strip().splitlines()) == 1
    assert "examples.parquet: Permission denied" in err


# ----------------------------------------------------------------------------- printing data


def test_printable_escapes_control_characters_on_a_terminal_only():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    text = "red \x1b[31mX\x1b[0m\rover\u202eevil\nnext\tcol"
    shown = printable(text, stream=Terminal())
    assert shown == "red \\x1b[31mX\\x1b[0m\\rover\\u202eevil\\nnext\\tcol"
    assert printable(text, keep_newlines=True, stream=Terminal()).count("\n") == 1
    assert printable(text, stream=io.StringIO()) == text  # a pipe or file gets the data as it is
    assert printable("Tressamor é 東京", stream=Terminal()) == "Tressamor é 東京"


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("llama")


@pytest.fixture
def tiny_loaded(tiny, monkeypatch):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: tiny)
    return tiny


def test_answer_shows_ansi_escapes_in_data_as_text_on_a_terminal(tiny_loaded, tmp_path, monkeypatch, capsys):
    data = tmp_path / "evil.jsonl"
    data.write_text(json.dumps({"id": "e\x1b[2J1", "passages": ["Mira was born in \x1b[31mTressamor\x1b[0m."],
                                "question": "Where was Mira born?\r", "answers": ["Tressamor"]}) + "\n")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert run_cli(["answer", "--example", f"jsonl:{data}#e\x1b[2J1", "--max-new-tokens", "2"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert "\\x1b[31mTressamor" in out and "Where was Mira born?\\r" in out and "e\\x1b[2J1" in out
    for label in ("dense", "spliced", "repaired (all reused rows)", "timings:"):
        assert label in out


# ----------------------------------------------------------------------------- commands on a tiny model


@pytest.fixture(scope="module")
def one_selector_run(tiny, tmp_path_factory):
    """`kvwb run --selectors cadence-grad --n 1 --out DIR`, nothing more (issue 10)."""
    out = tmp_path_factory.mktemp("cli") / "grad"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("workbench.models.load_model", lambda *a, **k: tiny)
        capture = io.StringIO()
        mp.setattr(sys, "stdout", capture)
        code = run_cli(["run", "--selectors", "cadence-grad", "--n", "1", "--out", out])
    return out, code, capture.getvalue()


def test_run_with_one_selector_needs_no_other_flag(one_selector_run):
    out, code, printed = one_selector_run
    assert code == 0, printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "sweep" and manifest["status"] == "complete"
    assert manifest["args"]["diagnose"]["selectors"] == ["cadence-grad"]
    assert "no reference selector" in printed.lower()


def test_summary_of_a_run_and_its_html_figures(one_selector_run, tmp_path, capsys):
    out, _, _ = one_selector_run
    assert run_cli(["summary", out, "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("selector,")
    html = tmp_path / "html"
    assert run_cli(["summary", out, "--html", html]) == 0
    assert "no reference selector" in capsys.readouterr().out.lower()
    written = {p.name for p in html.iterdir()}
    assert {"accuracy.html", "gap.html", "flips.html", "rows.html", "index.html", "manifest.json"} <= written
    assert run_cli(["summary", out, "--html", html]) == 0  # figures an earlier --html wrote are refreshed
    assert run_cli(["summary", out, "--html", out]) == 2  # never into the run itself
    assert "not figures of `kvwb summary --html`" in capsys.readouterr().err
    assert (out / "manifest.json").is_file() and json.loads((out / "manifest.json").read_text())["kind"] == "sweep"


def test_summary_runs_a_pre_registered_contrast(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: tiny)
    out = tmp_path / "pair"
    assert run_cli(["run", "--selectors", "cadence-grad,random,none", "--budgets", "0.3", "--n", "2", "--coin-draws", "3",
                    "--max-new-tokens", "4", "--out", out]) == 0
    capsys.readouterr()
    assert run_cli(["summary", out, "--contrast", "cadence-grad:random@0.3", "--contrast",
                    "cadence-grad:none@0.3"]) == 0
    printed = capsys.readouterr().out
    assert "cadence-grad vs random" in printed and "p (Holm)" in printed and "Holm-adjusted together" in printed
    assert "cadence-grad vs each draw of random: draw 0:" in printed and "of 3" in printed
    assert run_cli(["summary", out, "--contrast", "cadence-grad:random@0.3", "--measure", "f1_to_dense"]) == 0
    assert "f1_to_dense" in capsys.readouterr().out
    assert run_cli(["summary", out, "--contrast", "cadence-grad:coin@0.3"]) == 2
    assert "coin:cadence-grad" in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["args"]["diagnose"]["coin_draws"] == 3 and manifest["args"]["diagnose"]["pool"] == "changed"


def test_run_reference_must_be_present_but_defaults_to_none(one_selector_run, capsys):
    out, _, _ = one_selector_run
    assert run_cli(["summary", out, "--reference", "cacheblend"]) == 2
    assert "not in this run" in capsys.readouterr().err


def test_ctrl_c_during_a_run_says_where_it_stands_and_how_to_resume(tiny_loaded, tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("workbench.experiments.sweep.diagnose", interrupted)
    out = tmp_path / "r"
    assert run_cli(["run", "--selectors", "random", "--n", "2", "--out", out]) == 130
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress bar
    assert "Traceback" not in err and last.startswith("kvwb: interrupted: ")
    assert "0 of 2 examples are saved" in last and f"kvwb run --selectors random --n 2 --out {out}" in last
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"


def test_diagnose_writes_a_run_folder_and_force_replaces_only_its_own(tiny_loaded, tmp_path, capsys):
    out = tmp_path / "d"
    argv = ["diagnose", "--example", "synthetic#1", "--selectors", "none,random", "--budgets", "0.2",
            "--max-new-tokens", "2", "--out", out]
    assert run_cli(argv) == 0
    printed = capsys.readouterr().out
    assert "random" in printed and f"wrote {out}" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "diagnosis" and (out / "diagnosis.json").is_file()
    assert run_cli(argv) == 2 and "pass --force" in capsys.readouterr().err
    assert not (out / "layer_effects.parquet").exists()  # kept only when asked
    assert run_cli([*argv, "--force", "--layer-effects"]) == 0
    effects = pd.read_parquet(out / "layer_effects.parquet")
    assert set(effects["selector"]) >= {"random"} and effects["layer"].nunique() == tiny_loaded.adapter.n_layers



def test_bench_signals_times_the_shared_suffix_pass_against_separate_passes(tiny_loaded, capsys):
    from workbench.bench.ratios import signal_sharing

    table = signal_sharing(tiny_loaded, examples=2, repeats=1, progress=False)
    assert list(table.columns) == ["n_tokens", "suffix_tokens", "separate_s", "shared_s", "ratio"]
    assert len(table) == 2
    assert (table[["separate_s", "shared_s"]] > 0).all().all()
    assert (table["ratio"] == table["shared_s"] / table["separate_s"]).all()
    assert run_cli(["bench", "signals", "--examples", "1", "--repeats", "1"]) == 0
    assert "| n_tokens | suffix_tokens | separate_s | shared_s | ratio |" in capsys.readouterr().out


# ----------------------------------------------------------------------------- issue 29: half-written, stuck, crashed

def test_every_float_option_refuses_nan_and_inf():
    """A float option typed `float` let nan pass its `< 0` check and fail deep in the work (29.12)."""
    parser = cli.build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        for action in sub._actions:
            try:
                value = action.type("0.5") if callable(action.type) else None
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                continue
            if isinstance(value, float) or (isinstance(value, tuple) and value and isinstance(value[0], float)):
                for bad in ("nan", "inf", "-inf"):
                    with pytest.raises((ValueError, argparse.ArgumentTypeError)):
                        action.type(bad)
                        pytest.fail(f"kvwb {name} {action.option_strings}: {bad} passed")


def test_summary_html_on_a_full_disk_leaves_nothing_and_the_rerun_works(one_selector_run, tmp_path, monkeypatch,
                                                                         capsys):
    """A full disk after the first figure left accuracy.html alone, and the rerun was refused (29.6)."""
    import errno

    import plotly.graph_objects as go

    out, _, _ = one_selector_run
    real, calls = go.Figure.to_html, []

    def disk_full_at_the_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    html = tmp_path / "html"
    monkeypatch.setattr(go.Figure, "to_html", disk_full_at_the_second)
    assert run_cli(["summary", out, "--html", html]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert tree(tmp_path) == {}, "a half-written HTML folder was left"
    monkeypatch.setattr(go.Figure, "to_html", real)
    assert run_cli(["summary", out, "--html", html]) == 0
    assert {p.name for p in html.iterdir()} == {"accuracy.html", "gap.html", "flips.html", "rows.html",
                                                 "index.html", "manifest.json"}


SIGTERM_SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from conftest import tiny_model
import workbench.models
import workbench.experiments.sweep as sweep
tiny = tiny_model("llama")
workbench.models.load_model = lambda *a, **k: tiny

def a_long_loop(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID` or a job scheduler sends
    time.sleep(60)

sweep.diagnose = a_long_loop
from workbench.cli.main import main
sys.exit(main(["run", "--selectors", "random", "--n", "2", "--out", {out!r}]))
"""


def test_a_sigtermed_run_ends_interrupted_not_running(tmp_path):
    """SIGTERM killed a run with its manifest `running` (29.7): it now ends as Ctrl-C does."""
    out = tmp_path / "r"
    script = SIGTERM_SCRIPT.format(tests=str(Path(__file__).resolve().parents[1]), out=str(out))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith("kvwb: interrupted: ")
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize("value", ["abc", "-2", "100000"])
def test_a_bad_kvwb_threads_is_one_line_from_a_fresh_process(value, tmp_path):
    """KVWB_THREADS was checked at import (a traceback before main) and a huge one crashed torch's
    import (29.9, 29.10)."""
    env = dict(os.environ, KVWB_THREADS=value)
    done = subprocess.run([sys.executable, "-m", "workbench.cli", "summary", str(tmp_path / "nothing")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"kvwb: error: KVWB_THREADS={value!r} must be a whole number of threads from 1 to "
        f"{__import__('workbench').threads.available_cores()} (the cores this machine gives the process); unset "
        f"it for torch's default"]


def test_target_words_beyond_the_models_context_are_refused_from_the_count(tiny_loaded, tmp_path, capsys):
    """--target-words 10000000 took 53 s to refuse a 14M-token context: the word count alone says it."""
    out = tmp_path / "r"
    assert run_cli(["run", "--target-words", "5000", "--n", "1", "--selectors", "none", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "target_words 5000 cannot fit the model's context of 2048 tokens" in err and "Traceback" not in err
    assert not out.exists()
