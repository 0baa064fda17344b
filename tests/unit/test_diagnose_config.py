"""DiagnoseConfig: it holds SignalOptions and UnitOptions, and still reads and writes the flat dict
the run manifests record (a resumed run's identity), key for key and in the same order."""

import json
from dataclasses import fields

import pytest

import workbench as wb
from conftest import small_example, tiny_model
from workbench.cli.main import build_parser
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.diagnosis.config import FLAT_KEYS
from workbench.selectors import UnitOptions, default_selectors
from workbench.signals import SignalOptions

# Flat dicts as the code before the held options wrote them (copied from its output, by hand).
DEFAULT_DICT = {"selectors": None, "budgets": [0.1, 0.2, 0.3, 0.5], "seed": 0, "check_layer": 1, "draft_k": 2,
                "patch_max_tokens": 64, "pool": "changed", "coin_draws": 5, "chunk_size": 64, "chunk_scope": "span",
                "tau": 0.25, "grow_max_span": 64, "max_new_tokens": 24, "attribution": True, "rerotation": "delta",
                "epic_k": None, "relaxkv_context": None}
EVERY_KNOB = dict(selectors=("none", "random", "bcr:grow"), budgets=(0.5, 0.2), seed=7, check_layer=0, draft_k=3,
                  patch_max_tokens=8, pool="all", coin_draws=2, chunk_size=16, chunk_scope="passage", tau=0.5,
                  grow_max_span=None, max_new_tokens=4, attribution=False, rerotation="exact", epic_k=4,
                  relaxkv_context=0.25)
EVERY_KNOB_CHECKED = {"selectors": ["none", "random", "bcr:grow"], "budgets": [0.2, 0.5], "seed": 7, "check_layer": 0,
                      "draft_k": 3, "patch_max_tokens": 8, "pool": "all", "coin_draws": 2, "chunk_size": 16,
                      "chunk_scope": "passage", "tau": 0.5, "grow_max_span": None, "max_new_tokens": 4,
                      "attribution": False, "rerotation": "exact", "epic_k": 4, "relaxkv_context": 0.25}
INT_TAU = dict(selectors=("cacheblend",), budgets=(0.3,), tau=1, relaxkv_context=1)
INT_TAU_DICT = {"selectors": ["cacheblend"], "budgets": [0.3], "seed": 0, "check_layer": 1, "draft_k": 2,
                "patch_max_tokens": 64, "pool": "changed", "coin_draws": 5, "chunk_size": 64, "chunk_scope": "span",
                "tau": 1, "grow_max_span": 64, "max_new_tokens": 24, "attribution": True, "rerotation": "delta",
                "epic_k": None, "relaxkv_context": 1}
# A value other than the default for every flat key, and where it must land.
OTHER = {"selectors": ("none", "full"), "budgets": (0.4,), "seed": 11, "check_layer": 2, "draft_k": 5,
         "patch_max_tokens": 9, "pool": "all", "coin_draws": 3, "chunk_size": 8, "chunk_scope": "passage", "tau": 0.75,
         "grow_max_span": 12, "max_new_tokens": 6, "attribution": False, "rerotation": "exact", "epic_k": 2,
         "relaxkv_context": 0.5, "densedev_norm": "layer", "stop_at_newline": False}
HOLDER = {**{f.name: "signal_options" for f in fields(SignalOptions)},
          **{k: "unit_options" for k in ("chunk_size", "chunk_scope", "tau", "grow_max_span")}}


def items(d: dict) -> list:
    return list(d.items())  # compares the order too: the manifests keep it


def test_the_default_config_writes_todays_flat_dict():
    want = {**DEFAULT_DICT, "selectors": list(default_selectors(expensive=True))}  # the registry's default list
    assert items(DiagnoseConfig().to_dict()) == items(want)
    assert items(DiagnoseConfig().checked().to_dict()) == items(want)


@pytest.mark.parametrize("settings, checked, want", [
    (EVERY_KNOB, True, EVERY_KNOB_CHECKED),
    (INT_TAU, False, INT_TAU_DICT),
    (INT_TAU, True, {**INT_TAU_DICT, "tau": 1.0}),
])
def test_other_configs_write_the_flat_dict_they_wrote_before(settings, checked, want):
    config = DiagnoseConfig.of(**settings)
    config = config.checked() if checked else config
    assert items(config.to_dict()) == items(want)
    assert json.dumps(config.to_dict()) == json.dumps(want)


