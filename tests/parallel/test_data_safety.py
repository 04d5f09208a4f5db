"""Regression tests for the data-safety defects of issue 11, one or more per defect.

Each test is named after the defect it pins down. The oracle is MDAnalysis reading the
source (or the values written into it); outputs are read back with h5py and MDAnalysis.
"""

import os
import struct

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.formats import scan

from conftest import run_h5mdtool, write_xtc

TRAJ = "particles/trajectory"


def write_trr(path, frames):
    """Write a TRR: *frames* is a list of dicts with x, v, f (nm arrays or None), box, step, time."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with TRRFile(path, "w") as handle:
        for frame in frames:
            x, v, f = (frame.get(k) for k in ("x", "v", "f"))
            n = next(len(a) for a in (x, v, f) if a is not None)
            handle.write(x, v, f, frame.get("box", np.diag([5.0, 5.0, 5.0]).astype(np.float32)),
                         frame["step"], frame["time"], 0.0, n)


def leftovers(directory):
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


def positions_nm(path):
    """Positions of an h5mdtool output in nm, whatever its encoding (float nm or int pm)."""
    with h5py.File(path, "r") as f:
        value = f[f"{TRAJ}/position/value"]
        factor = {"nm": 1.0, "pm": 1e-3, "fm": 1e-6}[value.attrs["unit"]]
        return value[()].astype(np.float64) * factor


# -- defect 1: one chunk holding every frame written as zeros (HDF5 1.10.8) ---------------

@pytest.mark.mpi
@pytest.mark.parametrize("options", [
    {"stop": 1},                                   # one frame, one chunk
    {"chunk_frames": 98},                          # K == frames
    {"chunk_frames": 500},                         # K > frames
    {"chunk_frames": "auto", "stop": 5},           # auto on a short run
    {"chunk_frames": 98, "compression": "gzip"},
    {"chunk_frames": 98, "precision": 0.001},
    {"stop": 1, "precision": 0.01},
], ids=["one-frame", "K=frames", "K>frames", "auto-short", "one-chunk-gzip", "one-chunk-precision", "one-frame-precision"])
def test_defect1_one_chunk_is_not_written_as_zeros(comm, shared_tmp, adk, adk_frames, options):
    output = os.path.join(shared_tmp, "one_chunk.h5md")
    convert(adk[1], output, comm=comm, progress=False, **options)
    comm.Barrier()
    n = options.get("stop", 98)
    stored = positions_nm(output)
    assert stored.shape == (n, 3341, 3)
    tolerance = options.get("precision", 0) / 2 + 1e-6
    np.testing.assert_allclose(stored, adk_frames[:n], atol=tolerance, rtol=0)
    assert np.abs(stored).max() > 1.0  # not zeros


@pytest.mark.mpi
def test_defect1_one_frame_namd_triclinic_dcd(comm, shared_tmp):
    from MDAnalysisTests.datafiles import DCD_NAMD_TRICLINIC, PSF_NAMD_TRICLINIC

    output = os.path.join(shared_tmp, "namd.h5md")
    convert(DCD_NAMD_TRICLINIC, output, comm=comm, progress=False)
    comm.Barrier()
    source = mda.Universe(PSF_NAMD_TRICLINIC, DCD_NAMD_TRICLINIC)
    copy = mda.Universe(PSF_NAMD_TRICLINIC, output)
    np.testing.assert_allclose(copy.atoms.positions, source.atoms.positions, rtol=3e-7, atol=1e-5)
    np.testing.assert_allclose(copy.dimensions, source.dimensions, rtol=1e-5)
    assert np.abs(copy.atoms.positions).max() > 1.0


@pytest.mark.mpi
@pytest.mark.parametrize("n_frames, chunk", [(1, 1), (3, 3), (3, 8), (10, 4)], ids=["one-frame", "one-chunk", "chunk>frames", "many"])
def test_defect1_velocities_survive_one_chunk_with_precision(comm, shared_tmp, n_frames, chunk):
    """Velocities and forces stay lossless floats when positions are lossy, in any chunk shape."""
    path = os.path.join(shared_tmp, "xvf.trr")
    rng = np.random.default_rng(1)
    x, v, f = (rng.uniform(-3, 3, (n_frames, 20000, 3)).astype(np.float32) for _ in range(3))
    if comm.rank == 0:
        write_trr(path, [{"x": x[i], "v": v[i], "f": f[i], "step": i, "time": float(i)} for i in range(n_frames)])
    comm.Barrier()
    output = os.path.join(shared_tmp, "xvf.h5md")
    convert(path, output, comm=comm, progress=False, precision=0.001, chunk_frames=chunk)
    comm.Barrier()
    with h5py.File(output, "r") as h:
        np.testing.assert_array_equal(h[f"{TRAJ}/velocity/value"][()], v)
        np.testing.assert_array_equal(h[f"{TRAJ}/force/value"][()], f)
    assert np.all(np.abs(positions_nm(output) - x) <= 0.0005 + 1e-7)


# -- defect 2: --precision corrupting values near 10^-d (scale-offset fill value) ---------

@pytest.mark.parametrize("digits", [1, 2, 3, 4, 5, 6])
def test_defect2_precision_near_powers_of_ten(tmp_path, digits):
    """Values within 10^-d of zero (the old filter's fill value) keep the Q/2 bound."""
    q = 10.0 ** -digits
    near = np.array([q, -q, 0.99999 * q, 1.00001 * q, q / 2, -q / 2, 0.0, 1e-9, -1e-9, 0.0099999998,
                     q * 3.5, 5.13, -2.0 + q], np.float32)
    positions = np.resize(near, (2, 30, 3)).astype(np.float32)
    path = str(tmp_path / "near.trr")
    write_trr(path, [{"x": positions[i], "step": i, "time": float(i)} for i in range(2)])
    output = str(tmp_path / "near.h5md")
    convert(path, output, precision=q, progress=False)
    stored = positions_nm(output)
    error = np.abs(stored - positions.astype(np.float64))
    assert error.max() <= q / 2 * (1 + 1e-6), (digits, error.max())
    copy = mda.Universe(output)  # MDAnalysis applies the unit: Angstrom
    np.testing.assert_allclose(copy.trajectory[0].positions / 10, positions[0], atol=q / 2 + 1e-6)


def test_defect2_precision_on_the_solvated_box_keeps_the_bound(tmp_path, solvated):
    """The solvated AdK system wrapped into its box: every coordinate within Q/2 for each Q."""
    source = mda.Universe(solvated["topology"], solvated["XTC"])
    reference = np.array([ts.positions / 10 for ts in source.trajectory[:3]], np.float64)
    for q in (0.01, 0.0001, 0.00001):
        output = str(tmp_path / f"q{q}.h5md")
        convert(solvated["XTC"], output, precision=q, stop=3, progress=False, force=True)
        assert np.abs(positions_nm(output) - reference).max() <= q / 2 + 1e-6


@pytest.mark.parametrize("precision", [None, 0.01, 0.001, 1e-6, "xtc"])
def test_box_stored_in_the_positions_unit(tmp_path, solvated, precision):
    """MDAnalysis converts the box with the positions' unit: with positions in pm or fm the
    edges are stored in that unit too, and not rounded (regression: read 1000x too small)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(solvated["XTC"]) as handle:
        source_boxes = np.array([frame.box for frame in handle], np.float32)
    output = str(tmp_path / "out.h5md")
    convert(solvated["XTC"], output, precision=precision, progress=False)
    with h5py.File(output, "r") as f:
        positions_unit = f[f"{TRAJ}/position/value"].attrs["unit"]
        edges = f[f"{TRAJ}/box/edges/value"]
        assert edges.attrs["unit"] == positions_unit
        per_nm = {"nm": 1, "pm": 1000, "fm": 10**6}[edges.attrs["unit"]]
        np.testing.assert_array_equal((edges[()] / per_nm).astype(np.float32), source_boxes)
    source = mda.Universe(solvated["topology"], solvated["XTC"])
    copy = mda.Universe(output)
    for ts_source, ts_copy in zip(source.trajectory, copy.trajectory):
        np.testing.assert_allclose(ts_copy.dimensions, ts_source.dimensions, rtol=1e-6)
    done = run_h5mdtool(["validate", output, "--against", solvated["XTC"]])
    assert done.returncode == 0 and "10 frames equal to the source (positions, box," in done.stdout, done.stdout


@pytest.mark.parametrize("value", ["inf", "nan", "0", "1e-9"])
def test_defect2_precision_out_of_range_is_a_usage_error(tmp_path, adk, value):
    done = run_h5mdtool(["convert", adk[1], "-o", str(tmp_path / "o.h5md"), "--precision", value])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr


# -- defect 3: frames whose atom count differs from the first frame's --------------------

def _xtc_bytes(positions, step):
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "f.xtc")
        write_xtc(path, positions[None], [step], [float(step)])
        return open(path, "rb").read()


@pytest.mark.parametrize("ranks", [None, 2])
def test_defect3_xtc_frame_with_other_atom_count(tmp_path, ranks):
    rng = np.random.default_rng(0)
    data = _xtc_bytes(rng.random((50, 3), np.float32), 0) + _xtc_bytes(rng.random((60, 3), np.float32), 1)
    path = tmp_path / "mixed.xtc"
    path.write_bytes(data)
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", str(path), "-o", str(output)], ranks=ranks)
    assert done.returncode == 1 and "frame 1" in done.stderr and "60 atoms" in done.stderr
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
    assert not output.exists() and not leftovers(tmp_path)


def test_defect3_xtc_header_declaring_2e8_atoms(tmp_path):
    rng = np.random.default_rng(0)
    frame = bytearray(_xtc_bytes(rng.random((50, 3), np.float32), 1))
    struct.pack_into(">i", frame, 4, 200_000_000)
    path = tmp_path / "huge.xtc"
    path.write_bytes(_xtc_bytes(rng.random((50, 3), np.float32), 0) + bytes(frame))
    with pytest.raises(InputError, match="frame 1 .*200000000 atoms"):
        convert(str(path), str(tmp_path / "out.h5md"), progress=False)
    assert os.listdir(tmp_path) == ["huge.xtc"]


@pytest.mark.parametrize("ranks", [None, 2])
def test_defect3_trr_header_declaring_1e8_atoms(tmp_path, ranks):
    path = str(tmp_path / "huge.trr")
    x = np.zeros((10, 3), np.float32)
    write_trr(path, [{"x": x, "step": 0, "time": 0.0}, {"x": x, "step": 1, "time": 1.0}])
    data = bytearray(open(path, "rb").read())
    second = len(data) // 2
    struct.pack_into(">i", data, second + 24 + 10 * 4, 100_000_000)  # natoms of frame 1
    open(path, "wb").write(data)
    done = run_h5mdtool(["convert", path, "-o", str(tmp_path / "o.h5md")], ranks=ranks)
    assert done.returncode == 1 and "100000000 atoms" in done.stderr and "frame 1" in done.stderr, done.stderr
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr and "Segmentation" not in done.stderr
    assert not leftovers(tmp_path)


# -- defect 4 and 6: H5MD boxes in every valid form --------------------------------------

def _h5md(path, positions_angstrom, box=None, boundary=("periodic",) * 3, edges_unit="Angstrom", time=True,
          velocity_steps=None):
    n, atoms, _ = positions_angstrom.shape
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        traj = f.create_group("particles/trajectory")
        b = traj.create_group("box")
        b.attrs["dimension"] = 3
        b.attrs["boundary"] = np.array([s.encode() for s in boundary])
        pos = traj.create_group("position")
        pos["value"] = positions_angstrom
        pos["value"].attrs["unit"] = "Angstrom"
        pos["step"] = np.arange(n) * 10
        if time:
            pos["time"] = np.arange(n) * 0.5
            pos["time"].attrs["unit"] = "ps"
        if box is not None:
            kind, values = box
            if kind == "fixed":
                b["edges"] = values
                target = b["edges"]
            else:
                edges = b.create_group("edges")
                edges["value"] = values
                edges["step"] = pos["step"]
                target = edges["value"]
            if edges_unit:
                target.attrs["unit"] = edges_unit
        if velocity_steps is not None:
            vel = traj.create_group("velocity")
            vel["value"] = np.arange(len(velocity_steps) * atoms * 3, dtype=np.float32).reshape(-1, atoms, 3)
            vel["value"].attrs["unit"] = "Angstrom ps-1"
            vel["step"] = velocity_steps
            vel["time"] = np.asarray(velocity_steps) * 0.05
            vel["time"].attrs["unit"] = "ps"
    return path


BOXES = {
    "series-n3-of-1": ("series", np.array([[30.0, 31.0, 32.0]]), 1),
    "series-n3-of-3": ("series", np.array([[30.0, 31.0, 32.0], [33.0, 34.0, 35.0], [36.0, 37.0, 38.0]]), 3),
    "series-n3x3": ("series", np.tile(np.array([[30.0, 0, 0], [5.0, 31.0, 0], [0, 6.0, 32.0]]), (4, 1, 1)), 4),
    "fixed-3x3": ("fixed", np.array([[30.0, 0, 0], [5.0, 31.0, 0], [0, 6.0, 32.0]]), 4),
    "fixed-3": ("fixed", np.array([30.0, 31.0, 32.0]), 4),
}


@pytest.mark.parametrize("name", list(BOXES))
@pytest.mark.parametrize("edges_unit", ["Angstrom", None], ids=["unit", "no-unit"])
def test_defect4_h5md_boxes_in_every_form(tmp_path, name, edges_unit):
    kind, values, n = BOXES[name]
    positions = np.random.default_rng(2).uniform(0, 30, (n, 7, 3)).astype(np.float32)
    source = _h5md(str(tmp_path / "in.h5md"), positions, box=(kind, values), edges_unit=edges_unit)
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False)
    copy = mda.Universe(output)
    assert copy.trajectory.n_frames == n
    # the oracle: the box as written (MDAnalysis 2.11 reads neither fixed boxes nor edges without a unit
    # correctly), in Angstrom, as box vectors
    from MDAnalysis.lib.mdamath import triclinic_box

    matrices = values if values.ndim == 3 else (
        np.tile(values if values.shape == (3, 3) else np.diag(values), (n, 1, 1)) if kind == "fixed"
        else np.stack([np.diag(row) for row in values]))
    for frame, ts in enumerate(copy.trajectory):
        np.testing.assert_allclose(ts.positions, positions[frame], rtol=3e-7)
        np.testing.assert_allclose(ts.dimensions, triclinic_box(*matrices[frame]), rtol=1e-5)


def test_defect6_partly_periodic_h5md_box_keeps_per_dimension_boundary(tmp_path):
    positions = np.random.default_rng(3).uniform(0, 30, (3, 5, 3)).astype(np.float32)
    source = _h5md(str(tmp_path / "slab.h5md"), positions, box=("fixed", np.array([30.0, 30.0, 90.0])),
                   boundary=("periodic", "periodic", "none"))
    output = str(tmp_path / "out.h5md")
    summary = convert(source, output, progress=False)
    assert summary["boundary"] == ["periodic", "periodic", "none"]
    with h5py.File(output, "r") as f:
        assert list(f[f"{TRAJ}/box"].attrs["boundary"]) == [b"periodic", b"periodic", b"none"]
        np.testing.assert_allclose(f[f"{TRAJ}/box/edges/value"][0], np.diag([3.0, 3.0, 9.0]), rtol=1e-6)


@pytest.mark.parametrize("start", [0, 1])
def test_defect6_box_kept_when_the_first_frame_has_none(tmp_path, adk_frames, start):
    frames = adk_frames[:4]
    no_box = np.zeros((3, 3), np.float32)
    box = np.diag([8.0, 9.0, 10.0]).astype(np.float32)
    path = str(tmp_path / "late_box.xtc")
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(path, "w") as handle:
        for i, xyz in enumerate(frames):
            handle.write(xyz, no_box if i == 0 else box, i, float(i))
    output = str(tmp_path / "out.h5md")
    summary = convert(path, output, start=start, progress=False)
    assert summary["box"] and summary["boundary"] == ["periodic"] * 3
    copy = mda.Universe(output)
    dims = [None if ts.dimensions is None else ts.dimensions.copy() for ts in copy.trajectory]
    if start == 0:
        assert dims[0] is None or not np.any(dims[0][:3])  # the frame without a box stays without
        assert any("zero edges" in note for note in summary["notes"])
    np.testing.assert_allclose(dims[-1][:3], [80.0, 90.0, 100.0], rtol=1e-6)


@pytest.mark.parametrize("selection", [{"start": 1}, {"begin": 1.0}, {"stop": 1}])
def test_box_of_frames_left_out_gives_no_periodic_boundary(tmp_path, adk_frames, selection):
    """Found by make fuzz (case 222): frames chosen (by number or by time) none of which holds
    a box were written with a periodic boundary and no edges (validate: H5MD012)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    from h5mdtool import validate

    box = np.diag([8.0, 9.0, 10.0]).astype(np.float32)
    path = str(tmp_path / "first_box_only.xtc")
    with XTCFile(path, "w") as handle:
        for i, xyz in enumerate(adk_frames[:4]):
            handle.write(xyz, box if i == (0 if "stop" not in selection else 3) else np.zeros((3, 3), np.float32),
                         i, float(i))
    output = str(tmp_path / "out.h5md")
    summary = convert(path, output, progress=False, **selection)
    assert summary["boundary"] == ["none"] * 3 and not summary["box"]
    with h5py.File(output, "r") as f:
        assert "edges" not in f[f"{TRAJ}/box"] and list(f[f"{TRAJ}/box"].attrs["boundary"]) == [b"none"] * 3
    assert validate(output).exit_code == 0


@pytest.mark.parametrize("source_kind", ["trr", "h5md-series", "h5md-fixed"])
def test_boxes_of_zeros_are_no_box(tmp_path, source_kind):
    """GROMACS writes a box of zeros for a frame without one; MDAnalysis reads None: so do we.

    Regression (differential harness): such a source gave an output with a periodic box of
    zeros that validate rejected (DATA005), or validate --against an exact copy without a
    box reported that the source had one (AGAINST003).
    """
    rng = np.random.default_rng(11)
    positions = rng.uniform(0, 3, (3, 5, 3)).astype(np.float32)
    source = str(tmp_path / f"in.{source_kind[:4]}")
    if source_kind == "trr":
        write_trr(source, [{"x": positions[i], "box": np.zeros((3, 3), np.float32), "step": i, "time": float(i)}
                           for i in range(3)])
    else:
        box = ("fixed", np.zeros(3)) if source_kind == "h5md-fixed" else ("series", np.zeros((3, 3, 3)))
        _h5md(source, positions * 10, box=box)
    assert not scan([source]).has("box")
    output = str(tmp_path / "out.h5md")
    summary = convert(source, output, progress=False)
    assert summary["boundary"] == ["none"] * 3
    with h5py.File(output, "r") as f:
        assert "edges" not in f[f"{TRAJ}/box"]
        assert [b.decode() if isinstance(b, bytes) else b for b in f[f"{TRAJ}/box"].attrs["boundary"]] == ["none"] * 3
    assert all(ts.dimensions is None for ts in mda.Universe(output).trajectory)
    result = run_h5mdtool(["validate", output, "--against", source])
    assert result.returncode == 0, result.stdout + result.stderr


# -- defect 5: velocities and forces never dropped without a word ---------------------------

def test_defect5_trr_whose_first_frame_lacks_velocities(tmp_path):
    rng = np.random.default_rng(4)
    x, v = rng.random((4, 6, 3), np.float32), rng.random((4, 6, 3), np.float32)
    path = str(tmp_path / "late_v.trr")
    write_trr(path, [{"x": x[i], "v": None if i == 0 else v[i], "step": i * 10, "time": i * 1.0} for i in range(4)])
    output = str(tmp_path / "out.h5md")
    summary = convert(path, output, progress=False)
    assert summary["fields"] == ["positions", "velocities"]
    assert any("velocities saved at 3 of 4" in note for note in summary["notes"])
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/value"][()], v[1:])
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/step"][()], [10, 20, 30])
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/time"][()], [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(f[f"{TRAJ}/position/value"][()], x)


def test_defect5_trr_velocities_at_their_own_steps(tmp_path):
    """nstvout != nstxout: frames with positions only, velocities only, and both."""
    rng = np.random.default_rng(5)
    frames, x, v = [], {}, {}
    for step in range(0, 60, 10):
        frame = {"step": step, "time": step / 10}
        if step % 20 == 0:
            frame["x"] = x[step] = rng.random((5, 3), np.float32)
        if step % 30 == 0:
            frame["v"] = v[step] = rng.random((5, 3), np.float32)
        if "x" in frame or "v" in frame:
            frames.append(frame)
    path = str(tmp_path / "own.trr")
    write_trr(path, frames)
    output = str(tmp_path / "out.h5md")
    convert(path, output, progress=False)
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f[f"{TRAJ}/position/step"][()], sorted(x))
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/step"][()], sorted(v))
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/value"][()], [v[s] for s in sorted(v)])
        assert f[f"{TRAJ}/velocity/step"] != f[f"{TRAJ}/position/step"]  # not hard-linked


