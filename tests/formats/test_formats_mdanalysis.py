"""LAMMPS DCD, and the formats read through MDAnalysis's readers (TRZ, GSD, LAMMPS dump):
generated files, truncation, damaged files, and nothing written beside the inputs."""

import os
import shutil
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as data

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError
from h5mdtool.formats import scan

from conftest import run_h5mdtool
from formats_oracle import compare_output, source_frames


def adk_universe():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(data.PSF, data.DCD)


def write_lammps_dcd(path, n_frames=20, dimensions=None):
    """AdK frames as a LAMMPS DCD (units real: fs) with time step 2 fs, every 50 steps from step 1000."""
    from MDAnalysis.coordinates.LAMMPS import DCDWriter

    universe = adk_universe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with DCDWriter(path, universe.atoms.n_atoms, dt=0.1, nsavc=50, istart=1000) as writer:
            for ts in universe.trajectory[:n_frames]:
                if dimensions is not None:
                    ts.dimensions = dimensions
                writer.write(universe.atoms)


@pytest.mark.mpi
def test_lammps_dcd_times_follow_lammps_not_charmm(comm, shared_tmp):
    path = os.path.join(shared_tmp, "lammps.dcd")
    if comm.rank == 0:
        write_lammps_dcd(path)
    comm.Barrier()
    output = os.path.join(shared_tmp, "lammps.h5md")
    convert(path, output, comm=comm, format="LAMMPS", progress=False)
    comm.Barrier()
    if comm.rank == 0:
        lammps = scan([path], format="LAMMPS")
        np.testing.assert_array_equal(lammps.step, 1000 + 50 * np.arange(20))
        np.testing.assert_allclose(lammps.time, (1000 + 50 * np.arange(20)) * 0.002, rtol=1e-6)  # 2 fs a step
        charmm = scan([path])  # the same bytes read as CHARMM: DELTA taken in AKMA units
        assert charmm.formats == ["DCD"] and not np.allclose(charmm.time, lammps.time)
        frames = source_frames(path, "LAMMPS", lambda ts, frame: 1000 + 50 * frame)
        compare_output(output, frames)
    comm.Barrier()


def test_truncated_lammps_dcd_named_by_frame(tmp_path):
    path = str(tmp_path / "cut.dcd")
    write_lammps_dcd(path, n_frames=5)
    open(path, "ab").truncate(os.path.getsize(path) - 100)
    with pytest.raises(InputError, match="cut.dcd: ends inside frame 4"):
        scan([path], format="LAMMPS")
    assert scan([path], format="LAMMPS", on_truncated="drop").n_frames == 4


def write_gsd(path, positions, steps, box=(30.0, 31.0, 32.0, 0.0, 0.0, 0.0)):
    import gsd.hoomd

    with gsd.hoomd.open(path, "w") as handle:
        for xyz, step in zip(positions, steps):
            frame = gsd.hoomd.Frame()
            frame.configuration.step = int(step)
            frame.configuration.box = list(box)
            frame.particles.N = len(xyz)
            frame.particles.position = np.asarray(xyz, np.float32)
            frame.particles.types = ["A"]
            handle.append(frame)


def write_trz(path, n_frames=8):
    from MDAnalysis.coordinates.TRZ import TRZWriter

    universe = adk_universe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with TRZWriter(path, universe.atoms.n_atoms) as writer:
            for ts in universe.trajectory[:n_frames]:
                ts.dimensions = [70.0, 71.0, 72.0, 90.0, 90.0, 90.0]
                writer.write(universe.atoms)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["GSD", "TRZ"])
def test_generated_files_equal_mdanalysis(comm, shared_tmp, kind):
    path = os.path.join(shared_tmp, f"adk.{kind.lower()}")
    if comm.rank == 0:
        if kind == "GSD":
            universe = adk_universe()
            positions = [universe.atoms.positions.copy() for _ in universe.trajectory[:9]]
            write_gsd(path, positions, steps=100 * np.arange(1, 10))
        else:
            write_trz(path)
    comm.Barrier()
    output = os.path.join(shared_tmp, "adk.h5md")
    convert(path, output, comm=comm, progress=False)
    comm.Barrier()
    if comm.rank == 0:
        kwargs = {"n_atoms": 3341} if kind == "TRZ" else {}
        step = (lambda ts, frame: int(ts.data["frame"])) if kind == "TRZ" else None
        compare_output(output, source_frames(path, kind, step, **kwargs))
    comm.Barrier()


