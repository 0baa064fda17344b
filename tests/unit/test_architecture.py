"""The architecture as tests: the import contracts of pyproject.toml (import-linter), module
sizes, and one version number."""

import subprocess
import sys
import tomllib
from pathlib import Path

import workbench

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def test_import_contracts_are_kept():
    """`lint-imports` checks the layers (nothing imports upward), that plots read no files,
    that a record never imports its renderer, and that no package's modules import in a cycle."""
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" in result.stdout and " 0 broken" in result.stdout


APP_READS = {"app_api", "plots"}  # what of the workbench app/ may import (docs/ARCHITECTURE.md)


def test_the_app_contract_forbids_every_other_module_of_the_workbench():
    """The import-linter contract lists modules; one added to the workbench later must join it."""
    import pkgutil

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [app] = [c for c in contracts if c.get("source_modules") == ["app"]]
    modules = {f"workbench.{m.name}" for m in pkgutil.iter_modules(workbench.__path__)}
    assert set(app["forbidden_modules"]) == modules - {f"workbench.{m}" for m in APP_READS}


def test_every_module_of_the_workbench_has_a_layer():
    """A module in no layer escapes "nothing imports upward"; one added later must join a layer."""
    import pkgutil

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [layers] = [c for c in contracts if c["name"] == "Layers: nothing imports upward"]
    placed = {m.strip() for line in layers["layers"] for m in line.split("|")}
    modules = {f"workbench.{m.name}" for m in pkgutil.iter_modules(workbench.__path__)}
    assert modules - placed == set()


def test_the_app_imports_no_other_part_of_the_workbench():
    """What the contract cannot say: no `import workbench` (the whole package) in app/ either."""
    import ast

    found = []
    for path in ROOT.glob("app/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "workbench"]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "workbench":
                names = [node.module] if node.module != "workbench" else [f"workbench.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names
                      if name.split(".")[:2][-1] not in APP_READS]
    assert not found, found


def test_no_module_is_over_400_lines():
    """One idea per module: a file that grows past this is split by concern."""
    big = {str(p.relative_to(ROOT)): n for p in [*ROOT.glob("workbench/**/*.py"), *ROOT.glob("app/**/*.py")]
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_one_version_number():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert workbench.__version__ == project["version"]


def test_the_architecture_docs_examples_run(tiny_llama, tmp_path):
    """The selector and signal of docs/ARCHITECTURE.md register and reach a Diagnosis; its reuse
    method registers and serves a pipeline; its data set registers and loads."""
    import json
    import re

    import torch

    import workbench as wb
    from tests.conftest import small_example
    from workbench.diagnosis import diagnose
    from workbench.pipeline import METHODS, PipelineSpec, get_method, run_request
    from workbench.selectors import registry as selectors
    from workbench.signals import registry as signals
    from workbench.tasks import load_dataset, spec as datasets

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "ARCHITECTURE.md").read_text(), re.S)
    hook_example = [b for b in blocks if "run_with_cache" in b]
    assert len(blocks) == 6 and len(hook_example) == 1
    try:
        for block in blocks:
            if block not in hook_example:
                exec(compile(block, "ARCHITECTURE.md", "exec"), {})
        hooked = {"ctx": wb.build_context(tiny_llama, small_example())}  # the hook example runs on a context
        exec(compile(hook_example[0], "ARCHITECTURE.md", "exec"), hooked)
        n_rows = 10 + len(hooked["ctx"].suffix_ids)  # the repaired rows, then the question's
        assert hooked["pattern"].shape[:3] == (1, tiny_llama.adapter.n_heads, n_rows)
        assert hooked["resid"].shape[:3] == (tiny_llama.adapter.n_layers + 1, 1, n_rows)
        assert not torch.equal(hooked["patched"], hooked["logits"])  # the ablation moved the question's logits
        assert not torch.equal(hooked["ablated"].keys, hooked["fixed"].keys)  # the ablation moved the cache
        d = diagnose(tiny_llama, small_example(), selectors=("late-value-dev", "cadence-grad"), budgets=(0.5,),
                     progress=False)
        assert set(d.outcomes["selector"]) == {"late-value-dev", "cadence-grad"}
        assert d.token_signals.query("signal == 'late_grad_v'")["value"].notna().any()  # saliency was computed
        spec = PipelineSpec.fully_connected(2)
        method = get_method("kvcomm-leaf-only")
        result = run_request(tiny_llama, spec, small_example(), method.name, method.make_state(), max_new_tokens=2)
        assert [c.reused for c in result.calls] == [False, False]  # a fresh pool holds no anchor yet
        for name in ("qattn", "qattn-coin"):  # the served-repair example's two methods serve a pipeline
            method = get_method(name)
            result = run_request(tiny_llama, spec, small_example(), name, method.make_state(), max_new_tokens=2)
            assert [c.reused for c in result.calls] == [False, False]
        records = [{"id": "t1", "passages": ["A is B.", "B is C.", "C is D."], "question": "A?", "answers": ["D"]}]
        (tmp_path / "trivia.json").write_text(json.dumps(records))
        [example] = load_dataset(f"triviaqa:{tmp_path / 'trivia.json'}", max_passages=2)
        assert (example.id, list(example.passages), list(example.gold)) == ("t1", ["A is B.", "B is C."], ["D"])
    finally:
        selectors._REGISTRY.pop("late-value-dev", None)
        signals._REGISTRY.pop(("token", "late_grad_v"), None)
        for name in ("kvcomm-leaf-only", "qattn", "qattn-coin"):
            METHODS.pop(name, None)
        datasets._DATASETS.pop("triviaqa", None)
