"""convert equals MDAnalysis reading the source, for every format added in issue 14, on the
example files MDAnalysisTests ships; serially and under mpirun (-n 2, -n 3)."""

import os
import struct
import warnings

import numpy as np
import pytest
from MDAnalysisTests import datafiles as data

from h5mdtool import convert
from h5mdtool.formats import REGISTRY, detect_format, scan

from formats_oracle import compare_output, listing, source_frames


def _lammps_step(path):
    from MDAnalysis.lib.formats.libdcd import DCDFile

    with DCDFile(path) as handle:
        header = handle.header
    return lambda ts, frame: header["istart"] + frame * header["nsavc"]


def _trz_atoms(path):
    with open(path, "rb") as handle:
        return struct.unpack_from("<i", handle.read(116), 112)[0]


#: id -> (path, h5mdtool --format or None, MDAnalysis format, extra reader arguments, step rule)
SOURCES = {
    "NCDF-xvf-box": (data.TRJ_NCBOX, None, "NCDF", {}, lambda ts, frame: frame),
    "NCDF-double-forces": (data.PFncdf_Trj, None, "NCDF", {}, lambda ts, frame: frame),
    "NCDF-bala": (data.NCDF, None, "NCDF", {}, lambda ts, frame: frame),
    "NCDF-truncoct": (data.NCDFtruncoct, None, "NCDF", {}, lambda ts, frame: frame),
    "NCDF-no-time": (data.CPPTRAJ_TRAJ, None, "NCDF", {}, lambda ts, frame: frame),
    "LAMMPS-dcd": (data.LAMMPSdcd2, "LAMMPS", "LAMMPS", {}, "lammps"),
    "TNG-xvf": (data.TNG_traj_vels_forces, None, "TNG", {}, None),
    "TNG-positions": (data.TNG_traj, None, "TNG", {}, None),
    "TNG-tiny": (data.COORDINATES_TNG, None, "TNG", {}, None),
    "TRZ": (data.TRZ, None, "TRZ", {"n_atoms": "trz"}, lambda ts, frame: int(ts.data["frame"])),
    "GSD": (data.GSD, None, "GSD", {}, None),
    "GSD-bonds": (data.GSD_bonds, None, "GSD", {}, None),
    "LAMMPSDUMP-xvf": (data.LAMMPSDUMP_image_vf, None, "LAMMPSDUMP", {}, None),
    "LAMMPSDUMP-chain": (data.LAMMPSDUMP_chain1, None, "LAMMPSDUMP", {}, None),
    "LAMMPSDUMP-no-final-newline": (data.LAMMPSDUMP_allinfo, None, "LAMMPSDUMP", {}, None),
}


def oracle(source):
    path, _, mda_format, kwargs, step = SOURCES[source]
    kwargs = {key: (_trz_atoms(path) if value == "trz" else value) for key, value in kwargs.items()}
    if step == "lammps":
        step = _lammps_step(path)
    return source_frames(path, mda_format, step, **kwargs)


@pytest.mark.mpi
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_convert_equals_mdanalysis(comm, shared_tmp, source):
    path, fmt = SOURCES[source][:2]
    before = listing(path)
    output = os.path.join(shared_tmp, "out.h5md")
    summary = convert(path, output, comm=comm, format=fmt, progress=False)
    comm.Barrier()
    assert listing(path) == before  # no offset, lock or other file beside the input
    if comm.rank == 0:
        frames = oracle(source)
        assert summary["n_frames"] == len(frames)
        compare_output(output, frames)
    comm.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("source", ["NCDF-xvf-box", "TNG-xvf", "TRZ", "LAMMPSDUMP-xvf", "LAMMPS-dcd"])
