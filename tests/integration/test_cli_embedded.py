"""`kvwb answer` end to end on the embedded model."""

import pytest

from workbench import cli

pytestmark = pytest.mark.slow


def test_kvwb_answer_prints_the_three_answers_with_timings(capsys, smol):
    assert cli.main(["answer", "--example", "synthetic#1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for label in ("dense", "spliced", "repaired (all reused rows)", "timings:", "layer-0 splice vs dense"):
        assert label in out
