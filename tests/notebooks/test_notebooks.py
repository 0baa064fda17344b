"""Every notebook runs top to bottom (nbclient) on the embedded model in a small setting."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


def test_notebooks_carry_no_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, monkeypatch, tmp_path):
    monkeypatch.setenv("KVWB_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # progress bars render as widgets (ipywidgets is a dependency), not as a warning
    texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [t for t in texts if "IProgress not found" in t]


def test_committed_notebooks_match_their_builder(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS[0].parent / "build_notebooks.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    monkeypatch.setattr(builder, "HERE", tmp_path)
    for fresh in builder.build():
        committed = nbformat.read(NOTEBOOKS[0].parent / fresh.name, as_version=4)
        built = nbformat.read(fresh, as_version=4)
        assert [c.source for c in committed.cells] == [c.source for c in built.cells], fresh.name
