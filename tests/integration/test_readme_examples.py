"""Every ```python block of README.md runs as written, in order, in one namespace (each block goes on
from the names the ones before it define), on the embedded model (slow tier)."""

import linecache
import re
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_readme_python_example_runs(monkeypatch, tmp_path, smol):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 3, "a block was added or removed: say here what it must leave behind"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for i, block in enumerate(blocks):
        name = f"README.md python block {i + 1}"
        linecache.cache[name] = (len(block), None, block.splitlines(True), name)  # nnsight reads a with-block's source
        exec(compile(block, name, "exec"), scope)
        if i == 0:  # the API tour
            d = scope["d"]
            assert set(d.outcomes["selector"]) == {"cadence", "bcr:grow", "random"}
            assert (tmp_path / "runs" / "one-example" / "diagnosis.json").is_file()
            assert scope["fixed"].n_positions == scope["ctx"].spliced.n_positions
        if i == 1:  # the nnsight trace of the question over a repaired cache
            n_suffix = len(scope["ctx"].suffix_ids)
            assert scope["h"].shape[:2] == (1, n_suffix) and scope["logits"].shape[:2] == (1, n_suffix)
        if i == 2:  # the hook tour: run_with_cache, an ablated repair, a hooked diagnosis
            logits, cache = scope["logits"], scope["cache"]
            assert logits.shape[:2] == (1, len(scope["ctx"].suffix_ids))
            assert cache["blocks.0.hook_resid_post"].shape[1] == 10 + len(scope["ctx"].suffix_ids)
            fixed = scope["ctx"].repair(scope["rows"])
            assert not torch.equal(scope["ablated"].keys, fixed.keys)  # the ablation moved the repair
            assert "layer_effects" in scope["d"].tables
