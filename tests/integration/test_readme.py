"""The README's Python tour runs as written on the embedded model (slow tier)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_api_tour_runs(monkeypatch, tmp_path, smol):
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert "wb.load_model" in block and "diagnose" in block
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    d = scope["d"]
    assert set(d.outcomes["selector"]) == {"cadence", "bcr:grow", "random"}
    assert (tmp_path / "runs" / "one-example" / "diagnosis.json").is_file()
