"""Coordinate formats h5mdtool does not read (multi-model PDB and GRO, XYZ, AMBER ASCII) are
refused with one line naming the format and the way out, never as "unknown"."""

import os

import pytest

from conftest import run_h5mdtool
from h5mdtool import convert
from h5mdtool.formats.registry import detect_format
from h5mdtool.parallel.errors import InputError


@pytest.mark.parametrize("name,expected", [
    ("PDB_multiframe", "PDB"), ("GRO", "GRO"), ("XYZ", "XYZ"), ("TRJ", "AMBER ASCII trajectory"),
])
def test_unread_formats_are_named(tmp_path, name, expected):
    import MDAnalysisTests.datafiles as datafiles

    source = getattr(datafiles, name)
    with pytest.raises(InputError, match=f"does not read {expected}") as refused:
        convert(source, str(tmp_path / "out.h5md"), progress=False)
    assert "write the trajectory as XTC or DCD first" in str(refused.value)
    assert os.listdir(tmp_path) == []


def test_read_extensions_are_unchanged():
    assert detect_format("md.xtc") == "XTC" and detect_format("md.pdb.xtc") == "XTC"
    with pytest.raises(InputError, match="unknown trajectory extension '.nc4'"):
        detect_format("md.nc4")


def test_command_line_refuses_a_multi_model_pdb_in_one_line(tmp_path):
    from MDAnalysisTests.datafiles import PDB_multiframe

    done = run_h5mdtool(["convert", PDB_multiframe, "-o", str(tmp_path / "out.h5md")])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "does not read PDB files" in lines[0]
    assert not (tmp_path / "out.h5md").exists()
