"""The help of every level of the command line is printed once under mpirun (rank 0 only).

:class:`h5mdtool.cli.main.RankZeroHelp` makes the other ranks end quietly; without it each rank
printed the whole help.
"""

import pytest

from conftest import run_h5mdtool


@pytest.mark.parametrize("args,codes,text", [
    ([], (0, 2), "Usage: h5mdtool [OPTIONS] COMMAND"),  # click >= 8.2 ends a bare group with 2
    (["--help"], (0,), "Usage: h5mdtool [OPTIONS] COMMAND"),
    (["--debug", "-h"], (0,), "Usage: h5mdtool [OPTIONS] COMMAND"),
    (["--version"], (0,), "h5mdtool, version"),
    (["convert", "--help"], (0,), "Usage: h5mdtool convert"),
    (["validate", "x.h5md", "--help"], (0,), "Usage: h5mdtool validate"),
    (["bench"], (0, 2), "Usage: h5mdtool bench [OPTIONS] COMMAND"),
    (["bench", "report", "--help"], (0,), "Usage: h5mdtool bench report"),
])
def test_help_printed_once_under_mpirun(args, codes, text):
    done = run_h5mdtool(args, ranks=3)
    output = done.stdout + done.stderr
    assert done.returncode in codes, output
    assert output.count(text) == 1, output
    assert not any(line.startswith("error:") for line in output.splitlines()), output


def test_help_printed_serially():
    done = run_h5mdtool(["bench", "--help"])
    assert done.returncode == 0
    assert done.stdout.count("Usage: h5mdtool bench") == 1


def test_usage_error_printed_once_under_mpirun():
    """Rank 0 prints the one line; no rank ends the job before it has (every rank starts MPI first)."""
    done = run_h5mdtool(["convert", "--no-such-option"], ranks=3)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--no-such-option" in errors[0], done.stderr