def test_defect5_segment_without_velocities_does_not_drop_the_others(tmp_path):
    rng = np.random.default_rng(6)
    x, v = rng.random((6, 4, 3), np.float32), rng.random((6, 4, 3), np.float32)
    first, second = str(tmp_path / "a.trr"), str(tmp_path / "b.trr")
    write_trr(first, [{"x": x[i], "v": v[i], "step": i, "time": float(i)} for i in range(3)])
    write_trr(second, [{"x": x[i], "step": i, "time": float(i)} for i in range(3, 6)])
    output = str(tmp_path / "out.h5md")
    summary = convert([first, second], output, progress=False)
    assert "velocities" in summary["fields"]
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f[f"{TRAJ}/velocity/value"][()], v[:3])
        np.testing.assert_array_equal(f[f"{TRAJ}/position/value"][()], x)


def test_defect5_h5md_velocity_at_its_own_rate(tmp_path):
    positions = np.random.default_rng(7).uniform(0, 30, (6, 5, 3)).astype(np.float32)
    source = _h5md(str(tmp_path / "in.h5md"), positions, velocity_steps=[0, 30])
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False)
    with h5py.File(source, "r") as f, h5py.File(output, "r") as g:
        np.testing.assert_allclose(g[f"{TRAJ}/velocity/value"][()], f[f"{TRAJ}/velocity/value"][()] / 10, rtol=1e-7)
        np.testing.assert_array_equal(g[f"{TRAJ}/velocity/step"][()], [0, 30])
        np.testing.assert_allclose(g[f"{TRAJ}/velocity/time"][()], [0.0, 1.5])
        np.testing.assert_array_equal(g[f"{TRAJ}/position/step"][()], np.arange(6) * 10)


