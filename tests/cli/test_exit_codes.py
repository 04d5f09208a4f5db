"""Exit status of every command: 2 only for a wrong command line, 1 for input that does not do.

The table is documented in README.md and docs/convert.md: 2 means the command line itself is
wrong (an unknown option, a value out of range, options that contradict each other), known
before any file is read; 1 means a file or what it holds (missing, unreadable, an option
that does not fit it, such as more parts than frames, or an existing output).
"""

import os

import pytest
from click.testing import CliRunner

from h5mdtool.cli.main import cli


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("exit-codes")
    junk = directory / "junk.h5md"
    junk.write_text("not HDF5")
    report = directory / "junk.json"
    report.write_text("{not json")
    return {"dir": directory, "junk": str(junk), "missing": str(directory / "missing.xtc"), "report": str(report)}


def usage_cases(files, adk, out):
    return {
        "convert unknown option": ["convert", adk[1], "-o", out, "--no-such-option"],
        "convert value out of range": ["convert", adk[1], "-o", out, "--chunk-frames", "0"],
        "convert contradicting options": ["convert", adk[1], "-o", out, "--contiguous", "--compression", "gzip"],
        "convert without an output": ["convert", adk[1]],
        "split nparts not a number": ["split", adk[1], "--nparts", "x", "-o", out],
        "split layout option with same parts": ["split", adk[1], "--nparts", "2", "-o", out, "--compression", "gzip"],
        "validate unknown profile": ["validate", files["junk"], "--profile", "bogus"],
        "info without a file": ["info"],
        "topology without an output": ["topology", files["junk"]],
        "bench rmsd without a topology": ["bench", "rmsd", adk[1]],
        "bench rmsd bad block size": ["bench", "rmsd", adk[1], "-t", adk[0], "--block-frames", "0"],
    }


def input_cases(files, adk, out):
    return {
        "convert missing input": ["convert", files["missing"], "-o", out],
        "convert select without topology": ["convert", adk[1], "-o", out, "-s", "name CA"],
        "convert frames beyond the input": ["convert", adk[1], "-o", out, "--start", "500"],
        "split more parts than frames": ["split", adk[1], "--nparts", "500", "-o", out],
        "validate unreadable file": ["validate", files["junk"]],
        "validate missing file": ["validate", files["missing"]],
        "info unreadable file": ["info", files["junk"]],
        "info missing file": ["info", files["missing"]],
        "topology of an unreadable file": ["topology", files["junk"], "-o", out + ".pdb"],
        "bench rmsd missing input": ["bench", "rmsd", files["missing"], "-t", adk[0]],
        "bench rmsd reference frame beyond the input": ["bench", "rmsd", adk[1], "-t", adk[0], "--ref-frame", "500"],
        "bench report unreadable report": ["bench", "report", files["report"]],
    }


@pytest.mark.parametrize("kind, expected", [("usage", 2), ("input", 1)])
def test_exit_status_of_every_command(files, adk, kind, expected):
    out = str(files["dir"] / "out")
    cases = (usage_cases if kind == "usage" else input_cases)(files, adk, out)
    wrong = {}
    for name, args in cases.items():
        result = CliRunner().invoke(cli, args)
        lines = result.output.splitlines()
        if result.exit_code != expected or len(lines) != 1 or not lines[0].startswith("error: "):
            wrong[name] = (result.exit_code, result.output[-300:])
    assert not wrong, wrong
    commands = {tuple(args[:2]) if args[0] == "bench" else args[0] for args in cases.values()}
    assert commands >= {"convert", "split", "validate", "info", "topology", ("bench", "rmsd")}


@pytest.mark.parametrize("args, names", [
    (["convert", "{xtc}", "-o", "{dir}/md.xtc"], ".xtc names XTC, but the output is H5MD; name it e.g. md.h5md"),
    (["convert", "{xtc}", "-o", "{dir}/md.TRR"], ".trr names TRR"),
    (["convert", "{xtc}", "-o", "{dir}/md.pdb"], ".pdb names PDB"),
    (["split", "{xtc}", "--nparts", "2", "-o", "{dir}/parts.xtc"], "give a directory name, e.g. parts-parts/"),
    (["topology", "{xtc}", "-o", "{dir}/md.gro", "--output-format", "pdb"], ".gro names GRO, but the output is PDB"),
])
def test_output_named_like_another_format_is_refused(tmp_path, solvated, args, names):
    """convert -o md.xtc once wrote an H5MD file named md.xtc, with exit status 0."""
    args = [arg.format(xtc=solvated["XTC"], dir=tmp_path) for arg in args]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and result.output.count("\n") == 1 and names in result.output, result.output
    assert os.listdir(tmp_path) == []


def test_output_extensions_of_h5md_and_unknown_ones_are_accepted(tmp_path, solvated):
    for name in ("md.h5", "md.hdf5", "md.H5MD", "md"):
        result = CliRunner().invoke(cli, ["convert", solvated["XTC"], "-o", str(tmp_path / name), "--stop", "1"])
        assert result.exit_code == 0, result.output
