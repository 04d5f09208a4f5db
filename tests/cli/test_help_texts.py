"""What the --help texts tell users where two commands use one option name differently."""

import re

import pytest
from click.testing import CliRunner

from h5mdtool.cli.main import cli


def _help(*command):
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=10000)
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


@pytest.mark.parametrize("command", [("convert",), ("split",)])
def test_convert_and_split_dt_say_bench_counts_from_zero(command):
    """--dt counts from the first frame kept (gmx trjconv) and says bench rmsd's differs."""
    text = _help(*command)
    assert "gmx trjconv -dt" in text and "bench rmsd --dt counts from 0 ps instead" in text


def test_bench_dt_says_convert_counts_from_the_first_frame():
    text = _help("bench", "rmsd")
    assert "counted from 0 ps" in text and "convert and split --dt count from the first frame kept instead" in text
