"""The kvwb command line: help for every subcommand and clear errors for bad input."""

import subprocess
import sys

import pytest

from workbench import cli


def test_every_subcommand_has_help(capsys):
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    assert {"prepare", "answer", "bench"} <= set(subcommands)
    for name in subcommands:
        with pytest.raises(SystemExit) as stop:
            cli.main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert "usage: kvwb " + name in out
        for action in subcommands[name]._actions:
            assert action.help, f"kvwb {name}: option {action.dest} has no help"


def test_bad_input_is_one_line_and_exit_code_2(capsys):
    assert cli.main(["answer", "--example", "nosuchset#1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvwb: error: ") and "Traceback" not in err
    assert cli.main(["bench", "repair", "--model", "no-such-model"]) == 2


def test_console_script_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "answer" in out.stdout