def test_defect5_no_velocities_is_said(tmp_path, solvated):
    summary = convert(solvated["TRR"], str(tmp_path / "o.h5md"), velocities=False, progress=False)
    assert "velocities not written (--no-velocities)" in summary["notes"]


# -- defect 7: relayout neither invents nor keeps stale data ------------------------------

def test_defect7_h5md_without_time_gets_no_invented_time(tmp_path):
    positions = np.random.default_rng(8).uniform(0, 30, (3, 5, 3)).astype(np.float32)
    source = _h5md(str(tmp_path / "notime.h5md"), positions, time=False)
    output = str(tmp_path / "out.h5md")
    summary = convert(source, output, progress=False)
    with h5py.File(output, "r") as f:
        assert "time" not in f[f"{TRAJ}/position"]
        np.testing.assert_array_equal(f[f"{TRAJ}/position/step"][()], [0, 10, 20])
    assert any("records no time" in note for note in summary["notes"])
    assert scan([output]).time is None


def test_defect7_connectivity_renumbered_after_select(tmp_path, adk):
    from h5mdtool.formats import scan as scan_trajectory  # noqa: F401 - the reading stack under test

    source = str(tmp_path / "with_bonds.h5md")
    convert(adk[1], source, stop=3, progress=False)
    with h5py.File(source, "r+") as f:
        f["connectivity/bonds"] = np.array([[0, 1], [1, 2], [4, 5], [5, 6], [2, 4]])
    # keep atoms 1, 2, 5, 6 (0-based), no topology involved
    indices = tmp_path / "atoms.txt"
    indices.write_text("1 2\n5, 6\n")
    output = str(tmp_path / "subset.h5md")
    summary = convert(source, output, atom_indices_file=str(indices), progress=False)
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f["connectivity/bonds"][()], [[0, 1], [2, 3]])
    assert any("connectivity/bonds" in item for item in summary["relayout"]["reduced"])


