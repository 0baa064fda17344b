"""The app's face of the workbench: runs listed and opened with typed manifests, a Live diagnosis
against `diagnose` itself, and clear errors (tiny model, seconds)."""

import pytest

from conftest import small_example
from workbench import app_api
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.runstore import check_out

CONFIG = DiagnoseConfig(selectors=("none", "random"), budgets=(0.5,), max_new_tokens=3, attribution=False)


def test_live_diagnose_is_diagnose_with_layer_effects_and_no_caches(tiny_llama):
    example = small_example()
    stages = []
    live = app_api.live_diagnose(tiny_llama, example, CONFIG,
                                 progress_for=lambda ctx: lambda stage, done, total: stages.append((stage, ctx)))
    direct = diagnose(tiny_llama, example, CONFIG, progress=False, layer_effects=True)
    assert live.ctx is None and "layer_effects" in live.tables
    assert live.outcomes[["selector", "answer"]].equals(direct.outcomes[["selector", "answer"]])
    assert {stage for stage, _ in stages} >= {"signals", "repairs"}
    assert all(ctx.layout.n_tokens == app_api.context_length(tiny_llama, example) for _, ctx in stages)


def test_runs_are_listed_and_opened_with_typed_manifests(tiny_llama, tmp_path):
    d = diagnose(tiny_llama, small_example(example_id="q7"), CONFIG, progress=False)
    app_api.save_diagnosis(check_out(tmp_path / "saved", kind="diagnosis"), d, tiny_llama)
    [run] = app_api.list_runs(tmp_path)
    assert isinstance(run.manifest, app_api.Manifest) and run.manifest.kind == "diagnosis" and run.ok
    assert run.manifest.selectors == ("none", "random") and run.manifest.model_name == tiny_llama.name
    opened = app_api.open_run(run.path, "diagnosis")
    assert opened.example_id == "q7" and opened.outcomes["n_recomputed"].tolist() == d.outcomes["n_recomputed"].tolist()
    assert app_api.list_runs(tmp_path, kinds=("sweep",)) == []
    with pytest.raises(app_api.WorkbenchError, match="is a 'diagnosis' run, not a 'sweep' run"):
        app_api.open_run(run.path, "sweep")
    with pytest.raises(app_api.WorkbenchError, match="not 'report'"):
        app_api.open_run(run.path, "report")


def test_the_choices_come_from_the_registries():
    from workbench.models import EMBEDDED_MODELS
    from workbench.selectors import selector_names
    from workbench.tasks import dataset_kinds

    assert app_api.model_choices() == tuple(EMBEDDED_MODELS)
    assert app_api.selector_choices() == list(selector_names()) and "bcr" in app_api.selector_choices()
    assert app_api.dataset_choices() == list(dataset_kinds()) and "synthetic" in app_api.dataset_choices()
    assert app_api.selector_info("bcr").name == "bcr"
    assert app_api.make_command("sweep").startswith("kvwb run") and app_api.make_command(None) == "kvwb ..."