@pytest.mark.parametrize("data", [EVERY_KNOB_CHECKED, INT_TAU_DICT, {**DEFAULT_DICT, "selectors": ["none"]}])
def test_from_dict_reads_a_flat_dict_into_the_held_options_and_back(data):
    config = DiagnoseConfig.from_dict(json.loads(json.dumps(data)))
    assert isinstance(config.signal_options, SignalOptions) and isinstance(config.unit_options, UnitOptions)
    for key, value in data.items():
        holder = getattr(config, HOLDER[key]) if key in HOLDER else config
        assert getattr(holder, key) == (tuple(value) if isinstance(value, list) else value), key
    assert items(config.to_dict()) == items(data)


def test_from_dict_fills_missing_keys_with_defaults():
    config = DiagnoseConfig.from_dict({"selectors": ["none"], "draft_k": 4, "tau": 0.5})
    assert config == DiagnoseConfig(selectors=("none",), signal_options=SignalOptions(draft_k=4),
                                    unit_options=UnitOptions(tau=0.5))


@pytest.mark.parametrize("data, unknown", [
    ({"draft_k": 3, "bogus": 1}, "['bogus']"),
    ({"chunk_counting": "table8"}, "['chunk_counting']"),  # not a diagnose setting: refused, never dropped
    ({"signal_options": {"draft_k": 3}}, "['signal_options']"),  # the flat form only
])
def test_from_dict_refuses_unknown_keys_in_one_line(data, unknown):
    with pytest.raises(wb.WorkbenchError) as err:
        DiagnoseConfig.from_dict(data)
    assert str(err.value) == f"unknown diagnose settings {unknown}; known: {sorted(FLAT_KEYS)}"
    with pytest.raises(wb.WorkbenchError, match="must be a JSON object"):
        DiagnoseConfig.from_dict([1])


def test_the_flat_keys_are_every_field_of_the_config_and_its_options():
    own = {f.name for f in fields(DiagnoseConfig)} - {"signal_options", "unit_options"}
    unit = {f.name for f in fields(UnitOptions)} - {"chunk_counting"}  # refused in a diagnosis (see checked)
    assert sorted(FLAT_KEYS) == sorted(own | {f.name for f in fields(SignalOptions)} | unit)
    assert set(OTHER) == set(FLAT_KEYS)


@pytest.mark.parametrize("key", FLAT_KEYS)
def test_every_flat_key_lands_in_the_object_that_holds_it(key):
    value, default = OTHER[key], DiagnoseConfig()
    for config in (DiagnoseConfig.of(**{key: value}), default.with_(**{key: value})):
        holder = getattr(config, HOLDER[key]) if key in HOLDER else config
        assert getattr(holder, key) == value
        flat, before = config.to_dict(), default.to_dict()
        assert flat[key] == (list(value) if isinstance(value, tuple) else value)
        assert {k: v for k, v in flat.items() if k != key} == {k: v for k, v in before.items() if k != key}
        assert config.checked().to_dict()[key] == flat[key]  # a valid value, kept by checked


def test_with_replaces_held_options_whole_then_applies_flat_names():
    config = DiagnoseConfig().with_(signal_options=SignalOptions(draft_k=7, seed=3), seed=4, tau=0.5)
    assert config.signal_options == SignalOptions(draft_k=7, seed=4)
    assert config.unit_options == UnitOptions(tau=0.5)
    with pytest.raises(wb.WorkbenchError, match=r"unknown diagnose settings \['drafts'\]"):
        DiagnoseConfig().with_(drafts=3)
    with pytest.raises(TypeError):
        DiagnoseConfig(draft_k=3)  # the constructor takes the held options; flat names go through `of`