def test_defect7_author_option_wins_over_the_source(tmp_path, adk):
    source = str(tmp_path / "a.h5md")
    convert(adk[1], source, stop=2, author="First Author", progress=False)
    output = str(tmp_path / "b.h5md")
    convert(source, output, author="Second Author", progress=False)
    with h5py.File(output, "r") as f:
        assert f["h5md/author"].attrs["name"] == b"Second Author"
    convert(source, output, force=True, progress=False)
    with h5py.File(output, "r") as f:
        assert f["h5md/author"].attrs["name"] == b"First Author"


def test_defect7_species_and_mass_follow_the_atom_selection(tmp_path, adk):
    source = str(tmp_path / "a.h5md")
    convert(adk[1], source, stop=2, progress=False)
    with h5py.File(source, "r+") as f:
        f[f"{TRAJ}/species"] = np.arange(3341) % 7
        f[f"{TRAJ}/mass"] = np.linspace(1, 2, 3341)
    output = str(tmp_path / "b.h5md")
    indices = tmp_path / "atoms.txt"
    indices.write_text(" ".join(str(i) for i in range(10, 20)))
    convert(source, output, atom_indices_file=str(indices), progress=False)
    with h5py.File(output, "r") as f:
        np.testing.assert_array_equal(f[f"{TRAJ}/species"][()], np.arange(10, 20) % 7)
        np.testing.assert_allclose(f[f"{TRAJ}/mass"][()], np.linspace(1, 2, 3341)[10:20])
    frames_only = str(tmp_path / "c.h5md")
    convert(source, frames_only, stop=1, progress=False)
    with h5py.File(frames_only, "r") as f:
        assert f[f"{TRAJ}/species"].shape == (3341,)


