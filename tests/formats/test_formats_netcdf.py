"""AMBER NetCDF: files written by MDAnalysis's NCDFWriter and by scipy, scale factors, the
NetCDF-3 variants, and every way a file can be truncated or wrong."""

import os
import struct
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as data
from scipy.io import netcdf_file

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError
from h5mdtool.formats import TrajectoryReader, scan

from conftest import run_h5mdtool
from formats_oracle import compare_output, source_frames

TRAJ = "particles/trajectory"


def universe_with_motion(n_atoms=50, n_frames=6, seed=3):
    """An in-memory Universe with random positions, velocities, forces and boxes per frame."""
    rng = np.random.default_rng(seed)
    universe = mda.Universe.empty(n_atoms, trajectory=True, velocities=True, forces=True)
    frames = []
    for frame in range(n_frames):
        frames.append({
            "positions": rng.uniform(-40, 40, (n_atoms, 3)).astype(np.float32),
            "velocities": rng.uniform(-20, 20, (n_atoms, 3)).astype(np.float32),
            "forces": rng.uniform(-500, 500, (n_atoms, 3)).astype(np.float32),
            "dimensions": np.array([30 + frame, 31, 32, 90, 80 + frame, 70], np.float32),
        })
    return universe, frames


def write_with_mdanalysis(path, n_frames=6, **scales):
    """An AMBER NetCDF file written by MDAnalysis's NCDFWriter (through scipy here)."""
    from MDAnalysis.coordinates.TRJ import NCDFWriter

    universe, frames = universe_with_motion(n_frames=n_frames)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NCDFWriter(path, universe.atoms.n_atoms, velocities=True, forces=True, dt=2.5, **scales) as writer:
            for frame in frames:
                ts = universe.trajectory.ts
                ts.positions, ts.velocities, ts.forces = frame["positions"], frame["velocities"], frame["forces"]
                ts.dimensions = frame["dimensions"]
                writer.write(universe.atoms)


@pytest.mark.mpi
@pytest.mark.parametrize("scales", [{}, {"scale_velocities": 20.455, "scale_forces": 2.0, "scale_coordinates": 0.5,
                                         "scale_time": 3.0, "scale_cell_lengths": 4.0}],
                         ids=["AMBER-defaults", "scale-factors"])
def test_mdanalysis_written_file_equals_mdanalysis(comm, shared_tmp, scales):
    path = os.path.join(shared_tmp, "written.ncdf")
    if comm.rank == 0:
        write_with_mdanalysis(path, **scales)
    comm.Barrier()
    output = os.path.join(shared_tmp, "written.h5md")
    convert(path, output, comm=comm, progress=False, chunk_frames=2)
    comm.Barrier()
    if comm.rank == 0:
        with netcdf_file(path, mmap=False) as handle:  # the writer really stored scale factors
            stored = {name: getattr(variable, "scale_factor", None) for name, variable in handle.variables.items()}
        for key, value in scales.items():
            assert stored[key[len("scale_"):]] == value
        compare_output(output, source_frames(path, "NCDF", lambda ts, frame: frame))
    comm.Barrier()


def write_by_hand(path, n_frames=4, n_atoms=5, version=2, step=None, time=True, cell=True, coordinates="f",
                  units=None, conventions="AMBER", values=None):
    """An AMBER-convention NetCDF-3 file written with scipy (classic or 64-bit offset)."""
    rng = np.random.default_rng(7)
    xyz = rng.uniform(-10, 10, (n_frames, n_atoms, 3)) if values is None else values
    units = dict({"coordinates": "angstrom", "time": "picosecond", "cell_lengths": "angstrom",
                  "cell_angles": "degree"}, **(units or {}))
    with netcdf_file(path, "w", version=version) as handle:
        handle.Conventions = conventions
        handle.ConventionVersion = "1.0"
        handle.program, handle.programVersion = "h5mdtool tests", "1"
        handle.createDimension("frame", None)
        handle.createDimension("spatial", 3)
        handle.createDimension("atom", n_atoms)
        handle.createDimension("cell_spatial", 3)
        handle.createDimension("cell_angular", 3)
        variable = handle.createVariable("coordinates", coordinates, ("frame", "atom", "spatial"))
        variable.units = units["coordinates"]
        variable[:] = xyz
        if time:
            variable = handle.createVariable("time", "f", ("frame",))
            variable.units = units["time"]
            variable[:] = 0.5 * np.arange(n_frames) + 100
        if cell:
            lengths = handle.createVariable("cell_lengths", "d", ("frame", "cell_spatial"))
            lengths.units = units["cell_lengths"]
            lengths[:] = np.tile([20.0, 21.0, 22.0], (n_frames, 1))
            angles = handle.createVariable("cell_angles", "d", ("frame", "cell_angular"))
            angles.units = units["cell_angles"]
            angles[:] = np.tile([90.0, 90.0, 90.0], (n_frames, 1))
        if step is not None:
            variable = handle.createVariable("step", "i", ("frame",))
            variable[:] = step
    return xyz