def test_nothing_written_beside_inputs(tmp_path):
    """Copies of every example in a directory of their own: convert adds nothing there."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for source in (data.TRZ, data.GSD, data.LAMMPSDUMP_image_vf, data.TNG_traj_vels_forces, data.TRJ_NCBOX,
                   data.LAMMPSdcd2):
        shutil.copy(source, inputs)
    before = sorted(os.listdir(inputs))
    os.chmod(inputs, 0o555)  # read-only, as a shared input directory may be
    try:
        for name in before:
            fmt = "LAMMPS" if name.endswith(".dcd") else None
            convert(str(inputs / name), str(tmp_path / f"{name}.h5md"), format=fmt, progress=False)
    finally:
        os.chmod(inputs, 0o755)
    assert sorted(os.listdir(inputs)) == before


def _cut_lines(source, path, keep_lines=None, cut_bytes=None):
    lines = open(source, "rb").read().splitlines(keepends=True)
    raw = b"".join(lines[:keep_lines]) if keep_lines is not None else b"".join(lines)
    if cut_bytes:
        raw = raw[:-cut_bytes]
    open(path, "wb").write(raw)


@pytest.mark.parametrize("keep_lines, cut_bytes, complete", [
    (None, 10, 5),        # the last line loses its last columns
    (6 * 31 - 4, None, 5),  # the last frame loses four atom lines
    (3 * 31, None, 3),     # whole frames only: nothing to drop
], ids=["cut-columns", "cut-lines", "whole-frames"])
def test_truncated_lammps_dump(tmp_path, keep_lines, cut_bytes, complete):
    """MDAnalysis ignores an incomplete last frame and parses a cut last line; h5mdtool refuses both."""
    path = str(tmp_path / "cut.lammpstrj")
    _cut_lines(data.LAMMPSDUMP_chain1, path, keep_lines, cut_bytes)  # 22 atoms: 31 lines a frame
    if complete == 3:
        assert scan([path]).n_frames == 3
        return
    with pytest.raises(InputError, match=f"cut.lammpstrj: ends inside frame {complete}"):
        scan([path])
    index = scan([path], on_truncated="drop")
    assert index.n_frames == complete
    output = str(tmp_path / "cut.h5md")
    convert(path, output, on_truncated="drop", progress=False)
    compare_output(output, source_frames(data.LAMMPSDUMP_chain1, "LAMMPSDUMP")[:complete])


def test_truncated_trz(tmp_path):
    path = str(tmp_path / "cut.trz")
    open(path, "wb").write(open(data.TRZ, "rb").read()[:-1000])
    with pytest.raises(InputError, match="cut.trz: ends inside frame 5: 195696 byte"):
        scan([path])
    output = str(tmp_path / "cut.h5md")
    convert(path, output, on_truncated="drop", progress=False)
    frames = source_frames(data.TRZ, "TRZ", lambda ts, frame: int(ts.data["frame"]), n_atoms=8184)
    compare_output(output, frames[:5])


@pytest.mark.parametrize("case, message", [
    ("truncated-gsd", "not a readable GSD file (Corrupt GSD file"),
    ("gsd-steps-repeat", "frame 2 has step 500 after step 500"),
    ("trz-without-atoms", "the first TRZ frame declares 0 atoms"),
    ("garbage-gsd", "not a readable GSD file"),
    ("empty-dump", "file is empty"),
])
def test_damaged_inputs_one_line_error(tmp_path, case, message):
    """One line on stderr naming the file, exit 1, nothing at the output path (no MDAnalysis
    'Exception ignored' report from a half-built reader either)."""
    path = {"truncated-gsd": tmp_path / "cut.gsd", "gsd-steps-repeat": tmp_path / "long.gsd",
            "trz-without-atoms": tmp_path / "datatest.trz", "garbage-gsd": tmp_path / "noise.gsd",
            "empty-dump": tmp_path / "empty.lammpstrj"}[case]
    if case == "truncated-gsd":
        path.write_bytes(open(data.GSD_bonds, "rb").read()[:30000])
    elif case == "gsd-steps-repeat":
        shutil.copy(data.GSD_long, path)
    elif case == "trz-without-atoms":
        shutil.copy(data.trz4data, path)
    elif case == "garbage-gsd":
        path.write_bytes(np.random.default_rng(2).bytes(4000))
    else:
        path.write_bytes(b"")
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", str(path), "-o", str(output)])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and path.name in lines[0], done.stderr
    assert message in lines[0], lines[0]
    assert not output.exists() and os.listdir(tmp_path) == [path.name]


def test_trz_frames_read_at_their_offsets_not_by_their_numbers(tmp_path):
    """Regression: MDAnalysis seeks relative to each TRZ frame's stored number (nframe); with
    numbers that are not consecutive it read other frames than asked. h5mdtool reads each
    frame at its own offset, so the values stay those of the unpatched file."""
    import struct

    raw = bytearray(open(data.TRZ, "rb").read())
    frame_bytes = (len(raw) - 100) // 6
    for frame in range(6):
        struct.pack_into("<i", raw, 100 + frame * frame_bytes + 4, 7)  # every frame says it is frame 7
    path = str(tmp_path / "renumbered.trz")
    open(path, "wb").write(raw)
    output = str(tmp_path / "renumbered.h5md")
    convert(path, output, progress=False)
    frames = source_frames(data.TRZ, "TRZ", lambda ts, frame: int(ts.data["frame"]), n_atoms=8184)
    compare_output(output, frames)


def test_trz_positions_kept_bit_for_bit_not_through_angstrom(tmp_path):
    """Regression (differential harness, split of a TRZ: positions-differ, 1 ulp): TRZ stores
    float32 nm; read through MDAnalysis's Angstrom and divided back by 10, about one value in
    twenty moved by one unit in the last place. They are now stored exactly as in the file,
    as are the velocities and the box vectors MDAnalysis derives from the stored ones."""
    path = str(tmp_path / "values.trz")
    write_trz(path, n_frames=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stored = mda.Universe(path, n_atoms=3341, convert_units=False).trajectory
        positions = np.array([ts.positions.copy() for ts in stored])
        velocities = np.array([ts.velocities.copy() for ts in stored])
        stored.close()
    # the data would show the defect: some values change through Angstrom and back
    through_angstrom = (positions * np.float32(10.0)) / np.float32(10.0)
    assert np.count_nonzero(through_angstrom != positions) > 100
    output = str(tmp_path / "values.h5md")
    convert(path, output, progress=False)
    import h5py

    with h5py.File(output, "r") as handle:
        trajectory = handle["particles/trajectory"]
        np.testing.assert_array_equal(trajectory["position/value"][()], positions)
        np.testing.assert_array_equal(trajectory["velocity/value"][()], velocities)
        np.testing.assert_allclose(np.diagonal(trajectory["box/edges/value"][()], axis1=1, axis2=2),
                                   np.tile([7.0, 7.1, 7.2], (3, 1)), rtol=1e-6)


@pytest.mark.mpi
def test_validate_against_lammps_dcd_parts_with_against_format(comm, shared_tmp):
    """Regression (differential harness, split of LAMMPS DCDs: validate-against-parts): validate
    --against had no way to name the source's format and read a LAMMPS DCD as CHARMM's (DELTA in
    AKMA units), so every time differed. ``against_format="LAMMPS"`` reads it as convert does."""
    from h5mdtool import split, validate

    path = os.path.join(shared_tmp, "boxed-lammps.dcd")
    if comm.rank == 0:
        write_lammps_dcd(path, n_frames=6, dimensions=[60.0, 61.0, 62.0, 90.0, 90.0, 90.0])
    comm.Barrier()
    parts = os.path.join(shared_tmp, "lammps-parts")
    split([path], parts, 2, comm=comm, format="h5md", input_format="LAMMPS", force=True, progress=False)
    report = validate([os.path.join(parts, "manifest.json")], comm=comm, against=[path], against_format="LAMMPS")
    assert report.exit_code == 0, [f.message for r in report.files for f in r.findings]
    as_charmm = validate([os.path.join(parts, "manifest.json")], comm=comm, against=[path])
    assert as_charmm.exit_code == 1 and any(f.rule == "AGAINST002" for r in as_charmm.files for f in r.findings)
    comm.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_bench_rmsd_lammps_dcd_with_format(comm, shared_tmp, engine):
    """bench rmsd --format LAMMPS: times in ps from LAMMPS's fs time step, as MDAnalysis's
    LAMMPS reader gives them (without it, the bytes are read as a CHARMM DCD); RMSDs equal."""
    from h5mdtool import bench_rmsd
    from MDAnalysis.analysis import rms

    path = os.path.join(shared_tmp, "bench-lammps.dcd")
    if comm.rank == 0:
        write_lammps_dcd(path, n_frames=7)
    comm.Barrier()
    result = bench_rmsd(path, data.PSF, comm=comm, format="LAMMPS", engine=engine, block_frames=2)
    if comm.rank == 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            universe = mda.Universe(data.PSF, path, format="LAMMPS")
            expected = rms.RMSD(universe, select="name CA").run().results.rmsd
        np.testing.assert_allclose(result["rmsd"][:, 1], (1000 + 50 * np.arange(7)) * 0.002, rtol=1e-6)
        np.testing.assert_allclose(result["rmsd"][:, 1], expected[:, 1], rtol=1e-6)
        np.testing.assert_allclose(result["rmsd"][:, 2], expected[:, 2], atol=1e-4)
    comm.Barrier()


def test_bench_format_refused_for_a_manifest_and_validate_format_without_source(tmp_path):
    from h5mdtool import validate
    from h5mdtool.bench.inputs import inspect_input
    from h5mdtool.parallel.errors import UsageError

    with pytest.raises(UsageError, match="--against-format names the format of the --against source"):
        validate([str(tmp_path / "x.h5md")], against_format="LAMMPS")
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "manifest.json").write_text("{}")
    with pytest.raises(UsageError, match="--format names the format of trajectory files"):
        inspect_input([str(tmp_path / "parts")], format="LAMMPS")


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", [None, "LAMMPS"])
def test_dcd_zero_cell_box_mismatch(comm, shared_tmp, fmt):
    """Regression (differential harness, dcd-zero-cell-box-mismatch): a DCD flagged periodic
    whose unit cells have zero lengths (what MDAnalysis's DCDWriter writes for a universe
    without a box) holds no box, as MDAnalysis reads it; the scan counted one in every frame,
    so validate --against an exact copy failed (AGAINST003: the file has no box but the
    source has one). CHARMM and LAMMPS DCD alike."""
    from h5mdtool import validate

    path = os.path.join(shared_tmp, "no-box.dcd")
    if comm.rank == 0:
        write_lammps_dcd(path, n_frames=4)  # AdK has no box: the writer stores zero-length cells
        from MDAnalysis.lib.formats.libdcd import DCDFile

        with DCDFile(path) as handle:
            assert handle.is_periodic and not np.any(handle.readframes().unitcell[:, [0, 2, 5]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert all(ts.dimensions is None for ts in mda.Universe(path, format=fmt or "DCD").trajectory)
        assert not scan([path], format=fmt).has("box")
    comm.Barrier()
    output = os.path.join(shared_tmp, "no-box.h5md")
    convert(path, output, comm=comm, format=fmt, progress=False)
    report = validate([output], comm=comm, against=[path], against_format=fmt)
    assert report.exit_code == 0, [f.message for r in report.files for f in r.findings]
    comm.Barrier()
