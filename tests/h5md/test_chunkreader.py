"""h5mdtool's chunk reader beyond plain reads: values cast and scaled by the decoding thread,
one row of chunks decoded in the calling thread, and deflate streams inflated by libdeflate
when it is installed (zlib otherwise). The oracle is HDF5 reading the dataset, numpy
scaling its values, and zlib inflating the streams."""

import os
import threading
import zlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forked import exit_code_within
from h5mdtool.h5md import chunkcodec
from h5mdtool.h5md.chunkcodec import ChunkReader, FilterPipeline, inflate
from h5mdtool.h5md.codecs import codec

CODECS = ["gzip", "zstd", "lz4", "blosc2"]


def _dataset(handle, name, values, chunk_frames, compression, split_xyz=False):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    chosen = codec(compression)
    chosen.set_on(dcpl, chosen.default_level, True)
    chunks = (chunk_frames, values.shape[1], 1 if split_xyz else 3)
    dataset = handle.create_dataset(name, shape=values.shape, maxshape=(None,) + values.shape[1:], chunks=chunks,
                                    dtype=values.dtype, dcpl=dcpl)
    dataset[...] = values
    return dataset


@settings(max_examples=40, deadline=None)
@given(compression=st.sampled_from(CODECS), dtype=st.sampled_from(["float32", "int32", "float64"]),
       n_frames=st.integers(1, 20), chunk_frames=st.integers(1, 8), n_atoms=st.integers(1, 30),
       threads=st.integers(1, 3), read_threads=st.sampled_from([None, 1, 2, 3]),
       store_rows=st.sampled_from([None, 1, 2, 3]), split_xyz=st.booleans(),
       scale=st.sampled_from([None, 10.0, 0.01, 1e-4]), data=st.data())
def test_values_cast_and_scaled_by_the_decoding_thread(tmp_path_factory, compression, dtype, n_frames, chunk_frames,
                                                       n_atoms, threads, read_threads, store_rows, split_xyz, scale,
                                                       data):
    """float32 out of any stored dtype, times a float32 factor: numpy's cast then product in
    float32 (what MDAnalysis's H5MDReader computes), bit for bit, for any rows and atoms, any
    number of threads decoding the read and any number of rows of chunks stored at once."""
    values = (np.random.default_rng(n_frames).standard_normal((n_frames, n_atoms, 3)) * 5e4).astype(dtype)
    path = str(tmp_path_factory.mktemp("scaled") / "x.h5")
    chunk_frames = min(chunk_frames, n_frames)
    with h5py.File(path, "w", libver=("v110", "latest")) as handle:
        _dataset(handle, "x", values, chunk_frames, compression, split_xyz)
    start = data.draw(st.integers(0, n_frames - 1))
    stop = data.draw(st.integers(start + 1, n_frames))
    first = data.draw(st.integers(0, n_atoms - 1))
    last = data.draw(st.integers(first + 1, n_atoms))
    factor = None if scale is None else np.float32(scale)
    reader = ChunkReader(threads)
    store_bytes = chunkcodec.STORE_BYTES
    if store_rows is not None:
        chunkcodec.STORE_BYTES = store_rows * chunk_frames * n_atoms * 3 * np.dtype(dtype).itemsize
    try:
        with h5py.File(path, "r") as handle:
            out = np.empty((stop - start, last - first, 3), np.float32)
            assert reader.read(handle["x"], start, stop, (first, last), out, factor, read_threads)
    finally:
        chunkcodec.STORE_BYTES = store_bytes
        reader.close()
    expected = values[start:stop, first:last].astype(np.float32)
    if factor is not None:
        expected *= factor
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("out_kind", ["contiguous", "rows-of-a-wider-array", "every-other-frame"])
def test_whole_chunks_decoded_in_place_only_into_contiguous_out(tmp_path, out_kind):
    """Whole chunks of all atoms, neither cast nor scaled, are decoded straight into *out*
    when it is contiguous; into an *out* that is not (a view of a wider array), through
    the scratch array: the values land in *out* either way, and nothing around it changes."""
    values = np.random.default_rng(5).standard_normal((12, 7, 3)).astype(np.float32)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 3, "zstd")
    whole = np.full((24, 9, 3), -1, np.float32)
    out = {"contiguous": whole[:12, :7].copy(), "rows-of-a-wider-array": whole[:12, :7],
           "every-other-frame": whole[::2, :7]}[out_kind]
    reader = ChunkReader(2)
    try:
        with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
            assert reader.read(handle["x"], 0, 12, (0, 7), out)
    finally:
        reader.close()
    np.testing.assert_array_equal(out, values)
    if out_kind != "contiguous":
        untouched = np.ones(whole.shape, bool)
        if out_kind == "every-other-frame":
            untouched[::2, :7] = False
        else:
            untouched[:12, :7] = False
        assert (whole[untouched] == -1).all()