def test_classic_netcdf_step_variable_and_double_coordinates(tmp_path):
    """CDF-1 (which MDAnalysis refuses) with a step variable and double coordinates: the written values."""
    path = str(tmp_path / "classic.nc")
    xyz = write_by_hand(path, version=1, step=[10, 20, 40, 80], coordinates="d")
    index = scan([path])
    assert index.dtype == "float64"
    np.testing.assert_array_equal(index.step, [10, 20, 40, 80])
    np.testing.assert_allclose(index.time, [100, 100.5, 101, 101.5])
    output = str(tmp_path / "classic.h5md")
    convert(path, output, progress=False)
    with h5py.File(output, "r") as handle:
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()], xyz / 10)  # exact: double in, double out
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/step"][()], [10, 20, 40, 80])
        edges = handle[f"{TRAJ}/box/edges/value"][()]
        np.testing.assert_allclose(edges[0], np.diag([2.0, 2.1, 2.2]), atol=1e-6)


def test_streaming_record_count_read_from_the_file_size(tmp_path):
    """numrecs 0xFFFFFFFF (streaming): the records are counted from the size, an incomplete one refused."""
    path = str(tmp_path / "stream.nc")
    xyz = write_by_hand(path)
    raw = bytearray(open(path, "rb").read())
    raw[4:8] = b"\xff\xff\xff\xff"
    open(path, "wb").write(raw)
    index = scan([path])
    assert index.n_frames == 4
    reader = TrajectoryReader(index)
    block = reader.read(np.arange(4), reader.new_block(4))
    np.testing.assert_allclose(block.positions[:4], (xyz / 10).astype(np.float32), rtol=1e-6)
    open(path, "wb").write(raw[:-20])
    with pytest.raises(InputError, match="ends inside frame 3"):
        scan([path])
    assert scan([path], on_truncated="drop").n_frames == 3


@pytest.mark.parametrize("cut", [7, 50380, 50380 * 5 + 3], ids=["last-bytes", "one-record", "mid-file"])
def test_truncated_ncdf_refused_or_dropped(tmp_path, cut):
    source = open(data.TRJ_NCBOX, "rb").read()
    path = str(tmp_path / "cut.nc")
    open(path, "wb").write(source[:-cut])
    complete = 10 - (cut + 50380 - 1) // 50380
    with pytest.raises(InputError, match=f"cut.nc: ends inside frame {complete}"):
        scan([path])
    index = scan([path], on_truncated="drop")
    assert index.n_frames == complete and index.segments[0].dropped["frame"] == complete
    output = str(tmp_path / "cut.h5md")
    convert(path, output, on_truncated="drop", progress=False)
    frames = source_frames(data.TRJ_NCBOX, "NCDF", lambda ts, frame: frame)[:complete]
    compare_output(output, frames)


def test_netcdf4_file_refused_with_its_name(tmp_path):
    path = str(tmp_path / "hdf5.nc")
    with h5py.File(path, "w") as handle:
        handle["coordinates"] = np.zeros((2, 3, 3))
    with pytest.raises(InputError, match="NetCDF-4 .HDF5-based.*nccopy -k 64-bit-offset"):
        scan([path])


@pytest.mark.parametrize("change, message", [
    ({"conventions": "CF-1.6"}, "do not include AMBER"),
    ({"conventions": "AMBERRESTART"}, "restart file"),
    ({"units": {"coordinates": "nanometer"}}, "'coordinates' has units 'nanometer'"),
    ({"units": {"time": "femtosecond"}}, "'time' has units 'femtosecond'"),
    ({"units": {"cell_angles": "radian"}}, "'cell_angles' has units 'radian'"),
], ids=["not-amber", "restart", "coordinate-unit", "time-unit", "angle-unit"])
def test_not_an_amber_trajectory(tmp_path, change, message):
    path = str(tmp_path / "odd.nc")
    write_by_hand(path, **change)
    with pytest.raises(InputError, match=message):
        scan([path])


def test_non_finite_values_named_by_frame(tmp_path):
    path = str(tmp_path / "nan.nc")
    values = np.random.default_rng(1).uniform(-5, 5, (4, 5, 3))
    values[2, 3, 1] = np.nan
    write_by_hand(path, values=values)
    index = scan([path])  # per-atom values are checked when read
    reader = TrajectoryReader(index)
    with pytest.raises(InputError, match=r"nan.nc: frame 2 holds non-finite positions \(atom 3\)"):
        reader.read(np.arange(4), reader.new_block(4))
    with netcdf_file(path, "a", mmap=False) as handle:
        handle.variables["time"][1] = np.inf
    with pytest.raises(InputError, match="frame 1 has a non-finite time"):
        scan([path])


@pytest.mark.parametrize("damage", ["magic", "version", "tag", "dimension-id", "short-header"])
def test_corrupt_header_one_line_error(tmp_path, damage):
    path = str(tmp_path / "bad.nc")
    write_by_hand(path)
    raw = bytearray(open(path, "rb").read())
    if damage == "magic":
        raw[0:3] = b"XYZ"
    elif damage == "version":
        raw[3] = 7
    elif damage == "tag":
        raw[8:12] = struct.pack(">i", 99)  # where NC_DIMENSION belongs
    elif damage == "dimension-id":
        at = raw.index(b"coordinates") + len(b"coordinates") + 1 + 4  # name padded to 12, then ndims
        raw[at + 4:at + 8] = struct.pack(">i", 40)
    else:
        raw = raw[:60]
    open(path, "wb").write(raw)
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", path, "-o", str(output)])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "bad.nc" in lines[0], done.stderr
    assert not output.exists() and sorted(os.listdir(tmp_path)) == ["bad.nc"]
