"""Files whose names are not UTF-8 (bytes Python carries as lone surrogates, PEP 383).

Linux allows any bytes but ``/`` and NUL in a name; MDAnalysis's decoders, pytng and gsd
encode names as UTF-8 and refused such a file (convert said ``cannot read XTC frame 0``), and
writing the command line into the provenance attribute raised ``UnicodeEncodeError``. Every
format is read here under such a name and compared with MDAnalysis reading the original;
serially and under mpirun (-n 2, -n 3).
"""

import os
import shutil

import h5py
import numpy as np
import pytest
from MDAnalysisTests import datafiles as data

from h5mdtool import bench_rmsd, convert, split
from h5mdtool.formats.base import LibraryName
from h5mdtool.h5md.provenance import printable

from conftest import run_h5mdtool
from formats_oracle import compare_output, listing, source_frames

#: id -> (file, MDAnalysis format, h5mdtool --format or None)
SOURCES = {
    "XTC": (data.XTC, "XTC", None),
    "TRR": (data.TRR, "TRR", None),
    "DCD": (data.DCD, "DCD", None),
    "NCDF": (data.TRJ_NCBOX, "NCDF", None),
    "TNG": (data.TNG_traj_vels_forces, "TNG", None),
    "GSD": (data.GSD, "GSD", None),
    "LAMMPSDUMP": (data.LAMMPSDUMP_image_vf, "LAMMPSDUMP", None),
    "LAMMPS": (data.LAMMPSdcd2, "LAMMPS", "LAMMPS"),
}


def undecodable(directory, stem, extension):
    """A path in *directory* whose name holds the bytes 0xff and 0xfe (not UTF-8)."""
    return os.path.join(directory, os.fsdecode(stem.encode() + b"\xff\xfe") + extension)


def _steps(fmt, path):
    if fmt in ("NCDF",):
        return lambda ts, frame: frame
    if fmt in ("DCD", "LAMMPS"):
        from MDAnalysis.lib.formats.libdcd import DCDFile

        with DCDFile(path) as handle:
            header = handle.header
        return lambda ts, frame: header["istart"] + frame * header["nsavc"]
    return None


def test_library_name_aliases_only_names_that_are_not_utf8(tmp_path):
    plain = tmp_path / "ä.xtc"
    plain.write_bytes(b"x")
    with LibraryName(str(plain)) as name:
        assert name == str(plain)
    odd = undecodable(str(tmp_path), "b", ".xtc")
    with open(odd, "wb") as handle:
        handle.write(b"bytes")
    alias = LibraryName(odd)
    assert alias.name.startswith("/proc/self/fd/")
    with open(alias.name, "rb") as handle:
        assert handle.read() == b"bytes"
    alias.close()
    assert alias.fd is None


def test_printable_shows_the_bytes_as_escapes():
    assert printable(os.fsdecode(b"b\xff.xtc")) == "b\\xff.xtc"
    assert printable("ä.xtc") == "ä.xtc"
    assert printable("\ud800") == "\\ud800"  # a surrogate no file name gives


@pytest.mark.mpi
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_convert_reads_any_file_name(comm, shared_tmp, source):
    original, mda_format, fmt = SOURCES[source]
    sources = os.path.join(shared_tmp, "sources")
    path = undecodable(sources, "in", os.path.splitext(original)[1])
    output = undecodable(shared_tmp, "out", ".h5md")
    if comm.rank == 0:
        os.mkdir(sources)
        shutil.copyfile(original, path)
    comm.Barrier()
    before = listing(path)
    summary = convert(path, output, comm=comm, format=fmt, progress=False)
    comm.Barrier()
    assert listing(path) == before
    if comm.rank == 0:
        frames = source_frames(original, mda_format, _steps(source, original))
        assert summary["n_frames"] == len(frames)
        compare_output(output, frames)
        assert sorted(os.listdir(shared_tmp)) == sorted(["sources", os.path.basename(output)])  # no temporary
    comm.Barrier()


@pytest.mark.mpi
def test_split_and_both_bench_engines_read_any_file_name(comm, shared_tmp):
    """Parts in a directory whose name is not UTF-8, read back by MDAnalysis (``--engine
    frames``) and by h5mdtool's readers: the RMSDs of the original XTC."""
    path = undecodable(shared_tmp, "in", ".xtc")
    topology = undecodable(shared_tmp, "top", ".psf")
    parts = undecodable(shared_tmp, "parts", "")
    if comm.rank == 0:
        shutil.copyfile(data.XTC, path)
        shutil.copyfile(data.GRO, topology[:-4] + ".gro")
    comm.Barrier()
    topology = topology[:-4] + ".gro"
    split(path, parts, 3, comm=comm, progress=False)
    expected = bench_rmsd(data.XTC, data.GRO, comm=comm)
    for inputs in (path, parts):
        for engine in ("blocks", "frames"):
            result = bench_rmsd(inputs, topology, comm=comm, engine=engine)
            if comm.rank == 0:
                np.testing.assert_allclose(result["rmsd"], expected["rmsd"], rtol=0, atol=1e-4)
                assert len(result["rmsd"]) == 10
    comm.Barrier()


def test_command_line_names_every_file_and_records_them_readably(tmp_path):
    path = undecodable(str(tmp_path), "in", ".xtc")
    output = undecodable(str(tmp_path), "out", ".h5md")
    shutil.copyfile(data.XTC, path)
    result = run_h5mdtool(["convert", path, "-o", output, "--no-progress"], errors="backslashreplace")
    assert result.returncode == 0, result.stderr
    with h5py.File(output, "r") as handle:
        command = handle["parameters/h5mdtool"].attrs["command"]
    assert "in\\xff\\xfe.xtc" in command and "out\\xff\\xfe.h5md" in command
    for args in (["info", output], ["validate", output, "--against", path]):
        result = run_h5mdtool(args, errors="backslashreplace")
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("source", ["XTC", "DCD", "TNG", "GSD", "LAMMPSDUMP"])
def test_decoding_errors_name_the_format(tmp_path, source):
    """A reader's own attribute for the name it opens once hid the format's name: messages
    read ``cannot read <h5mdtool.formats.base.LibraryName object at 0x...> frame 0``."""
    from h5mdtool.formats import REGISTRY, scan

    original, _, fmt = SOURCES[source]
    path = undecodable(str(tmp_path), "in", os.path.splitext(original)[1])
    shutil.copyfile(original, path)
    segment = scan([path], format=fmt).segments[0]
    reader = REGISTRY[segment.format](segment)
    try:
        message = str(reader.error(1, OSError("boom")))
    finally:
        reader.close()
    assert message == f"{path}: cannot read {segment.format} frame 1 (boom)"


def test_an_xtc_cut_short_after_its_scan_names_format_and_frame(tmp_path):
    from h5mdtool.formats import TrajectoryReader, scan

    path = str(tmp_path / "in.xtc")
    shutil.copyfile(data.XTC, path)
    index = scan([path])
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)
    with TrajectoryReader(index) as reader, pytest.raises(Exception) as caught:
        reader.read(np.arange(index.n_frames), reader.new_block(index.n_frames))
    assert f"{path}: cannot read XTC frame " in str(caught.value)
