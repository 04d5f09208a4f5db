"""x, y and z in separate chunks (``--split-xyz``, issue 13): the layout rules and round trips.

Chunks ``(k, n_atoms, 1)`` put one coordinate of consecutive atoms side by side, which
compresses integer grids better; every writer (HDF5's collective filtered writes, h5mdtool's
direct chunk writes, append, relayout) and every reader (HDF5, h5mdtool's chunk reader,
MDAnalysis) must treat them as whole frames. The oracle is MDAnalysis's TRR decoder reading
the source; shapes cover one frame, one chunk holding every frame, many chunks with a partial
last one, and a rank without frames (mpi-marked tests also run on 2 and 3 ranks).
"""

import os
import re

import h5py
import numpy as np
import pytest

from h5mdtool import bench_rmsd, convert, split, validate
from h5mdtool.parallel.errors import InputError, UsageError
from h5mdtool.h5md.layout import Layout

from conftest import run_h5mdtool

TRAJ = "particles/trajectory"
#: (frames, chunk frames): one frame; one chunk holding every frame; many chunks, the last
#: partial; fewer chunks than 3 ranks (a rank without frames)
SHAPES = [(1, 1), (5, 8), (11, 3), (2, 1)]
SHAPE_IDS = ["one-frame", "one-chunk", "many-chunks", "idle-rank"]
#: split layouts: lossless with each plugin codec family, and lossy grids with both codecs
LAYOUTS = {
    "zstd": {"compression": "zstd", "split_xyz": True},
    "gzip-noshuffle": {"compression": "gzip", "split_xyz": True, "shuffle": False},
    "lz4": {"compression": "lz4", "split_xyz": True},
    "precision": {"precision": 0.001, "split_xyz": True},
    "precision-gzip-velocities": {"precision": 0.001, "compression": "gzip", "velocity_precision": 0.001,
                                  "split_xyz": True},
    "precision-chosen": {"precision": 0.001},
}


def _trr(path, n_frames, n_atoms=23, seed=0):
    """A TRR of a small random molecule drifting in a box, with velocities and forces."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    rng = np.random.default_rng(seed)
    x = (np.cumsum(rng.normal(0, 0.05, (n_frames, n_atoms, 3)), axis=0) + rng.uniform(0, 4, (1, n_atoms, 3)))
    v = rng.normal(0, 1, (n_frames, n_atoms, 3))
    f = rng.normal(0, 300, (n_frames, n_atoms, 3))
    with TRRFile(path, "w") as handle:
        for i in range(n_frames):
            handle.write(x[i].astype(np.float32), v[i].astype(np.float32), f[i].astype(np.float32),
                         np.diag([6.0, 7.0, 8.0]).astype(np.float32), 10 * i, 0.02 * i, 0.0, n_atoms)


def _decoded(path):
    """Positions, velocities and forces as MDAnalysis's TRR decoder reads them (nm, float32)."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with TRRFile(path) as handle:
        frames = [(frame.x.copy(), frame.v.copy(), frame.f.copy()) for frame in handle]
    return tuple(np.stack(field) for field in zip(*frames))


def _values(path, element):
    """An element's values in nm (or nm/ps, kJ/(mol nm)), whatever their stored unit."""
    with h5py.File(path, "r") as handle:
        value = handle[f"{TRAJ}/{element}/value"]
        scale = {"pm": 1e-3, "fm": 1e-6}.get(value.attrs["unit"].decode() if isinstance(value.attrs["unit"], bytes)
                                               else str(value.attrs["unit"]), 1.0)
        return value[()].astype(np.float64) * scale, value.chunks