def test_convert_selection_and_frame_slice_equal_mdanalysis(comm, shared_tmp, source):
    """Atoms 3, 5, ... and every second frame from 1: the same values MDAnalysis gives."""
    path, fmt = SOURCES[source][:2]
    n_atoms = scan([path], format=fmt).n_atoms
    picked = np.arange(3, n_atoms, 2)
    topology = os.path.join(shared_tmp, "atoms.pdb")
    if comm.rank == 0:
        import MDAnalysis as mda

        universe = mda.Universe.empty(n_atoms, trajectory=True)
        names = np.full(n_atoms, "Y")
        names[picked] = "X"
        universe.add_TopologyAttr("name", names)
        universe.add_TopologyAttr("resid", [1])
        universe.add_TopologyAttr("id", np.arange(1, n_atoms + 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # attributes a bare PDB leaves at their defaults
            universe.atoms.write(topology)
    comm.Barrier()
    output = os.path.join(shared_tmp, "picked.h5md")
    convert(path, output, comm=comm, format=fmt, progress=False, topology=topology, select="name X", start=1, step=2)
    comm.Barrier()
    if comm.rank == 0:
        frames = oracle(source)[1::2]
        for frame in frames:
            for name in ("positions", "velocities", "forces"):
                if name in frame:
                    frame[name] = frame[name][picked]
        compare_output(output, frames)
    comm.Barrier()


def test_registry_names_extensions_and_override(tmp_path):
    """Each new format is registered by name and extension; --format reads odd extensions."""
    assert {"NCDF", "TNG", "LAMMPS", "TRZ", "GSD", "LAMMPSDUMP"} <= set(REGISTRY)
    for extension, name in ((".nc", "NCDF"), (".ncdf", "NCDF"), (".tng", "TNG"), (".trz", "TRZ"),
                            (".gsd", "GSD"), (".lammpstrj", "LAMMPSDUMP"), (".dcd", "DCD")):
        assert detect_format(f"x{extension}") == name
    assert detect_format("x.dcd", "lammps") == "LAMMPS"
    odd = tmp_path / "trajectory.data"
    odd.write_bytes(open(data.TRJ_NCBOX, "rb").read())
    index = scan([str(odd)], format="ncdf")
    assert index.formats == ["NCDF"] and index.n_frames == 10


def test_cli_format_override_and_help(tmp_path):
    from click.testing import CliRunner

    from h5mdtool.cli.main import cli

    odd = tmp_path / "run.bin"
    odd.write_bytes(open(data.TRZ, "rb").read())
    result = CliRunner().invoke(cli, ["convert", str(odd), "-o", str(tmp_path / "out.h5md"), "--format", "TRZ",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "6 frames" in result.output
    result = CliRunner().invoke(cli, ["convert", "--help"])
    for name in ("NCDF (.nc .ncdf)", "TNG (.tng)", "LAMMPS (no extension", "TRZ (.trz)", "GSD (.gsd)"):
        assert name in " ".join(result.output.split()), name


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("case", ["ncdf-nan-late-frame", "tng-corrupt"])
def test_bad_frame_under_mpirun_stops_every_rank_with_one_line(tmp_path, ranks, case):
    """A NaN only the last rank decodes, or a file rank 0's scan refuses: one error line, exit 1."""
    from conftest import run_h5mdtool
    from scipy.io import netcdf_file

    if case == "ncdf-nan-late-frame":
        path = str(tmp_path / "nan.nc")
        open(path, "wb").write(open(data.TRJ_NCBOX, "rb").read())
        with netcdf_file(path, "a", mmap=False) as handle:
            handle.variables["coordinates"][9, 17, 2] = np.nan
        expected = [f"error: rank {ranks - 1}: ", "nan.nc: frame 9 holds non-finite positions (atom 17)"]
    else:
        path = str(tmp_path / "corrupt.tng")
        raw = bytearray(open(data.TNG_traj_vels_forces, "rb").read())
        raw[391597] ^= 0xFF
        open(path, "wb").write(raw)
        expected = ["corrupt.tng", "fails its MD5 check"]
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", path, "-o", str(output), "--compression", "gzip", "--chunk-frames", "1"], ranks=ranks, timeout=180)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("error:") == 1 and all(text in done.stderr for text in expected), done.stderr
    assert "Traceback" not in done.stderr
    assert not output.exists() and os.listdir(tmp_path) == [os.path.basename(path)]
