"""Issue 47, round 6: numeric options bounded before any model work, built-in signal names kept
from plugins (and each run's signal code recorded), the CLI reading $KVWB_PLUGINS through the
app's loader, the CSV summary carrying the text summary's notes, a weight of another shape
refused in one line, and a gold-answer contrast on a run without gold answers warned of."""

import json
from pathlib import Path

import pytest
import torch

import workbench as wb
from conftest import run_cli, tiny_model

ROOT = Path(__file__).resolve().parents[2]


def _no_model(*a, **k):
    raise AssertionError("the model was loaded before the options were checked")


# item 5 (of the round): a tensor of another shape than its config needs

def _saved(folder: Path) -> Path:
    model = tiny_model("llama")
    model.hf.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return folder


def _edit_weights(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    [path] = folder.glob("*.safetensors")
    save_file(change(load_file(path)), path, metadata={"format": "pt"})


def test_a_tensor_of_another_shape_is_refused_in_one_line_naming_it_and_both_shapes(tmp_path, capfd):
    folder = _saved(tmp_path / "m")
    key = "model.layers.1.mlp.up_proj.weight"
    from safetensors.torch import load_file

    [path] = folder.glob("*.safetensors")
    needed = tuple(load_file(path)[key].shape)
    _edit_weights(folder, lambda t: {**t, key: torch.zeros(needed[0] + 1, needed[1])})
    capfd.readouterr()
    with pytest.raises(wb.WorkbenchError, match="do not match its config") as err:
        wb.load_model(str(folder), device="cpu")
    text = str(err.value)
    assert "\n" not in text and key in text, text
    assert f"[{needed[0] + 1}, {needed[1]}] in the checkpoint" in text and f"needs [{needed[0]}, {needed[1]}]" in text
    captured = capfd.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and "ignore_mismatched_sizes" not in text


def test_a_missing_key_is_refused_without_transformers_key_table(tmp_path, capfd):
    folder = _saved(tmp_path / "m")
    _edit_weights(folder, lambda t: {k: v for k, v in t.items() if k != "model.norm.weight"})
    capfd.readouterr()
    with pytest.raises(wb.WorkbenchError, match="1 missing \\(model.norm.weight\\)"):
        wb.load_model(str(folder), device="cpu")
    captured = capfd.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and "MISSING" not in captured.err


# item 1: every numeric option is bounded when the command line is parsed, before any model work

BIG = str(10**20)


@pytest.mark.parametrize("argv", [
    ["run", "--selectors", "none,epic", "--epic-k", BIG, "--n", "1"],  # an OverflowError after the model loaded
    ["run", "--n", BIG], ["run", "--max-new-tokens", BIG, "--n", "1"], ["run", "--grow-max-span", BIG, "--n", "1"],
    ["run", "--max-new-tokens", "4097", "--n", "1"],
    ["diagnose", "--selectors", "none,epic", "--epic-k", BIG], ["diagnose", "--max-new-tokens", BIG],
    ["curve", "--tokens", BIG], ["curve", "--prompts", BIG], ["curve", "--seeds", BIG], ["curve", "--units", BIG],
    ["fidelity", "--n", BIG], ["fidelity", "--layers", BIG], ["fidelity", "--bank-size", BIG],
    ["fidelity", "--bank-ranks", BIG], ["fidelity", "--max-new-tokens", BIG], ["fidelity", "--threads", BIG],
    ["fidelity", "--threads", "100000"],
    ["pipeline", "--n", BIG], ["pipeline", "--max-new-tokens", BIG], ["pipeline", "--max-passages", BIG],
])
def test_a_huge_number_is_refused_in_one_line_before_any_model_work(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    out = tmp_path / "r"
    assert run_cli([*argv, "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("at most" in err or "each at most" in err), err
    assert argv[argv.index(next(a for a in argv if a in (BIG, "4097", "100000"))) - 1] in err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["answer", "--max-new-tokens", BIG], ["answerability", "--n", BIG],
                                  ["answerability", "--max-new-tokens", BIG]])
def test_the_commands_without_out_refuse_huge_numbers_too(argv, monkeypatch, capsys):
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    assert run_cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{argv[1]}: must be an integer >= 1 and at most" in err, err


@pytest.mark.parametrize("command", ["run", "answerability", "pipeline", "fidelity"])
def test_a_command_refuses_more_examples_than_a_run_holds_before_making_any(command, tmp_path, monkeypatch, capsys):
    """`kvwb run --n 1000000` spent over 5 minutes generating a million synthetic examples to check them."""
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    assert run_cli([command, "--n", "10001", *(["--out", tmp_path / "r"] if command != "answerability" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--n: must be an integer >= " in err and "at most 10,000" in err, err


def test_bounded_options_keep_their_ordinary_values():
    from workbench.cli.main import build_parser

    args = build_parser().parse_args(["run", "--n", "10000", "--epic-k", "32", "--grow-max-span", "0",
                                      "--max-new-tokens", "4096", "--out", "x"])
    assert (args.n, args.epic_k, args.grow_max_span, args.max_new_tokens) == (10**4, 32, 0, 4096)
    assert build_parser().parse_args(["fidelity", "--layers", "0,1,2", "--threads", "1", "--out", "x"]).layers == (0, 1, 2)


# item 2: a plugin may not take a built-in signal's name; a run records the code of the records it reads

@pytest.fixture
def own_registries(monkeypatch):
    """Copies of the selector and signal registries, put back afterwards (and plugin modules forgotten)."""
    import sys

    from workbench.selectors import registry as selectors
    from workbench.signals import registry as signals

    monkeypatch.setattr(selectors, "_REGISTRY", selectors._REGISTRY.copy())
    monkeypatch.setattr(signals, "_REGISTRY", signals._REGISTRY.copy())
    yield selectors, signals
    for name in [n for n in sys.modules if n.startswith(("kvwb_plugin_", "kvwb_round6_"))]:
        del sys.modules[name]


TAKES_SIGNAL = '''
import torch
from workbench.signals import register_signal

@register_signal("{name}", per="{per}", {reads}label="mine")
def mine(signals):
    return torch.zeros(signals.ctx.n_reused)
'''


@pytest.mark.parametrize("name, per, reads", [("densedev", "token", 'reads=("deviation",), '),
                                              ("deviation", "record", ""), ("grad_sq_v", "layer", 'reads=("saliency",), ')])
def test_a_plugin_may_not_register_a_builtin_signal_name(own_registries, tmp_path, monkeypatch, name, per, reads):
    import importlib

    _, signals = own_registries
    before = signals.get_signal(name, per)
    (tmp_path / "kvwb_round6_signal.py").write_text(TAKES_SIGNAL.format(name=name, per=per, reads=reads))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(wb.WorkbenchError, match=f"plugin module 'kvwb_round6_signal' may not register the {per} "
                                                f"signal '{name}': it is built in \\(workbench.signals.builtin"):
        importlib.import_module("kvwb_round6_signal")
    assert signals.get_signal(name, per) is before and before.builtin


def test_a_plugin_keeps_its_own_signal_names_and_a_notebook_may_rerun_its_cell(own_registries):
    _, signals = own_registries

    @signals.register_signal("round6_own", per="token", reads=("deviation",))
    def own(s):
        return None

    @signals.register_signal("round6_own", per="token", reads=("deviation",))
    def own_again(s):
        return None

    info = signals.get_signal("round6_own", "token")
    assert info.code == f"{__name__}.{own_again.__qualname__}" and not info.builtin


def _jsonl(path: Path) -> str:
    from conftest import small_example

    example = small_example()
    path.write_text(json.dumps({"id": "a", "passages": list(example.passages), "question": example.question,
                                "answers": ["Tressamor"]}) + "\n")
    return f"jsonl:{path}"


def test_a_run_records_the_code_of_the_records_its_selectors_read_and_refuses_a_resume_where_it_changed(
        own_registries, tmp_path):
    from dataclasses import replace

    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig
    from workbench.runstore import SweepStore

    _, signals = own_registries
    config = SweepConfig(dataset=_jsonl(tmp_path / "d.jsonl"), n=1, diagnose=DiagnoseConfig(
        selectors=("none", "cacheblend", "coin:densedev"), budgets=(0.5,), attribution=False, max_new_tokens=2))
    identity = {"name": "tiny", "fingerprint": {"config_sha256": "x"}}
    (tmp_path / "run").mkdir()
    SweepStore.open(tmp_path / "run", identity, config.identity())
    code = json.loads((tmp_path / "run" / "manifest.json").read_text())["args"]["signal_code"]
    assert code == {"check_layer": "workbench.signals.builtin.check_layer", "deviation": "workbench.signals.builtin.deviation"}
    SweepStore.open(tmp_path / "run", identity, config.identity())  # the same code resumes
    signals._REGISTRY["record", "deviation"] = replace(signals.get_signal("deviation"), code="someplugin.deviation")
    with pytest.raises(wb.WorkbenchError, match="signal_code.deviation: 'workbench.signals.builtin.deviation' in the "
                                                "run vs 'someplugin.deviation' now"):
        SweepStore.open(tmp_path / "run", identity, config.identity())


def test_a_run_made_before_signal_code_was_recorded_still_resumes(tmp_path):
    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig
    from workbench.runstore import SweepStore

    config = SweepConfig(dataset=_jsonl(tmp_path / "d.jsonl"), n=1, diagnose=DiagnoseConfig(
        selectors=("none", "densedev"), budgets=(0.5,), attribution=False, max_new_tokens=2))
    identity = {"name": "tiny", "fingerprint": {"config_sha256": "x"}}
    (tmp_path / "run").mkdir()
    SweepStore.open(tmp_path / "run", identity, {k: v for k, v in config.identity().items() if k != "signal_code"})
    store = SweepStore.open(tmp_path / "run", identity, config.identity())
    assert store.manifest["args"]["signal_code"] == {"deviation": "workbench.signals.builtin.deviation"}


# item 3: the CLI reads $KVWB_PLUGINS with the app's loader

OWN_SELECTOR = '''
import torch
from workbench.selectors import register_selector

@register_selector("round6-own", uses=("deviation",), default_unit="single")
def own(signals):
    return torch.zeros(signals.ctx.n_reused)
'''


def test_the_cli_loads_the_plugins_named_in_kvwb_plugins(own_registries, tmp_path, monkeypatch):
    """A plugin's selector is taken by `kvwb run` (which then goes on to load the model)."""
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    (tmp_path / "own.py").write_text(OWN_SELECTOR)
    monkeypatch.setenv("KVWB_PLUGINS", str(tmp_path / "own.py"))
    with pytest.raises(AssertionError, match="the model was loaded"):
        run_cli(["run", "--selectors", "none,round6-own", "--n", "1", "--out", tmp_path / "r"])
    assert "round6-own" in own_registries[0].selector_names()


@pytest.mark.parametrize("plugin, message", [
    ("missing", "plugin 'MISSING' did not load (FileNotFoundError: no such file"),
    ("takes-signal", "plugin module 'kvwb_plugin_takes_signal_"),
])
def test_the_cli_refuses_a_plugin_that_does_not_load_in_one_line(own_registries, tmp_path, monkeypatch, capsys,
                                                                  plugin, message):
    monkeypatch.setattr("workbench.models.load_model", _no_model)
    path = tmp_path / "takes_signal.py"
    if plugin == "takes-signal":
        path.write_text(TAKES_SIGNAL.format(name="densedev", per="token", reads='reads=("deviation",), '))
    else:
        path = tmp_path / "nowhere.py"
    monkeypatch.setenv("KVWB_PLUGINS", f"json, {path}")
    assert run_cli(["run", "--n", "1", "--out", tmp_path / "r"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message.replace("MISSING", str(path)) in err and "KVWB_PLUGINS" in err, err
    assert not (tmp_path / "r").exists()


def test_the_app_and_the_cli_share_one_plugin_loader():
    from workbench import app_api, registry

    source = (ROOT / "app" / "state.py").read_text()
    assert app_api.load_plugins is registry.load_plugins
    assert "wb.load_plugins()" in source and "spec_from_file_location" not in source


# item 4: the CSV summary carries the text summary's header caveats as columns

def test_the_csv_summary_carries_hooked_runs_and_short_distractors(tiny_llama, tmp_path, capsys):
    import io

    import pandas as pd

    from test_issue47_round5 import hotpotqa, zero_attention
    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig, run_sweep

    diagnose = DiagnoseConfig(selectors=("none",), budgets=(0.5,), attribution=False, max_new_tokens=2)
    config = SweepConfig(dataset=hotpotqa(tmp_path / "hp.json"), n=3, diagnose=diagnose,
                         dataset_options={"passages": "gold+2"})
    run_sweep(tiny_llama, config, tmp_path / "run", progress=False, hooks={"blocks.0.hook_attn_out": zero_attention})
    capsys.readouterr()
    assert run_cli(["summary", tmp_path / "run", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (table["hooked_examples"] == 3).all() and (table["n_examples"] == 3).all()
    assert table["hooks"].str.contains("zero_attention").all()
    assert (table["distractors_short_examples"] == 2).all() and (table["distractors_short_max"] == 2).all()


def test_the_csv_summary_of_a_plain_run_has_no_caveat_columns(tiny_llama, tmp_path, capsys):
    import io

    import pandas as pd

    from workbench.diagnosis import DiagnoseConfig
    from workbench.experiments.sweep import SweepConfig, run_sweep

    diagnose = DiagnoseConfig(selectors=("none",), budgets=(0.5,), attribution=False, max_new_tokens=2)
    run_sweep(tiny_llama, SweepConfig(dataset=_jsonl(tmp_path / "d.jsonl"), n=1, diagnose=diagnose), tmp_path / "run",
              progress=False)
    capsys.readouterr()
    assert run_cli(["summary", tmp_path / "run", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert not {"hooked_examples", "hooks", "distractors_short_examples"} & set(table.columns) and len(table) >= 1


# issue item 10's last point: an em contrast on a run with no gold answers warns

@pytest.mark.parametrize("measure, warned", [("em", True), ("contains", True), ("flip", False)])
def test_a_gold_contrast_on_a_run_without_gold_answers_warns_in_one_line(tmp_path, capsys, measure, warned):
    from test_gap_auc import make_run, write_folder

    run = make_run()
    run.examples["gold"] = ""  # examples.parquet's gold of examples without answers
    folder = write_folder(run, tmp_path / "run")
    assert run_cli(["summary", folder, "--contrast", "cadence:cacheblend@0.2", "--measure", measure]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "no gold answer" in line]
    assert len(lines) == int(warned) and all(line.startswith("kvwb: warning: ") for line in lines), lines


def test_a_run_with_gold_answers_gives_no_such_warning():
    import warnings

    from test_gap_auc import make_run

    from workbench.experiments.contrasts import contrast_family

    run = make_run()
    run.examples["gold"] = ["Tressamor"] + [""] * (len(run.examples) - 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        contrast_family(run, ["cadence:cacheblend@0.2"], "em")
    assert not [w for w in caught if "no gold answer" in str(w.message)]
    run.examples["gold"] = ""
    from workbench.errors import WorkbenchWarning

    with pytest.warns(WorkbenchWarning, match="hold no gold answer, so em is the same for every selector"):
        contrast_family(run, ["cadence:cacheblend@0.2"], "em")


# item 15 of the issue: a config whose hidden size does not divide by its heads

def test_a_config_whose_hidden_size_does_not_divide_by_its_heads_is_one_line(tmp_path):
    folder = _saved(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": config["hidden_size"] + 1}))
    with pytest.raises(wb.WorkbenchError, match="could not read the model config") as err:
        wb.load_model(str(folder), device="cpu")
    text = str(err.value)
    assert "\n" not in text and "is not a multiple of the number of attention heads" in text, text


def test_a_chat_template_that_reaches_for_class_is_refused_at_load_in_one_line(tmp_path):
    folder = _saved(tmp_path / "m")
    (folder / "chat_template.jinja").write_text("{{ ''.__class__.__mro__ }}{% for m in messages %}{{ m['content'] }}"
                                                "{% endfor %}")
    with pytest.raises(wb.WorkbenchError, match="chat template") as err:
        wb.load_model(str(folder), device="cpu")
    assert "\n" not in str(err.value) and "SecurityError" in str(err.value), str(err.value)


TAKES_DATASET = '''
from workbench.tasks import register_dataset

def load(**options):
    return []

register_dataset("{name}", load, description="mine")
'''


def test_a_plugin_may_not_take_a_builtin_data_set_kind_but_may_add_its_own(tmp_path, monkeypatch):
    import importlib
    import sys

    from workbench.tasks import spec

    monkeypatch.setattr(spec, "_DATASETS", spec._DATASETS.copy())
    before = spec.dataset_kind("hotpotqa")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "kvwb_round6_data.py").write_text(TAKES_DATASET.format(name="hotpotqa"))
    (tmp_path / "kvwb_round6_own_data.py").write_text(TAKES_DATASET.format(name="round6-own"))
    try:
        with pytest.raises(wb.WorkbenchError, match="plugin module 'kvwb_round6_data' may not register the data set "
                                                    "kind 'hotpotqa': it is built in \\(workbench.tasks"):
            importlib.import_module("kvwb_round6_data")
        assert spec.dataset_kind("hotpotqa") is before
        importlib.import_module("kvwb_round6_own_data")
        assert spec.dataset_kind("round6-own").load.__module__ == "kvwb_round6_own_data"
    finally:
        for name in ("kvwb_round6_data", "kvwb_round6_own_data"):
            sys.modules.pop(name, None)
