"""``--compression blosc2 --shuffle``: Blosc2's own byte shuffle instead of its bit shuffle,
the smallest layout of the compression study (docs/layouts.md), written serially, in
threads and on several ranks, and read back as the XTC's integers."""

import os

import h5py
import numpy as np
import pytest

from h5mdtool import convert
from h5mdtool.formats import TrajectoryReader, scan

POSITION = "particles/trajectory/position/value"
#: hdf5plugin's Blosc2 filter id, and the position of the shuffle choice in its cd_values
BLOSC2_ID, BLOSC2_FILTERS_AT = 32026, 5
BLOSC2_SHUFFLE, BLOSC2_BITSHUFFLE = 1, 2


def _filters(path):
    """(filter id, cd_values) of the positions' pipeline, in order."""
    with h5py.File(path, "r") as f:
        plist = f[POSITION].id.get_create_plist()
        return [(plist.get_filter(i)[0], tuple(plist.get_filter(i)[2])) for i in range(plist.get_nfilters())]


def _stored(path):
    """The positions as stored: int32 pm."""
    with h5py.File(path, "r") as f:
        assert f[POSITION].attrs["unit"] == "pm"
        return f[POSITION][()]


def _xtc_grid(path):
    """The XTC's integers (pm at precision 1000), from h5mdtool's reader of the XTC."""
    return np.rint(_positions(path).astype(np.float64) * 1000).astype(np.int32)


def _positions(path):
    index = scan([path])
    with TrajectoryReader(index, None, ("positions",)) as reader:
        block = reader.new_block(index.n_frames, ("positions",))
        reader.read(np.arange(index.n_frames), block, ("positions",))
    return block.positions


@pytest.fixture(scope="module")
def adk_xtc(tmp_path_factory, adk_frames):
    from conftest import write_xtc

    path = str(tmp_path_factory.mktemp("blosc2") / "adk.xtc")
    frames = np.arange(len(adk_frames))
    write_xtc(path, adk_frames, frames * 10, frames * 2.0)
    return path


def test_shuffle_chooses_blosc2s_byte_shuffle_and_stores_less(tmp_path, adk_xtc):
    bit, byte = str(tmp_path / "bit.h5md"), str(tmp_path / "byte.h5md")
    convert(adk_xtc, bit, precision="xtc", compression="blosc2", progress=False)
    convert(adk_xtc, byte, precision="xtc", compression="blosc2", shuffle=True, progress=False)
    (bit_id, bit_values), = _filters(bit)
    (byte_id, byte_values), = _filters(byte)  # no HDF5 shuffle filter before Blosc2
    assert bit_id == byte_id == BLOSC2_ID
    assert bit_values[BLOSC2_FILTERS_AT] == BLOSC2_BITSHUFFLE and byte_values[BLOSC2_FILTERS_AT] == BLOSC2_SHUFFLE
    with h5py.File(bit, "r") as f, h5py.File(byte, "r") as g:
        np.testing.assert_array_equal(f[POSITION][()], g[POSITION][()])
        assert g[POSITION].id.get_storage_size() < 0.95 * f[POSITION].id.get_storage_size()
    np.testing.assert_array_equal(_stored(byte), _xtc_grid(adk_xtc))


def test_threads_write_the_same_chunks(tmp_path, adk_xtc):
    """--threads encodes the chunks outside HDF5 with the dataset's own Blosc2 options."""
    hdf5, threads = str(tmp_path / "hdf5.h5md"), str(tmp_path / "threads.h5md")
    convert(adk_xtc, hdf5, precision="xtc", compression="blosc2", shuffle=True, progress=False)
    convert(adk_xtc, threads, precision="xtc", compression="blosc2", shuffle=True, threads=2, progress=False)
    assert _filters(threads) == _filters(hdf5)
    np.testing.assert_array_equal(_stored(threads), _xtc_grid(adk_xtc))


@pytest.mark.mpi
def test_byte_shuffled_blosc2_in_parallel(comm, shared_tmp, adk_segments):
    output = os.path.join(shared_tmp, "parallel.h5md")
    convert(adk_segments["parts"], output, comm=comm, precision="xtc", compression="blosc2", shuffle=True,
            chunk_frames=8, progress=False)
    comm.Barrier()
    (filter_id, values), = _filters(output)
    assert filter_id == BLOSC2_ID and values[BLOSC2_FILTERS_AT] == BLOSC2_SHUFFLE
    np.testing.assert_array_equal(_stored(output), _xtc_grid(adk_segments["whole"]))