def test_defect7_float64_positions_kept_in_double_precision(tmp_path):
    positions = np.random.default_rng(9).uniform(0, 30, (3, 5, 3))
    source = _h5md(str(tmp_path / "double.h5md"), positions)
    output = str(tmp_path / "out.h5md")
    summary = convert(source, output, progress=False)
    with h5py.File(output, "r") as f:
        value = f[f"{TRAJ}/position/value"]
        assert value.dtype == np.float64
        np.testing.assert_allclose(value[()], positions / 10, rtol=1e-15)
    assert any("double precision" in note for note in summary["notes"])


# -- defect 9: truncated XTC/TRR ------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["xtc", "trr"])
@pytest.mark.parametrize("cut", ["in-header", "in-data"])
def test_defect9_truncated_last_frame(tmp_path, adk_frames, fmt, cut):
    path = str(tmp_path / f"cut.{fmt}")
    frames = adk_frames[:5]
    if fmt == "xtc":
        write_xtc(path, frames, np.arange(5), np.arange(5.0))
    else:
        write_trr(path, [{"x": frames[i], "step": i, "time": float(i)} for i in range(5)])
    index = scan([path])
    start = int(index.segments[0].offsets[4])
    end = start + (10 if cut == "in-header" else 200)
    with open(path, "r+b") as handle:
        handle.truncate(end)
    output = str(tmp_path / "out.h5md")
    with pytest.raises(InputError, match=f"ends inside frame 4: {end - start} byte"):
        convert(path, output, progress=False)
    assert not os.path.exists(output) and not leftovers(tmp_path)
    summary = convert(path, output, on_truncated="drop", progress=False)
    assert summary["n_frames"] == 4
    assert any("incomplete frame 4" in note and f"from byte {start}" in note for note in summary["notes"])
    np.testing.assert_allclose(positions_nm(output), frames[:4], atol=6e-4)


