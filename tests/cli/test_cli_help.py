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


def test_the_command_table_holds_each_commands_own_line():
    """``h5mdtool --help`` lists the commands from a table, without importing them: each
    entry must be its command's module and the first paragraph of that command's help."""
    import importlib

    from h5mdtool.cli.main import COMMANDS

    for name, (module, text) in COMMANDS.items():
        command = importlib.import_module(f"h5mdtool.cli.{module}").command
        assert command.name == name
        assert command.help.split("\n\n")[0].strip() == text


def test_help_and_version_import_neither_numpy_nor_the_reading_stack():
    import subprocess
    import sys

    for option in ("--help", "--version"):
        code = ("import sys; from h5mdtool.cli.main import main\n"
                "try:\n    main([%r])\nexcept SystemExit:\n    pass\n"
                "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'h5py', 'mpi4py', 'MDAnalysis')"
                " or m.startswith('h5mdtool.formats')))" % option)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