@pytest.mark.parametrize("options, message", [
    (SignalOptions(seed=-1), "seed must be an integer from 0"),
    (SignalOptions(check_layer=-1), "check_layer must be an integer >= 0, got -1"),
    (SignalOptions(draft_k=0), "draft_k must be an integer >= 1, got 0"),
    (SignalOptions(draft_k=True), "draft_k must be an integer >= 1, got True"),
    (SignalOptions(patch_max_tokens=2.0), "patch_max_tokens must be an integer >= 1, got 2.0"),
    (SignalOptions(epic_k=0), "epic_k must be an integer >= 1, got 0"),
    (SignalOptions(relaxkv_context=1.5), "relaxkv_context must be a fraction in"),
    (SignalOptions(relaxkv_context=True), "relaxkv_context must be a fraction in"),
    (UnitOptions(chunk_size=0), "chunk_size must be an integer >= 1, got 0"),
    (UnitOptions(grow_max_span=0), "grow_max_span must be an integer >= 1, got 0"),
    (UnitOptions(chunk_scope="doc"), "chunk_scope must be one of span, passage, got 'doc'"),
    (UnitOptions(chunk_counting="all"), "chunk_counting must be one of algorithm1, table8, got 'all'"),
    (UnitOptions(tau=0.0), r"tau must be in \(0, 1\], got 0.0"),
    (UnitOptions(tau="x"), r"tau must be a number in \(0, 1\], got 'x'"),
])
def test_each_option_class_checks_its_knobs_and_the_config_asks_them(options, message):
    with pytest.raises(wb.WorkbenchError, match=message):
        options.checked()
    held = "signal_options" if isinstance(options, SignalOptions) else "unit_options"
    with pytest.raises(wb.WorkbenchError, match=message):
        DiagnoseConfig(selectors=("none",), **{held: options}).checked()


def test_the_config_refuses_what_a_diagnosis_cannot_hold():
    with pytest.raises(wb.WorkbenchError, match="chunk_counting must be 'algorithm1' in a diagnosis"):
        DiagnoseConfig(unit_options=UnitOptions(chunk_counting="table8")).checked()
    with pytest.raises(wb.WorkbenchError, match="signal_options must be a SignalOptions, got dict"):
        DiagnoseConfig(signal_options={"draft_k": 3}).checked()
    assert UnitOptions(tau=1).checked().tau == 1.0 and isinstance(UnitOptions(tau=1).checked().tau, float)
    assert SignalOptions().checked() == SignalOptions() and UnitOptions().checked() == UnitOptions()


def test_the_cli_settings_reach_the_held_options():
    from workbench.cli.diagnose import diagnose_config
    from workbench.cli.run import sweep_config

    knobs = ["--seed", "4", "--pool", "all", "--coin-draws", "2", "--chunk-scope", "passage", "--grow-max-span", "0",
             "--rerotation", "exact", "--epic-k", "3", "--relaxkv-context", "0.5", "--max-new-tokens", "5",
             "--selectors", "none,random,epic,relaxkv", "--budgets", "0.3"]  # each knob beside its selector
    run = sweep_config(build_parser().parse_args(["run", "--n", "2", "--out", "x", *knobs])).diagnose
    one = diagnose_config(build_parser().parse_args(["diagnose", *knobs]))
    want = {"selectors": ["none", "random", "epic", "relaxkv"], "budgets": [0.3], "seed": 4, "pool": "all", "coin_draws": 2,
            "chunk_scope": "passage", "grow_max_span": None, "rerotation": "exact", "epic_k": 3,
            "relaxkv_context": 0.5, "max_new_tokens": 5}
    for config in (run, one):
        assert {k: config.to_dict()[k] for k in want} == want
        assert config.signal_options == SignalOptions(seed=4, epic_k=3, relaxkv_context=0.5)
        assert config.unit_options == UnitOptions(chunk_scope="passage", grow_max_span=None)


def test_diagnose_routes_flat_keyword_overrides_into_the_held_options():
    config = DiagnoseConfig(selectors=("none", "bcr:chunk"), budgets=(0.3,), attribution=False, max_new_tokens=2)
    d = diagnose(tiny_model("llama"), small_example(), config, progress=False, draft_k=3, chunk_size=4, seed=5,
                 coin_draws=1)
    assert d.config.signal_options == SignalOptions(draft_k=3, seed=5)
    assert d.config.unit_options == UnitOptions(chunk_size=4)
    assert d.config.coin_draws == 1
    chunk = d.selections[d.selections["unit"] == "chunk"].iloc[0]
    assert 0 < chunk["n_recomputed"] <= 4 * chunk["n_units"]  # 4-row chunks (64-row ones skip this short pool)
