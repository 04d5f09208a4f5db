"""The compression study's prototypes (benchmarks/layout_candidates.py) and h5mdtool.h5md.chunkcodec on them.

What the recommended layouts rest on, on real data (the AdK DCD's positions on XTC's
0.001 nm grid): the filters round-trip in collective parallel writes (mpi-marked: also run
on 2 and 3 ranks), int32 positions in pm read back through MDAnalysis to the right
Angstrom values, chunks compressed outside HDF5 are byte for byte what HDF5 writes, and
the error bounds of the lossy layouts hold.
"""

import os
import sys

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")

from conftest import ROOT  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from h5mdtool.h5md.chunkcodec import FilterPipeline  # noqa: E402
from layout_candidates import XTC_GRID_NM, candidates, max_error_nm, write_file  # noqa: E402

#: lossless (int32 pm or float32) and lossy layouts the study recommends or compares
PARALLEL_KEYS = ["i32-shuffle-gzip4", "i32-shuffle-zstd3", "i32-bshuf-lz4", "i32-blosc2-shuffle-zstd5",
                 "i32-blosc2-bitshuffle-zstd5", "f32-blosc2-bitshuffle-zstd1", "i32-nbit-shuffle-gzip4",
                 "f32-sz-abs", "f32-zfp-acc", "f32-so3-gzip4"]


@pytest.fixture(scope="module")
def grid_positions():
    """The AdK DCD's 98 frames (nm, float32) rounded to XTC's grid as its decoder returns them."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    u = mda.Universe(PSF, DCD)
    nm = np.stack([ts.positions for ts in u.trajectory]).astype(np.float64) / 10.0
    return (np.rint(nm / XTC_GRID_NM) * np.float32(XTC_GRID_NM)).astype(np.float32)


def _stored_range(candidate, positions):
    encoded = candidate.representation.encode(positions)
    return (int(encoded.min()), int(encoded.max())) if candidate.nbit else None


@pytest.mark.mpi
@pytest.mark.parametrize("key", PARALLEL_KEYS)
@pytest.mark.parametrize("n_frames, chunk", [(98, 8), (8, 8)], ids=["many-chunks", "one-chunk"])
def test_collective_write_round_trip(comm, shared_tmp, grid_positions, key, n_frames, chunk):
    """Every rank writes its whole chunks collectively; the file reads back as written."""
    candidate = candidates()[key]
    positions = grid_positions[:n_frames]
    path = os.path.join(shared_tmp, f"{key}.h5md")
    write_file(path, candidate, positions, chunk, comm, stored_range=_stored_range(candidate, positions))
    comm.Barrier()
    with h5py.File(path, "r") as handle:
        stored = handle["particles/trajectory/position/value"][()]
    if candidate.lossy:
        # float32 rounding of the stored value on top of the bound
        tolerance = candidate.bound_nm + np.abs(positions).max() * 2.0**-23
        assert np.abs(candidate.representation.decode(stored) - positions).max() <= tolerance
    else:
        np.testing.assert_array_equal(stored, candidate.representation.encode(positions))
    comm.Barrier()


def test_int32_pm_grid_is_exact(grid_positions):
    """The XTC's grid in pm holds its data exactly: decoding gives the positions to float32 rounding."""
    rep = candidates()["i32-shuffle-gzip4"].representation
    stored = rep.encode(grid_positions)
    assert stored.dtype == np.int32 and rep.unit == "pm"
    np.testing.assert_array_equal(stored, np.rint(grid_positions.astype(np.float64) * 1000).astype(np.int32))
    assert np.abs(rep.decode(stored) - grid_positions).max() < 1e-6


def test_mdanalysis_reads_int32_pm_in_angstrom(tmp_path, grid_positions):
    """MDAnalysis's H5MDReader applies the unit: int32 pm become the right Angstrom values."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import PSF

    from h5mdtool.parallel.mpi import SerialComm

    path = str(tmp_path / "pm.h5md")
    write_file(path, candidates()["i32-shuffle-gzip4"], grid_positions, 32, SerialComm())
    u = mda.Universe(PSF, path)
    assert len(u.trajectory) == len(grid_positions)
    for ts in u.trajectory[::13]:
        np.testing.assert_allclose(ts.positions, grid_positions[ts.frame] * 10.0, rtol=0, atol=2e-5)


@pytest.mark.parametrize("key", ["i32-shuffle-gzip4", "i32-shuffle-zstd3", "i32-bshuf-lz4", "i32-blosc2-shuffle-zstd5",
                                 "f32-blosc2-bitshuffle-zstd1", "f32-sz-abs", "f32-zfp-acc"])
def test_chunks_compressed_outside_hdf5_are_hdf5s_bytes(tmp_path, grid_positions, key):
    """FilterPipeline gives the bytes HDF5's own filters write (SZ and ZFP too), but for
    deflate, whose byte planes it deflates apart (:func:`~h5mdtool.h5md.chunkcodec.deflate_planes`:
    HDF5's filter decodes them, checked below); direct chunk writes read back."""
    candidate = candidates()[key]
    stored = candidate.representation.encode(grid_positions[:64])
    with h5py.File(tmp_path / "c.h5", "w") as handle:
        options = dict(candidate.filters())
        reference = handle.create_dataset("reference", data=stored, chunks=(32,) + stored.shape[1:], **options)
        direct = handle.create_dataset("direct", shape=stored.shape, dtype=stored.dtype,
                                       chunks=(32,) + stored.shape[1:], **options)
        pipeline = FilterPipeline.of(direct)
        for start in (0, 32):
            piece = bytes(pipeline.encode(stored[start:start + 32])[0])
            if "gzip" not in key:
                assert piece == reference.id.read_direct_chunk((start, 0, 0))[1]
            direct.id.write_direct_chunk((start, 0, 0), piece)
    with h5py.File(tmp_path / "c.h5", "r") as handle:
        np.testing.assert_array_equal(handle["direct"][()], handle["reference"][()])


@pytest.mark.parametrize("q_nm", [0.01, 0.001, 0.0001])
def test_lossy_layouts_stay_within_half_q(tmp_path, grid_positions, q_nm):
    """SZ, SZ3, ZFP and the integer grid keep every coordinate within Q/2 (plus float32 rounding)."""
    from h5mdtool.parallel.mpi import SerialComm

    table = candidates(q_nm)
    tolerance = q_nm / 2 + np.abs(grid_positions).max() * 2.0**-23
    for key in ("f32-sz-abs", "f32-sz3-abs", "f32-zfp-acc", "i32-shuffle-zstd3"):
        path = str(tmp_path / f"{key}.h5md")
        write_file(path, table[key], grid_positions, 16, SerialComm())
        assert max_error_nm(path, grid_positions) <= tolerance, key


def test_hdf5_plugin_path_breaks_plugin_writes(tmp_path):
    """Documented trap: with HDF5_PLUGIN_PATH set, hdf5plugin leaves its filters to HDF5's
    dynamic loading, and creating a Bitshuffle dataset fails (measured with hdf5plugin 7.1,
    HDF5 1.10.8). Writers must import hdf5plugin and not set HDF5_PLUGIN_PATH."""
    import subprocess

    script = ("import h5py, hdf5plugin, numpy as np\n"
              "f = h5py.File('x.h5', 'w')\n"
              "f.create_dataset('v', data=np.zeros((8, 10, 3), np.int32), chunks=(8, 10, 3),"
              " compression=hdf5plugin.Bitshuffle())\n")
    plain = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"})
    assert plain.returncode == 0, plain.stderr
    with_path = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                               env=dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH))
    assert with_path.returncode != 0 and "error during user callback" in with_path.stderr