# -- defect 10: messages and the exit code ---------------------------------------------------

def test_defect10_on_overlap_drop_says_what_it_dropped(tmp_path, adk_frames):
    first, second, third = (str(tmp_path / f"{n}.xtc") for n in "abc")
    write_xtc(first, adk_frames[:10], np.arange(10), np.arange(10.0))
    write_xtc(second, adk_frames[5:8], np.arange(5, 8), np.arange(5.0, 8.0))  # entirely inside the first
    write_xtc(third, adk_frames[8:15], np.arange(8, 15), np.arange(8.0, 15.0))
    summary = convert([first, second, third], str(tmp_path / "o.h5md"), on_overlap="drop", progress=False)
    assert summary["n_frames"] == 15
    assert any("b.xtc: dropped its first 3 frame(s) (the whole segment)" in note for note in summary["notes"])
    assert any("c.xtc: dropped its first 2 frame(s)" in note for note in summary["notes"])


def test_defect10_topology_error_is_one_line(tmp_path, adk):
    bad = tmp_path / "bad.psf"
    bad.write_text("PSF\n\n garbage\n")
    done = run_h5mdtool(["convert", adk[1], "-o", str(tmp_path / "o.h5md"), "-t", str(bad), "-s", "name CA"])
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr


def test_defect10_temporary_name_never_in_messages(tmp_path, adk):
    directory = tmp_path / "ro"
    directory.mkdir()
    output = directory / "o.h5md"
    os.chmod(directory, 0o500)
    try:
        done = run_h5mdtool(["convert", adk[1], "-o", str(output)])
    finally:
        os.chmod(directory, 0o700)
    if os.geteuid() == 0:  # root writes anyway: use a file in place of the directory instead
        blocker = tmp_path / "file"
        blocker.write_text("x")
        done = run_h5mdtool(["convert", adk[1], "-o", str(blocker / "o.h5md")])
    assert done.returncode == 1 and ".tmp" not in done.stderr and "h5mdtool-" not in done.stderr, done.stderr