def test_datasets_hdf5_reads_are_returned_unscaled(tmp_path):
    """Unfiltered datasets are read by HDF5 into out of their own dtype (read says so), and
    refused into another dtype."""
    values = np.arange(60, dtype=np.int32).reshape(5, 4, 3)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        handle.create_dataset("x", data=values, chunks=(2, 4, 3))
    reader = ChunkReader(2)
    with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
        out = np.empty((5, 4, 3), np.int32)
        assert reader.read(handle["x"], 0, 5, (0, 4), out, np.float32(2)) is False
        np.testing.assert_array_equal(out, values)
        with pytest.raises(ValueError, match="dtype"):
            reader.read(handle["x"], 0, 5, (0, 4), np.empty((5, 4, 3), np.float32))
    reader.close()


def test_chunks_never_written_are_scaled_too(tmp_path):
    """A chunk never written is filled by HDF5 (zeros), the others scaled, into float32."""
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        values = np.full((6, 4, 3), 3, np.int32)
        dataset = _dataset(handle, "x", values[:2], 2, "zstd")
        dataset.resize((6, 4, 3))
    reader = ChunkReader(2)
    with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
        out = np.empty((6, 4, 3), np.float32)
        assert reader.read(handle["x"], 0, 6, (0, 4), out, np.float32(0.5))
    reader.close()
    assert (out[:2] == 1.5).all() and (out[2:] == 0).all()