def test_split_is_left_to_the_data_in_lossy_layouts_only():
    assert Layout(precision=0.001).split_xyz is None
    assert Layout(velocity_precision=0.01).split_xyz is None
    assert Layout(precision=0.001, split_xyz=True).split_xyz is True
    assert Layout().split_xyz is False
    assert not Layout(compression="zstd").split_xyz
    assert not Layout(precision=0.001, split_xyz=False).split_xyz
    layout = Layout(compression="gzip", split_xyz=True, chunk_frames=4)
    assert layout.chunk_shape(10, 7) == (4, 7, 1)
    assert layout.chunk_shape(2, 7) == (2, 7, 1)
    assert Layout(compression="gzip", chunk_frames=4).chunk_shape(10, 7) == (4, 7, 3)
    with pytest.raises(ValueError, match="choose_split_xyz"):
        Layout(precision=0.001, chunk_frames=4).chunk_shape(10, 7)  # never chunked before the choice


def test_the_choice_follows_the_sample():
    """Molecules of three atoms scattered in a box (water-like) compress better apart; atoms
    scattered independently (a gas) do not, and stay together. The figures are said."""
    rng = np.random.default_rng(0)
    centres = rng.uniform(0, 6, (1, 3000, 1, 3))
    water = (centres + rng.normal(0, 0.06, (1, 3000, 3, 3))).reshape(1, 9000, 3)
    chosen = Layout(precision=0.001).plan_chunks(1, 9000).choose_split_xyz(water)
    assert chosen.split_xyz is True
    assert re.search(r"x, y and z in separate chunks: 0\.\d\dx the bytes of one chunk for the first frame "
                     r"\(0\.95x or less pays\)", chosen.chunk_reason), chosen.chunk_reason
    gas = rng.uniform(0, 6, (1, 9000, 3))
    kept = Layout(precision=0.001).plan_chunks(1, 9000).choose_split_xyz(gas)
    assert kept.split_xyz is False
    assert re.search(r"x, y and z in one chunk: separate chunks \(--split-xyz\) took [01]\.\d\dx the bytes of one "
                     r"chunk for the first frame", kept.chunk_reason), kept.chunk_reason
    asked = Layout(precision=0.001, split_xyz=False).plan_chunks(1, 9000).choose_split_xyz(water)
    assert asked.split_xyz is False  # the user's choice is kept


def test_a_sample_too_large_for_the_grid_is_the_usual_error():
    with pytest.raises(InputError, match="does not fit int32"):
        Layout(precision=0.001).plan_chunks(1, 10).choose_split_xyz(np.full((1, 10, 3), 3e6))


@pytest.mark.parametrize("options", [{}, {"contiguous": True}, {"compression": "none"}])
def test_split_without_compression_is_refused(options):
    with pytest.raises(UsageError, match="--split-xyz"):
        Layout(split_xyz=True, **options)


def test_split_without_compression_is_one_line_on_the_command_line(tmp_path, adk):
    done = run_h5mdtool(["convert", adk[1], "-o", str(tmp_path / "o.h5md"), "--split-xyz"])
    assert done.returncode == 2
    assert "--split-xyz" in done.stderr and "Traceback" not in done.stderr
    assert not os.listdir(tmp_path)