def test_defect10_corrupt_h5md_chunk_reported_at_its_frame(tmp_path, adk):
    source = str(tmp_path / "gz.h5md")
    convert(adk[1], source, stop=40, compression="gzip", chunk_frames=1, progress=False)
    with h5py.File(source, "r") as f:
        info = f[f"{TRAJ}/position/value"].id.get_chunk_info(23)
    with open(source, "r+b") as handle:
        handle.seek(info.byte_offset + 10)
        handle.write(b"\xff" * 64)
    with pytest.raises(InputError, match="frame 23"):
        convert(source, str(tmp_path / "o.h5md"), progress=False)


def test_defect10_write_failure_names_the_output_not_the_temporary(tmp_path, adk, monkeypatch):
    import sys

    convert_module = sys.modules["h5mdtool.conversion.convert"]

    real = convert_module.open_h5

    def failing(path, mode, comm, **kwargs):
        raise OSError(f"Unable to create file (unable to open file: name = '{path}', errno = 28, No space left)")

    monkeypatch.setattr(convert_module, "open_h5", failing)
    output = tmp_path / "o.h5md"
    with pytest.raises(Exception) as caught:
        convert(adk[1], str(output), progress=False)
    assert str(output) in str(caught.value) and ".tmp" not in str(caught.value) and "No space left" in str(caught.value)
    assert not leftovers(tmp_path) and not output.exists()
    monkeypatch.setattr(convert_module, "open_h5", real)


