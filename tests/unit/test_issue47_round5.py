"""Issue 47, round 5: a hooked diagnosis that said nothing, refusals that came after the run folder,
a plugin that took a built-in selector's name, Ray workers that outlived their driver, a silent
answer limit, selector options given without their selector, and HotpotQA records short of
distractors."""

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_cli, small_example
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.errors import WorkbenchError

CONFIG = DiagnoseConfig(selectors=("none", "bcr"), budgets=(0.5,), attribution=False, max_new_tokens=2)
IDENTITY = {"name": "tiny", "fingerprint": {"config_sha256": "x"}}


def zero_attention(x, hook):
    """A hook that silences attention's output."""
    return x * 0


def keep(x, hook):
    return None


def _no_model(*a, **k):
    raise AssertionError("the model was loaded before the options were checked")


def jsonl(path: Path, ids, gold="Tressamor") -> str:
    example = small_example()
    rows = [{"id": i, "passages": list(example.passages), "question": example.question, "answers": [gold]} for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def diagnoses(tiny_llama):
    """One example diagnosed plain and under two hook points (three functions)."""
    hooks = {"blocks.0.hook_attn_out": zero_attention, "blocks.1.hook_resid_post": [keep, zero_attention]}
    plain = diagnose(tiny_llama, small_example(), CONFIG, progress=False)
    hooked = diagnose(tiny_llama, small_example(), CONFIG, progress=False, hooks=hooks)
    return plain, hooked


@pytest.fixture(scope="module")
def model_folder(tiny_llama, tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    tiny_llama.hf.save_pretrained(folder)
    tiny_llama.tokenizer.save_pretrained(folder)
    return folder


# item 3: a diagnosis computed under hooks says so

HOOKS = {"blocks.0.hook_attn_out": [f"{__name__}.zero_attention"],
         "blocks.1.hook_resid_post": [f"{__name__}.keep", f"{__name__}.zero_attention"]}


def test_a_hooked_diagnosis_records_its_hooks_in_diagnosis_json_and_its_run_manifest(diagnoses, tmp_path):
    from workbench.diagnosis.record import Diagnosis
    from workbench.runstore.writers import write_diagnosis_run

    plain, hooked = diagnoses
    assert hooked.hooks == HOOKS and hooked.hooked and plain.hooks is None and not plain.hooked
    hooked.save(tmp_path / "one")
    assert json.loads((tmp_path / "one" / "diagnosis.json").read_text())["hooks"] == HOOKS
    assert Diagnosis.load(tmp_path / "one").hooks == HOOKS
    plain.save(tmp_path / "two")
    assert "hooks" not in json.loads((tmp_path / "two" / "diagnosis.json").read_text())
    write_diagnosis_run(tmp_path / "run", hooked, IDENTITY)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["args"]["hooks"] == HOOKS
    write_diagnosis_run(tmp_path / "plain-run", plain, IDENTITY)
    assert "hooks" not in json.loads((tmp_path / "plain-run" / "manifest.json").read_text())["args"]


def test_a_hook_record_reads_names_of_any_container_and_calls_nothing():
    from functools import partial

    from workbench.diagnosis.record import hook_record

    called = []

    class Holder:  # an object holding its map as `fns`, as engine.hooks.Hooks does
        fns = {"hook_embed": [lambda x, hook: called.append(1)]}

    assert hook_record(None) is None and hook_record({}) is None
    assert hook_record(Holder())["hook_embed"][0].endswith("<lambda>") and not called
    assert hook_record({"hook_embed": partial(keep)})["hook_embed"][0].startswith("functools.partial(")


def test_a_sweep_never_mixes_hooked_and_unhooked_examples(diagnoses, tmp_path):
    from workbench.runstore import SweepStore

    plain, hooked = diagnoses
    (tmp_path / "run").mkdir()  # as run_lock makes it
    store = SweepStore.open(tmp_path / "run", IDENTITY, {"n": 2})
    with pytest.raises(WorkbenchError, match="computed under hooks .*this run's examples are computed without hooks"):
        store.save(hooked, ["t0"])
    assert not (tmp_path / "run" / "diagnoses" / "t0").exists()
    store.save(plain, ["t0"])
    hooked.save(tmp_path / "run" / "diagnoses" / "t1")  # written beside the run's own by hand (the Python API)
    before = (tmp_path / "run" / "manifest.json").read_bytes()
    with pytest.raises(WorkbenchError, match="diagnoses/t1 was computed under hooks \\(blocks.0.hook_attn_out"):
        SweepStore.open(tmp_path / "run", IDENTITY, {"n": 2})  # kvwb run's resume
    assert (tmp_path / "run" / "manifest.json").read_bytes() == before  # refused before the manifest is touched


def test_a_hooked_run_records_its_hooks_refuses_an_unhooked_resume_and_its_summary_says_so(tiny_llama, tmp_path):
    from workbench.cli.summary import render, summarize_run
    from workbench.experiments.sweep import SweepConfig, run_sweep

    config = SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=CONFIG)
    run_sweep(tiny_llama, config, tmp_path / "run", progress=False, hooks={"blocks.0.hook_attn_out": zero_attention})
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["args"]["hooks"] == {
        "blocks.0.hook_attn_out": HOOKS["blocks.0.hook_attn_out"]}
    text = render(*summarize_run(tmp_path / "run"))
    flagged = [line for line in text.splitlines() if line.startswith("HOOKED")]
    assert len(flagged) == 1 and "1 of 1 examples were computed under hooks" in flagged[0]
    with pytest.raises(WorkbenchError, match="hooks: .* in the run vs None now"):
        run_sweep(tiny_llama, config, tmp_path / "run", progress=False)


def test_kvwb_run_refuses_to_resume_a_run_holding_a_hooked_example(diagnoses, model_folder, tmp_path, capsys):
    _, hooked = diagnoses
    argv = ["run", "--model", model_folder, "--dataset", jsonl(tmp_path / "d.jsonl", ["a", "b"]), "--n", "2",
            "--selectors", "none", "--budgets", "0.5", "--max-new-tokens", "2", "--out", tmp_path / "run"]
    assert run_cli(argv) == 0
    hooked.save(tmp_path / "run" / "diagnoses" / "t0")  # a hooked diagnosis saved into the run from Python
    capsys.readouterr()
    assert run_cli(argv) == 2
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kvwb:")]
    assert "t0 was computed under hooks" in err and "never mixes the two" in err


# item 5: a refused run leaves no folder

@pytest.mark.parametrize("command", ["run", "diagnose"])
@pytest.mark.parametrize("argv, message", [
    (["--dataset", "ruler:niah_single", "--data-seed", str(2**64)], "data_seed must be an integer >= 0 and at most"),
    (["--dataset", "ruler:niah_single", "--data-seed", str(2**63)], "data_seed must be an integer >= 0 and at most"),
    (["--dataset", "ruler:niah_single", "--seed", str(2**64)], "seed must be an integer from 0 to"),
    (["--dataset", "synthetic", "--epic-k", "3"], "--epic-k applies to the epic selector only"),
    (["--dataset", "synthetic", "--coin-draws", "1000"], "coin_draws must be at most 100"),
    (["--dataset", "synthetic", "--budgets", "2"], "budget must be a fraction"),
])
def test_a_refused_run_leaves_no_folder_and_loads_no_model(command, argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    if command == "diagnose":
        argv = [a.replace("--dataset", "--example") for a in argv]
        argv[1] += "#0"
    out = tmp_path / "r"
    rc = run_cli([command, *argv, "--n", "1", "--out", out] if command == "run" else [command, *argv, "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["curve", "--seed", str(2**64)], ["curve", "--budget", "2"], ["fidelity", "--seed", str(2**64)],
    ["fidelity", "--alphas", "-1"], ["pipeline", "--seed", str(2**64)], ["pipeline", "--methods", "nope"],
    ["run", "--executor", "ray", "--gpus-per-worker", "-1", "--n", "1"], ["run", "--reference", "nope", "--n", "1"],
    ["run", "--dataset", "ruler:niah_single", "--target-tokens", "999999999", "--n", "1"],
])
def test_other_refusals_leave_no_folder_either(argv, tmp_path, monkeypatch, capsys):
    """Refusals of the other commands that write a run (these held before round 5; kept as regressions)."""
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    assert run_cli([*argv, "--out", tmp_path / "r"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


# item 7: a plugin may not take a built-in selector's name; a run records each selector's code

@pytest.fixture
def own_registry(monkeypatch):
    from workbench.selectors import registry

    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    return registry


PLUGIN = '''
import torch
from workbench.selectors import register_selector

@register_selector("cacheblend", uses=("deviation",), default_unit="single")
def mine(signals):
    return torch.zeros(signals.ctx.n_reused)
'''


def test_a_plugin_may_not_register_a_builtin_selector_name(own_registry, tmp_path, monkeypatch):
    import importlib

    (tmp_path / "kvwb_round5_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WorkbenchError, match="plugin module 'kvwb_round5_plugin' may not register the selector "
                                             "'cacheblend': it is built in \\(workbench.selectors.builtin"):
        importlib.import_module("kvwb_round5_plugin")
    sys.modules.pop("kvwb_round5_plugin", None)
    assert own_registry.get_selector("cacheblend").code.startswith("workbench.selectors.builtin.")


def test_a_plugin_keeps_its_own_names(own_registry):
    @own_registry.register_selector("round5-own", default_unit="single")
    def own(signals):
        return None

    @own_registry.register_selector("round5-own", default_unit="single")  # a notebook re-running its cell
    def own_again(signals):
        return None

    assert own_registry.get_selector("round5-own").code == f"{__name__}.{own_again.__qualname__}"


def test_a_run_records_each_selectors_code_and_refuses_a_resume_where_it_changed(own_registry, tmp_path):
    from workbench.experiments.sweep import SweepConfig
    from workbench.runstore import SweepStore

    config = SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ["a"]), n=1,
                         diagnose=CONFIG.with_(selectors=("none", "cacheblend", "coin:bcr")))
    (tmp_path / "run").mkdir()
    SweepStore.open(tmp_path / "run", IDENTITY, config.identity())
    code = json.loads((tmp_path / "run" / "manifest.json").read_text())["args"]["selector_code"]
    assert sorted(code) == ["bcr", "cacheblend", "coin", "none"]
    assert code["cacheblend"] == own_registry.get_selector("cacheblend").code
    assert all(c.startswith("workbench.selectors.builtin.") for c in code.values())
    SweepStore.open(tmp_path / "run", IDENTITY, config.identity())  # the same code resumes
    info = own_registry.get_selector("cacheblend")
    own_registry._REGISTRY["cacheblend"] = replace(info, code="someplugin.cacheblend")  # defined elsewhere now
    with pytest.raises(WorkbenchError, match="selector_code.cacheblend: 'workbench.selectors.builtin.* in the run vs "
                                             "'someplugin.cacheblend' now"):
        SweepStore.open(tmp_path / "run", IDENTITY, config.identity())


def test_a_run_made_before_selector_code_was_recorded_still_resumes(tmp_path):
    from workbench.experiments.sweep import SweepConfig
    from workbench.runstore import SweepStore

    config = SweepConfig(dataset=jsonl(tmp_path / "d.jsonl", ["a"]), n=1, diagnose=CONFIG)
    old = {k: v for k, v in config.identity().items() if k != "selector_code"}
    (tmp_path / "run").mkdir()
    SweepStore.open(tmp_path / "run", IDENTITY, old)
    store = SweepStore.open(tmp_path / "run", IDENTITY, config.identity())
    assert store.manifest["args"]["selector_code"] == config.identity()["selector_code"]  # recorded from then on


# item 9: a Ray worker writes only under its driver's live lock, and ends with its driver

def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_worker_writes_nothing_once_its_driver_no_longer_holds_the_lock(diagnoses, tmp_path, monkeypatch):
    """The guard, without Ray (a faithful SIGKILL of a Ray driver is too slow and flaky on a loaded
    2-core machine): `SweepWorker.run` on a stub actor, with the lock naming a dead driver, another
    writer, or no one (the folder emptied), and with the live driver's lock."""
    from workbench.experiments import ray_sweep
    from workbench.runstore import run_lock

    plain, _ = diagnoses
    monkeypatch.setattr(ray_sweep, "diagnose", lambda *a, **k: plain)
    host = socket.gethostname()
    worker = object.__new__(ray_sweep.SweepWorker)
    worker.model = None
    run = tmp_path / "run"
    run.mkdir()
    dead = _dead_pid()
    for lock in (f"process {dead} on {host}", f"process {os.getpid()} on {host}", None):
        if lock is None:
            (run / ".lock").unlink()
        else:
            (run / ".lock").write_text(lock)
        worker.driver = (dead, host)
        result = worker.run(plain.example, CONFIG, str(run / "diagnoses" / "t0"))
        assert "no longer holds the run's lock" in result["error"]
        assert not (run / "diagnoses").exists()
    worker.driver = (os.getpid(), host)
    with run_lock(run):
        assert worker.run(plain.example, CONFIG, str(run / "diagnoses" / "t0")) == {}
    assert (run / "diagnoses" / "t0" / "diagnosis.json").is_file()


def test_a_worker_ends_when_its_driver_process_is_gone():
    from workbench.experiments.ray_sweep import end_with_driver

    host = socket.gethostname()
    ended = threading.Event()
    end_with_driver((_dead_pid(), host), exit=lambda code: ended.set(), poll=0.05)
    assert ended.wait(5)
    alive = threading.Event()
    end_with_driver((os.getpid(), host), exit=lambda code: alive.set(), poll=0.05)
    assert not alive.wait(0.5)


# item 13: an answer limit shorter than the golds is one warning line

def test_answerability_warns_in_one_line_when_the_limit_is_shorter_than_seven_digit_golds(model_folder, tmp_path,
                                                                                           capsys):
    data = jsonl(tmp_path / "d.jsonl", ["a", "b"], gold="7331599")
    assert run_cli(["answerability", "--model", model_folder, "--dataset", data, "--n", "2",
                    "--max-new-tokens", "1"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kvwb: warning:")]
    assert len(lines) == 1 and "2 of 2 gold answers need more than the answer limit of 1 tokens (up to 7)" in lines[0]


# item 14: a selector's option without its selector

@pytest.mark.parametrize("argv, message", [
    (["--epic-k", "3"], "--epic-k applies to the epic selector only"),
    (["--relaxkv-context", "0.5", "--selectors", "none,bcr"], "--relaxkv-context applies to the relaxkv selector only"),
    (["--densedev-norm", "layer", "--selectors", "none,bcr"], "--densedev-norm applies to the densedev selector only"),
])
def test_a_selectors_option_without_its_selector_is_refused_in_one_line(argv, message):
    from workbench.cli.diagnose import diagnose_config
    from workbench.cli.main import build_parser
    from workbench.cli.run import sweep_config

    with pytest.raises(WorkbenchError, match=message):
        sweep_config(build_parser().parse_args(["run", "--out", "x", *argv]))
    with pytest.raises(WorkbenchError, match=message):
        diagnose_config(build_parser().parse_args(["diagnose", *argv]))


@pytest.mark.parametrize("argv", [["--epic-k", "3", "--selectors", "none,epic"],
                                  ["--epic-k", "3", "--selectors", "none,coin:epic"],
                                  ["--relaxkv-context", "0.5", "--selectors", "relaxkv"],
                                  ["--densedev-norm", "layer"]])  # densedev is among the default selectors
def test_a_selectors_option_with_its_selector_is_taken(argv):
    from workbench.cli.main import build_parser
    from workbench.cli.run import sweep_config

    assert sweep_config(build_parser().parse_args(["run", "--out", "x", *argv])).diagnose is not None


# item 17: HotpotQA records with fewer distractors than gold+K asks

def hotpotqa(path: Path) -> str:
    def record(i, titles):
        return {"_id": f"h{i}", "question": f"Where is thing {i}?", "answer": "Tressamor", "type": "bridge",
                "context": [[t, [f"{t} is a place.", "It is old."]] for t in titles],
                "supporting_facts": [["Gold A", 0], ["Gold B", 1]]}

    records = [record(0, ["Gold A", "Other 1", "Gold B", "Other 2", "Other 3"]),
               record(1, ["Gold A", "Gold B"]),  # the dev set holds records with only their gold paragraphs
               record(2, ["Gold A", "Other 1", "Gold B"])]
    path.write_text(json.dumps(records))
    return f"hotpotqa:{path}"


def test_a_record_short_of_distractors_keeps_those_it_has_and_says_how_many(tmp_path):
    import random

    from workbench.tasks import load_dataset

    examples = load_dataset(hotpotqa(tmp_path / "hp.json"), passages="gold+2", data_seed=5)
    assert [len(e.passages) for e in examples] == [4, 2, 3]
    assert [(e.meta["n_distractors"], e.meta["distractors_asked"]) for e in examples] == [(2, 2), (0, 2), (1, 2)]
    drawn = random.Random("workbench-hotpotqa:5:h0").sample([1, 3, 4], 2)  # a full record draws as it always did
    assert examples[0].meta["titles"] == [["Gold A", "Other 1", "Gold B", "Other 2", "Other 3"][i]
                                          for i in sorted([0, 2, *drawn])]
    assert [e.meta["support_passages"] for e in examples][1:] == [[0, 1], [0, 2]]


def test_the_summary_counts_the_examples_short_of_distractors(tiny_llama, tmp_path):
    from workbench.cli.summary import render, summarize_run
    from workbench.experiments.sweep import SweepConfig, run_sweep

    config = SweepConfig(dataset=hotpotqa(tmp_path / "hp.json"), n=3, diagnose=CONFIG.with_(selectors=("none",)),
                         dataset_options={"passages": "gold+2"})
    run_sweep(tiny_llama, config, tmp_path / "run", progress=False)
    text = render(*summarize_run(tmp_path / "run"))
    assert "2 of 3 examples had fewer distractors than the passage setting asks (up to 2 fewer)" in text


def test_the_app_names_the_plugin_that_took_a_builtin_selector_name(own_registry, tmp_path, monkeypatch):
    """The app imports $KVWB_PLUGINS through the same registry: its sidebar message names the plugin."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "app"))
    import state

    (tmp_path / "takes_cacheblend.py").write_text(PLUGIN)
    monkeypatch.setenv("KVWB_PLUGINS", str(tmp_path / "takes_cacheblend.py"))
    (problem,) = state.load_plugins()
    assert "did not load (WorkbenchError: plugin module 'kvwb_plugin_takes_cacheblend_" in problem
    assert "may not register the selector 'cacheblend'" in problem
    assert own_registry.get_selector("cacheblend").code.startswith("workbench.selectors.builtin.")


def test_keep_saves_a_run_resumed_under_recorded_selector_code_over_its_older_record(tmp_path):
    """A study kept before `selector_code` existed, resumed today, is still the same run to keep.py;
    one whose selectors' code differs from its record's is not."""
    import importlib.util

    from workbench.runstore.manifest import new_manifest, write_manifest

    spec = importlib.util.spec_from_file_location("keep", Path(__file__).parents[2] / "docs" / "records" / "keep.py")
    keep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keep)
    run, records = tmp_path / "runs" / "study", tmp_path / "records"
    run.mkdir(parents=True)
    args = {"dataset": "synthetic", "n": 2}
    write_manifest(run, new_manifest("sweep", IDENTITY, args))
    keep.save(run, records)
    write_manifest(run, new_manifest("sweep", IDENTITY, {**args, "selector_code": {"none": "workbench.x.none"}}))
    keep.save(run, records)  # resumed under today's code: the record gains the key
    assert json.loads((records / "study" / "manifest.json").read_text())["args"]["selector_code"]
    write_manifest(run, new_manifest("sweep", IDENTITY, {**args, "selector_code": {"none": "plugin.none"}}))
    with pytest.raises(SystemExit, match="another run .*selector_code.none"):
        keep.save(run, records)


def test_the_clusters_processes_end_with_a_killed_driver_and_no_other_does(tmp_path):
    """The reaper a driver starts beside the local cluster it starts: a stand-in driver with two children,
    one whose command line names the cluster's software (as Ray's agents that outlive their node do) and
    one that does not; after the driver's SIGKILL the first ends and the second is left alone."""
    import signal
    import time

    from workbench.experiments.ray_sweep import REAPER

    spawn = ("import subprocess, sys, time\n"
             "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', tag])"
             " for tag in ('ray::StandInAgent', 'bystander')]\n"
             "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
             "time.sleep(120)\n")
    driver = subprocess.Popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True)
    agent, bystander = map(int, driver.stdout.readline().split())
    reaper = subprocess.Popen([sys.executable, "-c", REAPER, str(driver.pid), "0.1"])
    try:
        time.sleep(1.0)  # the reaper has looked at the driver's processes
        driver.kill()
        driver.wait()
        reaper.wait(timeout=10)
        deadline = time.time() + 5
        while time.time() < deadline and Path(f"/proc/{agent}").exists() and \
                "Z" not in Path(f"/proc/{agent}/stat").read_text().split(")")[-1].split()[:1]:
            time.sleep(0.1)
        state = Path(f"/proc/{agent}/stat").read_text().split(")")[-1].split()[0] if Path(f"/proc/{agent}").exists() \
            else "gone"
        assert state in ("gone", "Z")  # killed (a zombie until init reaps it)
        os.kill(bystander, 0)  # still alive: not the cluster's
    finally:
        for pid in (agent, bystander):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reaper.kill()