def test_auto_chunks_count_whole_frames_and_say_so():
    """The auto frame count is that of a frame's three chunks together (all of a frame fits the cache)."""
    joint = Layout(precision=0.001, split_xyz=False).plan_chunks(1000, 3341)
    split_layout = Layout(precision=0.001, split_xyz=True).plan_chunks(1000, 3341)
    assert split_layout.chunk_frames == joint.chunk_frames == 1024**2 // (3341 * 12)
    assert "separate chunks" in split_layout.chunk_reason and "separate" not in joint.chunk_reason


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("n_frames, chunk_frames", SHAPES, ids=SHAPE_IDS)
def test_split_chunks_round_trip(comm, shared_tmp, name, n_frames, chunk_frames):
    """Positions, velocities and forces of a split layout equal the decoded TRR (lossy ones within
    half their grid step), read by HDF5 and by MDAnalysis, and validate --against agrees."""
    options = LAYOUTS[name]
    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, n_frames, seed=n_frames)
    comm.Barrier()
    output = os.path.join(shared_tmp, "out.h5md")
    convert(source, output, comm=comm, progress=False, chunk_frames=chunk_frames, **options)
    comm.Barrier()
    x, v, f = _decoded(source)
    positions, chunks = _values(output, "position")
    assert chunks[:2] == (min(chunk_frames, n_frames), x.shape[1])
    assert chunks[2] == 1 or options.get("split_xyz") is None
    if "precision" in options:
        assert np.abs(positions - x).max() <= 0.0005 + 1e-6
        assert np.abs(positions).max() > 0.5  # not zeros
    else:
        np.testing.assert_array_equal(positions, x)
    velocities, velocity_chunks = _values(output, "velocity")
    assert velocity_chunks == chunks
    if "velocity_precision" in options:
        assert np.abs(velocities - v).max() <= options["velocity_precision"] / 2 + 1e-6
    else:
        np.testing.assert_array_equal(velocities, v)
    np.testing.assert_array_equal(_values(output, "force")[0], f)
    assert validate([output], against=[source], comm=comm, progress=False).exit_code == 0
    import hdf5plugin  # noqa: F401  (MDAnalysis's H5MDReader needs the plugin filters)
    from MDAnalysis.coordinates.H5MD import H5MDReader

    copy = H5MDReader(output)
    assert copy.n_frames == n_frames
    for ts, expected in zip(copy, x):
        np.testing.assert_allclose(ts.positions, expected * 10, rtol=0,
                                   atol=0.005 + 1e-4 if "precision" in options else 2e-5)
    copy.close()


@pytest.mark.parametrize("compression", ["gzip", "zstd", "blosc2"])
def test_direct_chunk_writes_split_into_three_chunks_per_frame_block(tmp_path, compression):
    """convert --threads encodes each coordinate's chunk apart, and HDF5 reads back the source."""
    source = str(tmp_path / "in.trr")
    _trr(source, 11, seed=3)
    output = str(tmp_path / "out.h5md")
    convert(source, output, progress=False, compression=compression, split_xyz=True, chunk_frames=4, threads=2)
    x, v, _ = _decoded(source)
    with h5py.File(output, "r") as handle:
        value = handle[f"{TRAJ}/position/value"]
        assert value.chunks == (4, 23, 1) and value.id.get_num_chunks() == 9
        np.testing.assert_array_equal(value[()], x)
        np.testing.assert_array_equal(handle[f"{TRAJ}/velocity/value"][()], v)


@pytest.mark.mpi
def test_bench_rmsd_on_a_split_file_equals_the_uncompressed_one(comm, shared_tmp, adk):
    """The RMSD benchmark reads split chunks as frames: the same RMSDs as on float32 frames,
    within what the 0.001 nm grid changes (partial chunks on every rank count)."""
    split_file = os.path.join(shared_tmp, "split.h5md")
    plain = os.path.join(shared_tmp, "plain.h5md")
    convert(adk[1], split_file, comm=comm, progress=False, precision=0.001, split_xyz=True, chunk_frames=7)
    convert(adk[1], plain, comm=comm, progress=False)
    comm.Barrier()
    rmsd_split = bench_rmsd(split_file, adk[0], comm=comm)
    rmsd_plain = bench_rmsd(plain, adk[0], comm=comm)
    if comm.rank == 0:
        got, want = np.asarray(rmsd_split["rmsd"])[:, 2], np.asarray(rmsd_plain["rmsd"])[:, 2]
        assert got.shape == want.shape == (98,)
        np.testing.assert_allclose(got, want, atol=0.01)  # Angstrom; coordinates moved by <= 0.005 A
        assert want.max() > 1.0