@pytest.mark.parametrize("compression", CODECS)
def test_one_damaged_row_of_chunks_decoded_in_the_calling_thread(tmp_path, compression):
    """A read of one row of chunks (decoded without the pool) still reports damage as an
    OSError and reads the other rows."""
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        dataset = _dataset(handle, "x", np.arange(600, dtype=np.float32).reshape(4, 50, 3), 2, compression)
        mask, stored = dataset.id.read_direct_chunk((2, 0, 0))
        dataset.id.write_direct_chunk((2, 0, 0), stored[: len(stored) // 2], filter_mask=mask)
    reader = ChunkReader(2)
    submitted = []
    original = reader.pool.submit
    reader.pool.submit = lambda *args: submitted.append(1) or original(*args)
    with h5py.File(path, "r") as handle:
        out = np.empty((2, 50, 3), np.float32)
        reader.read(handle["x"], 0, 2, (0, 50), out)
        np.testing.assert_array_equal(out, np.arange(300, dtype=np.float32).reshape(2, 50, 3))
        with pytest.raises(OSError, match="decompress"):
            reader.read(handle["x"], 3, 4, (0, 50), out[:1])
    reader.close()
    assert not submitted


@pytest.mark.parametrize("threads, tasks", [(1, 0), (2, 1), (None, 2), (5, 2)])
def test_each_thread_decodes_one_group_of_rows_the_calling_thread_the_first(tmp_path, threads, tasks):
    """A read of 7 rows of chunks by a reader of 3 threads: *threads* of them decode it (None:
    all 3, more: no more than 3), each one contiguous group, so the pool gets one task per
    thread beyond the calling one; the values are HDF5's."""
    values = np.arange(7 * 2 * 20 * 3, dtype=np.float32).reshape(14, 20, 3)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 2, "zstd")
    reader = ChunkReader(3)
    submitted = []
    original = reader.pool.submit
    reader.pool.submit = lambda function, *args: submitted.append(args[1]) or original(function, *args)
    try:
        with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
            out = np.empty((13, 20, 3), np.float32)
            assert reader.read(handle["x"], 1, 14, (0, 20), out, None, threads)
    finally:
        reader.close()
    np.testing.assert_array_equal(out, values[1:])
    assert len(submitted) == tasks
    assert all(len(group) >= 2 for group in submitted)  # groups, not single rows of chunks


@pytest.mark.parametrize("start", [0, 2, 6])
def test_a_read_of_no_rows_reads_nothing(tmp_path, start):
    """An empty range of rows (a rank without frames), at a chunk's border or the end, is
    read as nothing, as HDF5 would, whatever the threads."""
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", np.ones((6, 4, 3), np.float32), 2, "zstd")
    reader = ChunkReader(2)
    try:
        with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
            assert reader.read(handle["x"], start, start, (0, 4), np.empty((0, 4, 3), np.float32))
    finally:
        reader.close()


def test_damage_in_a_later_group_names_its_row(tmp_path):
    """A damaged chunk in the rows a pool thread decodes is an OSError naming the first row
    asked of it, as in the calling thread's group."""
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        dataset = _dataset(handle, "x", np.arange(1200, dtype=np.float32).reshape(8, 50, 3), 2, "zstd")
        mask, stored = dataset.id.read_direct_chunk((6, 0, 0))
        dataset.id.write_direct_chunk((6, 0, 0), stored[: len(stored) // 2], filter_mask=mask)
    reader = ChunkReader(2)
    try:
        with h5py.File(path, "r") as handle:
            with pytest.raises(chunkcodec.DamagedChunk, match="decompress") as caught:
                reader.read(handle["x"], 1, 8, (0, 50), np.empty((7, 50, 3), np.float32))
    finally:
        reader.close()
    assert caught.value.row == 6


@pytest.mark.parametrize("split_xyz", [False, True])
def test_stored_bytes_are_read_into_one_reused_array(tmp_path, split_xyz):
    """Every chunk of a read is read into one array of the reader's, reused by the next read
    from the same thread: a new bytes object per chunk, freed together at the read's end,
    made glibc give the pages back and fault them in again at every read (74 page faults a
    chunk on the 600x zstd AdK file)."""
    values = np.random.default_rng(3).standard_normal((12, 40, 3)).astype(np.float32)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 3, "zstd", split_xyz)
    seen = []

    class SpiedID:  # h5py's DatasetID (a Cython type) takes no new methods: wrap it
        def __init__(self, identifier):
            self.identifier = identifier

        def __getattr__(self, name):
            return getattr(self.identifier, name)

        def read_direct_chunk(self, offsets, dxpl=None, out=None):
            seen.append(out)
            return self.identifier.read_direct_chunk(offsets, dxpl=dxpl, out=out)

    class Spied:
        def __init__(self, dataset):
            self.dataset, self.id = dataset, SpiedID(dataset.id)

        def __getattr__(self, name):
            return getattr(self.dataset, name)

    reader = ChunkReader(2)
    try:
        with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
            dataset = Spied(handle["x"])
            areas = []
            for start, stop in [(0, 12), (4, 11), (0, 12)]:
                out = np.empty((stop - start, 40, 3), np.float32)
                assert reader.read(dataset, start, stop, (0, 40), out)
                np.testing.assert_array_equal(out, values[start:stop])
                areas.append(reader._stored.area)
    finally:
        reader.close()
    assert seen and all(out is not None and out.base is areas[0] for out in seen)
    assert areas[1] is areas[0] and areas[2] is areas[0]


def test_a_chunk_larger_than_its_room_is_read_by_hdf5(tmp_path, monkeypatch):
    """A stored chunk that does not fit the room the read made for it (a filter that grew
    it beyond :func:`stored_bound`) is read by HDF5 with the rest of the read: the same
    values."""
    values = np.random.default_rng(4).standard_normal((9, 30, 3)).astype(np.float32)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 3, "zstd")
    monkeypatch.setattr(chunkcodec, "stored_bound", lambda size: 16)
    reader = ChunkReader(2)
    try:
        with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
            out = np.empty((8, 30, 3), np.float32)
            assert reader.read(handle["x"], 1, 9, (0, 30), out, np.float32(10))
    finally:
        reader.close()
    np.testing.assert_array_equal(out, values[1:] * np.float32(10))


def _streams():
    rng = np.random.default_rng(5)
    smooth = np.cumsum(rng.normal(0, 0.01, 30000)).astype(np.float32).tobytes()
    return [zlib.compress(data, level) for data in (b"", b"x" * 100000, smooth, rng.bytes(5000)) for level in (1, 4, 9)]


@pytest.mark.parametrize("libdeflate", [True, False], ids=["libdeflate-if-installed", "zlib"])
def test_inflate_equals_zlib_whatever_the_size_given(monkeypatch, libdeflate):
    """The bytes zlib gives, with the right size, a wrong one or none; a damaged stream is
    zlib's error."""
    if not libdeflate:
        monkeypatch.setattr(chunkcodec, "_libdeflate_zlib_decompress", None)
    for stream in _streams():
        expected = zlib.decompress(stream)
        for size in (len(expected), len(expected) + 7, max(0, len(expected) - 1), None):
            assert inflate(stream, size) == expected
        with pytest.raises(zlib.error):
            inflate(stream[: len(stream) // 2], len(expected))
        damaged = bytearray(stream)
        damaged[-1] ^= 0xFF  # the Adler-32 checksum
        with pytest.raises(zlib.error):
            inflate(bytes(damaged), len(expected))


def test_gzip_chunks_inflated_by_libdeflate_when_installed(tmp_path, monkeypatch):
    """With libdeflate installed, every gzip chunk goes through it (with the chunk's size)
    and reads what HDF5 reads."""
    pytest.importorskip("deflate")
    calls = []
    original = chunkcodec._libdeflate_zlib_decompress
    monkeypatch.setattr(chunkcodec, "_libdeflate_zlib_decompress", lambda data, size: calls.append(size) or
                        original(data, size))
    values = np.random.default_rng(1).standard_normal((7, 20, 3)).astype(np.float32)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 3, "gzip")
    reader = ChunkReader(2)
    with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
        out = np.empty_like(values)
        reader.read(handle["x"], 0, 7, (0, 20), out)
        assert FilterPipeline.of(handle["x"]).sized_output == [True, True]
    reader.close()
    np.testing.assert_array_equal(out, values)
    assert calls == [3 * 20 * 3 * 4] * 3


def test_zstd_chunks_decoded_with_reused_contexts_when_installed(tmp_path, monkeypatch):
    """With python-zstandard installed, Zstd chunks are decoded by it (not by the plugin's
    filter) and read what HDF5 reads."""
    pytest.importorskip("zstandard")
    values = np.random.default_rng(2).standard_normal((9, 30, 3)).astype(np.float32)
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        _dataset(handle, "x", values, 4, "zstd")
    plugin_runs = []
    original = chunkcodec._Buffer.run
    monkeypatch.setattr(chunkcodec._Buffer, "run", lambda self, *a: plugin_runs.append(1) or original(self, *a))
    reader = ChunkReader(2)
    with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
        out = np.empty_like(values)
        reader.read(handle["x"], 0, 9, (0, 30), out)
    reader.close()
    np.testing.assert_array_equal(out, values)
    assert not plugin_runs


@pytest.mark.parametrize("zstandard", [True, False], ids=["zstandard-if-installed", "plugin"])
def test_zstd_chunk_of_two_frames_is_an_error_never_half_a_chunk(tmp_path, monkeypatch, zstandard):
    """A chunk written as two Zstandard frames one after the other: python-zstandard's
    one-shot decoding and the plugin's filter both stop after the first (HDF5 then returns
    the first frame's bytes and uninitialised memory); h5mdtool reads the whole chunk right
    or reports it damaged."""
    z = pytest.importorskip("zstandard")
    if not zstandard:
        monkeypatch.setattr(chunkcodec, "_ZSTANDARD", [None])
    values = np.arange(2 * 10 * 3, dtype=np.float32).reshape(2, 10, 3)
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        codec("zstd").set_on(dcpl, 3, False)
        dataset = handle.create_dataset("x", shape=values.shape, maxshape=(None, 10, 3), chunks=(2, 10, 3),
                                        dtype=np.float32, dcpl=dcpl)
        raw = values.tobytes()
        half = len(raw) // 2
        frames = z.ZstdCompressor().compress(raw[:half]) + z.ZstdCompressor().compress(raw[half:])
        dataset.id.write_direct_chunk((0, 0, 0), frames, filter_mask=0)
    reader = ChunkReader(2)
    out = np.empty_like(values)
    try:
        with h5py.File(path, "r") as handle:
            reader.read(handle["x"], 0, 2, (0, 10), out)
        np.testing.assert_array_equal(out, values)
    except OSError as error:
        assert "decompress" in str(error)
    finally:
        reader.close()


class _MemoryErrorOnRead:
    """A dataset's id whose ``read_direct_chunk`` raises MemoryError, as HDF5 1.14.5 with h5py
    3.16 does for a dataset no chunk was written to; everything else is the real id's."""

    def __init__(self, dataset):
        self._id = dataset.id

    def read_direct_chunk(self, corner):
        raise MemoryError

    def __getattr__(self, name):
        return getattr(self._id, name)


class _Dataset:
    def __init__(self, dataset):
        self.id = _MemoryErrorOnRead(dataset)


@pytest.mark.parametrize("written", [[], [0], [3, 7]])
def test_chunk_stored_answers_when_reading_the_chunk_gives_memory_error(tmp_path, written):
    """Regression (HDF5 1.14.5): validate's check of a dataset declaring 2**40 rows with none
    written reported "cannot read the storage: MemoryError" instead of its missing rows."""
    with h5py.File(tmp_path / "f.h5", "w") as handle:
        dataset = handle.create_dataset("v", shape=(10, 4, 3), maxshape=(None, 4, 3), chunks=(1, 4, 3), dtype="f4")
        for row in written:
            dataset[row] = 1.0
        for row in range(10):
            expected = row in written
            assert chunkcodec.chunk_stored(dataset, (row, 0, 0)) is expected
            assert chunkcodec.chunk_stored(_Dataset(dataset), (row, 0, 0)) is expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_decodes_though_a_thread_of_its_parent_held_the_plugins_lock():
    """A decoding thread holding the lock of hdf5plugin's libraries when its process forks
    (MDAnalysis's multiprocessing workers) must not leave the child's copy locked."""
    chunkcodec._plugin_function(32015)
    held, release = threading.Event(), threading.Event()

    def hold():
        with chunkcodec._PLUGINS_LOCK:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(30)
    try:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                chunkcodec._plugin_function(32015)
                status = 0
            finally:
                os._exit(status)
    finally:
        release.set()
        thread.join()
    code = exit_code_within(pid, timeout=60)
    assert code is not None, "the child waited for the lock its parent's thread held"
    assert code == 0
