"""What GROMACS users type out of habit, and one name per meaning for --format.

gmx's ``-f`` is the input and ``-s`` the run input (.tpr); in h5mdtool ``-f`` once meant
``--force`` (a habit overwrote files) and ``-s`` is the atom selection. ``--format`` names
the input format in every command; the parts' and the topology's formats are
``--output-format``. Older spellings still work, with a deprecation note.
"""

import json
import os

import MDAnalysis as mda
import numpy as np
import pytest
from click.testing import CliRunner

from h5mdtool import convert
from h5mdtool.cli.main import cli


def invoke(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def one_error(result, code=2):
    lines = result.output.splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def converted(tmp_path_factory, solvated):
    path = str(tmp_path_factory.mktemp("habits") / "md.h5md")
    convert(solvated["XTC"], path, topology=solvated["topology"], progress=False)
    return path


@pytest.mark.parametrize("command", [["convert", "{xtc}", "-o", "{out}"], ["split", "{xtc}", "--nparts", "2", "-o", "{out}"],
                                     ["topology", "{h5md}", "-o", "{out}.pdb"], ["bench", "rmsd", "{h5md}", "-t", "{gro}"]])
def test_dash_f_never_forces(tmp_path, solvated, converted, command):
    """-f used to mean --force: 'convert -f md.xtc -o md.h5md' replaced md.h5md."""
    existing = tmp_path / "existing"
    existing.write_bytes(b"keep me")
    args = [a.format(xtc=solvated["XTC"], out=existing, h5md=converted, gro=solvated["topology"]) for a in command]
    line = one_error(invoke(*args, "-f"))
    assert "-f is not an option of h5mdtool (gmx's input file)" in line and "--force" in line
    assert existing.read_bytes() == b"keep me"


def test_gmx_input_flag_gets_the_hint(tmp_path, solvated):
    line = one_error(invoke("convert", "-f", solvated["XTC"], "-o", tmp_path / "md.h5md"))
    assert "give the input files as arguments, e.g. 'h5mdtool convert md.xtc -o md.h5md'" in line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("extension", [".tpr", ".gro", ".pdb", ".psf", ".TPR"])
@pytest.mark.parametrize("command", ["convert", "split", "bench"])
def test_topology_file_given_to_dash_s(tmp_path, solvated, command, extension):
    """gmx's -s is the run input: 'convert md.xtc -s md.tpr' said only '--select needs --topology'."""
    topology = f"md{extension}"
    args = {"convert": ["convert", solvated["XTC"], "-s", topology, "-o", tmp_path / "o.h5md"],
            "split": ["split", solvated["XTC"], "-s", topology, "--nparts", "2", "-o", tmp_path / "parts"],
            "bench": ["bench", "rmsd", solvated["XTC"], "-s", topology, "-t", solvated["topology"]]}[command]
    line = one_error(invoke(*args))
    assert f"did you mean -t/--topology {topology}" in line
    assert ("--reference" in line) == (command == "bench")
    assert os.listdir(tmp_path) == []


def test_selections_and_groups_still_reach_dash_s(tmp_path, solvated):
    out = tmp_path / "o.h5md"
    result = invoke("convert", solvated["XTC"], "-t", solvated["topology"], "-s", "name CA", "-o", out, "--stop", "1")
    assert result.exit_code == 0, result.output
    expected = mda.Universe(solvated["topology"]).select_atoms("name CA").n_atoms
    assert json.loads(invoke("info", out, "--json").stdout)["particle_groups"][0]["n_atoms"] == expected


def test_validate_against_before_the_file_takes_one_value(converted, solvated):
    """'validate --against md.xtc file.h5md' swallowed the file: Missing argument 'FILE...'."""
    result = invoke("validate", "--against", solvated["XTC"], converted)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{converted}: ") and "10 frames equal to the source" in result.output
    assert result.stderr == ""


def test_validate_against_repeated_and_older_spelling(tmp_path, adk_segments):
    whole = str(tmp_path / "whole.h5md")
    convert(adk_segments["whole"], whole, progress=False)
    repeated = [arg for part in adk_segments["parts"] for arg in ("--against", part)]
    result = invoke("validate", whole, *repeated, "--json")
    assert result.exit_code == 0 and result.stderr == "", result.output
    assert json.loads(result.stdout)["against"] == adk_segments["parts"]
    older = invoke("validate", whole, "--against", *adk_segments["parts"], "--json")
    assert older.exit_code == 0 and json.loads(older.stdout)["against"] == adk_segments["parts"]
    assert older.stderr.startswith("note: one --against for several segments") and older.stderr.count("\n") == 1


def test_split_format_names_the_input_and_output_format_the_parts(tmp_path, solvated):
    new = invoke("split", solvated["XTC"], "--nparts", "2", "-o", tmp_path / "new", "--format", "XTC",
                 "--output-format", "h5md", "--json")
    assert new.exit_code == 0 and new.stderr == "", new.output
    assert json.loads(new.stdout)["format"] == "H5MD"
    older = invoke("split", solvated["XTC"], "--nparts", "2", "-o", tmp_path / "old", "--format", "h5md",
                   "--input-format", "XTC", "--json")
    assert older.exit_code == 0 and json.loads(older.stdout)["format"] == "H5MD", older.output
    notes = older.stderr.splitlines()
    assert len(notes) == 2 and all(line.startswith("note: ") and "deprecated" in line for line in notes)
    assert "use --output-format h5md" in notes[0] and "use --format" in notes[1]
    for name in ("new", "old"):
        parts = sorted(p for p in os.listdir(tmp_path / name) if p.endswith(".h5md"))
        frames = [mda.Universe(solvated["topology"], str(tmp_path / name / p)).trajectory.n_frames for p in parts]
        assert frames == [5, 5]
    assert "'same' is a format of the parts" in one_error(
        invoke("split", solvated["XTC"], "--nparts", "2", "-o", tmp_path / "x", "--format", "same",
               "--output-format", "same"))


def test_topology_output_format(tmp_path, converted):
    result = invoke("topology", converted, "-o", tmp_path / "a.txt", "--output-format", "gro")
    assert result.exit_code == 0 and result.stderr == "", result.output
    older = invoke("topology", converted, "-o", tmp_path / "b.txt", "--format", "gro")
    assert older.exit_code == 0 and older.stderr.startswith("note: topology --format is deprecated"), older.output
    for name in ("a.txt", "b.txt"):
        universe = mda.Universe(str(tmp_path / name), format="GRO")
        reference = mda.Universe(converted)
        assert len(universe.atoms) == len(reference.atoms)
        np.testing.assert_allclose(universe.atoms.positions, reference.atoms.positions, atol=0.01)