def test_locked_h5md_input_gets_a_clear_message(tmp_path, adk):
    """Issue 14: a file another process holds open for writing is named as locked, with the switch."""
    import subprocess
    import sys

    source = str(tmp_path / "held.h5md")
    convert(adk[1], source, stop=2, progress=False)
    holder = subprocess.Popen([sys.executable, "-c", f"import h5py, time\nf = h5py.File({source!r}, 'r+')\n"
                               "print('open', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    commands = [["convert", source, "-o", str(tmp_path / "o.h5md")], ["info", source], ["validate", source],
                ["bench", "rmsd", source, "-t", adk[0]]]
    try:
        assert holder.stdout.readline().strip() == "open"
        runs = [run_h5mdtool(command, env={**os.environ, "HDF5_USE_FILE_LOCKING": "TRUE"}) for command in commands]
    finally:
        holder.kill()
    for command, done in zip(commands, runs):
        # a file no command can read is bad input: exit status 1 for every command (README)
        assert done.returncode == 1, (command, done.stderr)
        assert "locked by another process" in done.stderr and "HDF5_USE_FILE_LOCKING" in done.stderr, (command, done.stderr)
        assert done.stderr.count("\n") == 1, (command, done.stderr)


@pytest.mark.parametrize("content, message", [("1 2 x", "'x' is not a whole number"), ("", "lists no atom"),
                                              ("3 2", "must increase"), ("1 1", "must increase"),
                                              ("0 5000", "run from 0 to 5000")])
def test_atom_indices_file_refusals(tmp_path, adk, content, message):
    indices = tmp_path / "atoms.txt"
    indices.write_text(content)
    with pytest.raises(InputError, match=message):
        convert(adk[1], str(tmp_path / "o.h5md"), atom_indices_file=str(indices), progress=False)
    with pytest.raises(UsageError, match="not both"):
        convert(adk[1], str(tmp_path / "o.h5md"), atom_indices_file=str(indices), topology=adk[0],
                select="name CA", progress=False)