@pytest.mark.mpi
def test_split_h5md_parts_keep_split_chunks(comm, shared_tmp, adk, adk_frames):
    outdir = os.path.join(shared_tmp, "parts")
    split(adk[1], outdir, 3, comm=comm, format="h5md", precision=0.001, split_xyz=True, chunk_frames=5,
          progress=False)
    comm.Barrier()
    pieces = []
    for number in range(1, 4):
        positions, chunks = _values(os.path.join(outdir, f"part-{number:04d}.h5md"), "position")
        assert chunks[2] == 1
        pieces.append(positions)
    assert np.abs(np.concatenate(pieces) - adk_frames).max() <= 0.0005 + 1e-6


def test_relayout_keeps_or_drops_the_split(tmp_path, adk, adk_frames):
    """An H5MD input rewritten with --precision gets split chunks; rewritten lossless, whole ones."""
    joint = str(tmp_path / "joint.h5md")
    convert(adk[1], joint, compression="zstd", stop=9, progress=False)
    lossy = str(tmp_path / "lossy.h5md")
    convert(joint, lossy, precision=0.001, split_xyz=True, chunk_frames=4, progress=False)
    positions, chunks = _values(lossy, "position")
    assert chunks == (4, 3341, 1)
    assert np.abs(positions - adk_frames[:9]).max() <= 0.0005 + 1e-6
    back = str(tmp_path / "back.h5md")
    convert(lossy, back, compression="gzip", split_xyz=False, chunk_frames=2, progress=False)
    positions, chunks = _values(back, "position")
    assert chunks == (2, 3341, 3)
    assert np.abs(positions - adk_frames[:9]).max() <= 0.0005 + 1e-6


@pytest.mark.mpi
def test_lossy_layouts_split_where_it_pays(comm, shared_tmp, solvated, adk):
    """Left to h5mdtool, x, y and z go apart for the solvated system (water: 16% smaller) and
    stay together for AdK in vacuum (no gain): the same choice on every rank, said in the
    summary, and the same for split's H5MD parts."""
    water = os.path.join(shared_tmp, "water.h5md")
    protein = os.path.join(shared_tmp, "protein.h5md")
    summaries = [convert(solvated["XTC"], water, comm=comm, progress=False, precision=0.001, stop=3),
                 convert(adk[1], protein, comm=comm, progress=False, precision=0.001, stop=30)]
    comm.Barrier()
    assert _values(water, "position")[1][2] == 1
    assert _values(protein, "position")[1][2] == 3
    reasons = [summary["layout"]["chunk_reason"] for summary in summaries]
    assert "x, y and z in separate chunks: 0." in reasons[0]
    assert "x, y and z in one chunk" in reasons[1]
    outdir = os.path.join(shared_tmp, "parts")
    split(solvated["XTC"], outdir, 2, comm=comm, format="h5md", precision=0.001, stop=4, progress=False)
    comm.Barrier()
    assert _values(os.path.join(outdir, "part-0002.h5md"), "position")[1][2] == 1
    positions, _ = _values(water, "position")
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(solvated["XTC"]) as handle:
        source = np.stack([handle.read().x for _ in range(3)])
    assert np.abs(positions - source).max() <= 0.0005 + 1e-6


def test_lint_warns_of_split_xyz_only_when_uncompressed(tmp_path):
    from h5mdtool.check.findings import FileReport
    from h5mdtool.check.lint import lint_dataset

    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        handle.create_dataset("plain", shape=(8, 50, 3), dtype="f4", chunks=(2, 50, 1))
        handle.create_dataset("zstd", shape=(8, 50, 3), dtype="i4", chunks=(2, 50, 1), compression="gzip", shuffle=True)
        handle.create_dataset("atoms", shape=(8, 50, 3), dtype="i4", chunks=(2, 25, 1), compression="gzip")
        found = {}
        for name in ("plain", "zstd", "atoms"):
            report = FileReport(path)
            lint_dataset(report, name, handle[name], path)
            found[name] = {finding.rule for finding in report.findings}
    assert "LINT002" in found["plain"]
    assert "LINT002" not in found["zstd"] and "LINT001" not in found["zstd"]
    assert {"LINT001", "LINT002"} <= found["atoms"]
