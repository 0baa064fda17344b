"""`make test`'s schedule (issue 47.19): two pytest-xdist workers, each test in a unit that runs whole
on one worker (a module; all of tests/app; one notebook), each worker one torch thread."""

from __future__ import annotations

import subprocess
from pathlib import Path

import conftest
from workbench.threads import available_cores

ROOT = Path(__file__).resolve().parents[2]


class _As:
    """The session's config, read as under `-n 2 --dist DIST`."""

    def __init__(self, config, dist: str):
        self._config, self._given = config, {"dist": dist, "tx": ["2*popen"]}

    def getvalue(self, name):
        return self._given[name] if name in self._given else self._config.getvalue(name)

    def __getattr__(self, name):
        return getattr(self._config, name)


def test_make_test_runs_two_xdist_workers_by_unit_in_collection_order():
    out = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    pytest_line = [line for line in out if " -m pytest" in line]
    assert len(pytest_line) == 1, out
    assert "-n 2 --dist loadscope --no-loadscope-reorder" in pytest_line[0]
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    assert any(line.startswith("pytest-xdist==") for line in lock) and any(line.startswith("execnet==") for line in lock)
    assert '"pytest-xdist>=' in (ROOT / "pyproject.toml").read_text()


def test_the_suites_units_are_a_module_all_of_the_app_and_one_notebook(request):
    assert conftest.pytest_xdist_make_scheduler(_As(request.config, "load"), None) is None  # only loadscope's units
    units = conftest.pytest_xdist_make_scheduler(_As(request.config, "loadscope"), None)._split_scope
    run = "tests/notebooks/test_notebooks.py::test_notebook_runs_top_to_bottom"
    assert units(f"{run}[08_answerable_tasks]") != units(f"{run}[06_multi_agent_reuse]")
    assert units(f"{run}[08_answerable_tasks]") == f"{run}[08_answerable_tasks]"
    assert units("tests/notebooks/test_notebooks.py::test_notebooks_carry_no_outputs") == \
        units("tests/notebooks/test_notebooks.py::test_committed_notebooks_match_their_builder")
    assert units("tests/app/test_browser.py::test_the_app_listens_on_localhost_only") == \
        units("tests/app/test_app.py::test_live_diagnoses_explores_and_saves") == "tests/app"
    assert units("tests/unit/test_palette.py::test_x[pair1]") == units("tests/unit/test_palette.py::test_y") == \
        "tests/unit/test_palette.py"
    assert units("tests/unit/test_palette.py::test_x") != units("tests/unit/test_seeds.py::test_x")


def test_a_worker_takes_its_share_of_the_cores():
    assert conftest.WORKER_THREADS == max(1, available_cores() // conftest.WORKERS)
    if conftest.WORKERS > 1:  # under `make test`; a plain pytest keeps torch's default for the slow tier
        assert conftest.DEFAULT_THREADS == conftest.WORKER_THREADS
