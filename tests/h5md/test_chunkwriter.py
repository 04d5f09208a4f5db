"""Chunks compressed in h5mdtool's threads and stored with HDF5's direct chunk write (issue 13, item 5).

The oracle is HDF5 itself (its filters decoding what :mod:`h5mdtool.h5md.chunkcodec` encoded) and
MDAnalysis reading the source trajectory. Shapes cover one frame, one chunk holding every
frame, many chunks with a partial last one, and ranks without frames (mpi-marked tests also
run on 2 and 3 ranks).
"""

import glob
import json
import os

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5mdtool import convert
from h5mdtool.h5md.chunkcodec import FilterPipeline, UnsupportedPipeline
from h5mdtool.h5md.chunkwriter import encoding_threads
from h5mdtool.parallel.mpi import SerialComm, threads_per_rank
from h5mdtool.h5md.codecs import codec
from h5mdtool.parallel.errors import OutputError

TRAJ = "particles/trajectory"
CODECS = ["gzip", "zstd", "lz4", "blosc2"]


def _dataset(handle, name, shape, chunk_frames, dtype, compression, shuffle, split_xyz=False):
    """A compressed dataset chunked by whole frames; with *split_xyz*, x, y and z apart."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    chosen = codec(compression)
    chosen.set_on(dcpl, chosen.default_level, shuffle)
    chunks = (chunk_frames,) + shape[1:-1] + ((1,) if split_xyz else shape[-1:])
    return handle.create_dataset(name, shape=shape, maxshape=(None,) + shape[1:], chunks=chunks, dtype=dtype, dcpl=dcpl)


@settings(max_examples=60, deadline=None)
@given(compression=st.sampled_from(CODECS), shuffle=st.booleans(),
       dtype=st.sampled_from(["float32", "float64", "int32"]), n_frames=st.integers(1, 9),
       chunk_frames=st.integers(1, 12), n_atoms=st.integers(1, 40), kind=st.sampled_from(["smooth", "random", "zeros"]),
       seed=st.integers(0, 2**16), split_xyz=st.booleans())
def test_encoded_chunks_read_back_through_hdf5(tmp_path_factory, compression, shuffle, dtype, n_frames, chunk_frames,
                                               n_atoms, kind, seed, split_xyz):
    """Whatever the codec, dtype, chunk (x, y and z together or apart) and data, HDF5's own
    filters decode what the pipeline encoded."""
    rng = np.random.default_rng(seed)
    shape = (n_frames, n_atoms, 3)
    if kind == "random":
        data = rng.standard_normal(shape) * 1e6
    elif kind == "smooth":
        data = np.cumsum(rng.normal(0, 0.01, shape), axis=0) + 3
    else:
        data = np.zeros(shape)
    data = data.astype(dtype)
    chunk_frames = min(chunk_frames, n_frames)
    path = str(tmp_path_factory.mktemp("pipeline") / "x.h5")
    with h5py.File(path, "w", libver=("v110", "latest")) as handle:
        dataset = _dataset(handle, "x", shape, chunk_frames, dtype, compression, shuffle, split_xyz)
        found = FilterPipeline.of(dataset)
        pipeline = FilterPipeline(found.filters, found.itemsize)  # built from plain values, as from another process
        width = dataset.chunks[2]
        for first in range(0, n_frames, chunk_frames):
            for column in range(0, 3, width):
                chunk = np.zeros((chunk_frames, n_atoms, width), dtype)
                rows = data[first:first + chunk_frames, :, column:column + width]
                chunk[:len(rows)] = rows
                stored, mask = pipeline.encode(chunk)
                assert bytes(pipeline.decode(stored, mask)) == chunk.tobytes()
                dataset.id.write_direct_chunk((first, 0, column), stored, filter_mask=mask)
    with h5py.File(path, "r") as handle:
        np.testing.assert_array_equal(handle["x"][()], data)


def test_filters_only_hdf5_runs_are_refused(tmp_path):
    """lzf (h5py's) and scale-offset run only inside HDF5: the pipeline says so instead of guessing."""
    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        lzf = handle.create_dataset("lzf", shape=(4, 3), chunks=(2, 3), dtype="f4", compression="lzf")
        scaled = handle.create_dataset("so", shape=(4, 3), chunks=(2, 3), dtype="i4", scaleoffset=0)
        for dataset in (lzf, scaled):
            with pytest.raises(UnsupportedPipeline):
                FilterPipeline.of(dataset)


def _trr(path, positions, velocities_every=None):
    """A TRR with a box; velocities in every *velocities_every*-th frame (their own element)."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    rng = np.random.default_rng(5)
    with TRRFile(path, "w") as handle:
        for i, x in enumerate(positions):
            v = None
            if velocities_every and i % velocities_every == 0:
                v = rng.standard_normal(x.shape).astype(np.float32)
            handle.write(x, v, None, np.diag([9.0, 8.0, 7.0]).astype(np.float32), 10 * i, 0.5 * i, 0.0, len(x))


def _read_trr(path):
    """Positions and the velocities present (nm, nm/ps, as stored), read by MDAnalysis's TRR decoder."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    with TRRFile(path) as handle:
        frames = [(frame.x.copy(), frame.v.copy() if frame.hasv else None) for frame in handle]
    return np.stack([x for x, _ in frames]), [v for _, v in frames if v is not None]


#: (frames, chunk frames): one frame; one chunk holding every frame; many chunks, the last
#: partial; fewer chunks than 3 ranks (a rank without frames)
SHAPES = [(1, 1), (5, 8), (11, 3), (2, 1)]


@pytest.mark.mpi
@pytest.mark.parametrize("parallel_compression", ["hdf5", "ranks"])
@pytest.mark.parametrize("compression", CODECS)
@pytest.mark.parametrize("n_frames, chunk_frames", SHAPES, ids=["one-frame", "one-chunk", "many-chunks", "idle-rank"])
def test_convert_direct_chunks_equal_the_source(comm, shared_tmp, compression, n_frames, chunk_frames,
                                                parallel_compression):
    """Positions, velocities (own steps) and boxes of the file equal MDAnalysis's decoder reading
    the TRR, whoever compresses: one process's threads, HDF5 in its collective writes, or each
    rank with rank 0 storing every chunk."""
    rng = np.random.default_rng(n_frames)
    positions = np.cumsum(rng.normal(0, 0.01, (n_frames, 17, 3)), axis=0).astype(np.float32) + 2
    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, positions, velocities_every=2)
    comm.Barrier()
    output = os.path.join(shared_tmp, "out.h5md")
    summary = convert(source, output, comm=comm, compression=compression, chunk_frames=chunk_frames, threads=2,
                      progress=False, parallel_compression=parallel_compression)
    if comm.size == 1:
        assert summary["compressed_by"] == "threads" and summary["threads"] == 2
    elif parallel_compression == "hdf5":
        assert summary["compressed_by"] == "hdf5" and summary["threads"] is None
    else:
        assert summary["compressed_by"] == "ranks" and summary["threads"] == 2
    comm.Barrier()
    expected_x, expected_v = _read_trr(source)  # the oracle: the TRR's own values, bit for bit
    with h5py.File(output, "r") as handle:
        value = handle[f"{TRAJ}/position/value"]
        assert value.chunks[0] == min(chunk_frames, n_frames)
        np.testing.assert_array_equal(value[()], expected_x)
        np.testing.assert_array_equal(handle[f"{TRAJ}/velocity/value"][()], np.stack(expected_v))
        np.testing.assert_array_equal(handle[f"{TRAJ}/velocity/step"][()], np.arange(0, n_frames, 2) * 10)
        np.testing.assert_array_equal(handle[f"{TRAJ}/box/edges/value"][()][:, [0, 1, 2], [0, 1, 2]],
                                      np.tile([9.0, 8.0, 7.0], (n_frames, 1)).astype(np.float32))
        assert json.loads(handle["parameters/h5mdtool"].attrs["json"])["compressed_by"] == summary["compressed_by"]
    assert not glob.glob(os.path.join(shared_tmp, ".*"))  # no temporary left


@pytest.mark.mpi
@pytest.mark.parametrize("parallel_compression", ["hdf5", "ranks"])
@pytest.mark.parametrize("n_frames, chunk_frames", SHAPES, ids=["one-frame", "one-chunk", "many-chunks", "idle-rank"])
def test_convert_direct_chunks_on_the_precision_grid(comm, shared_tmp, n_frames, chunk_frames, parallel_compression):
    """--precision: int32 on the grid, every position within Q/2 of the source."""
    import MDAnalysis as mda

    rng = np.random.default_rng(7)
    positions = (rng.uniform(-5, 5, (n_frames, 23, 3))).astype(np.float32)
    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, positions)
    comm.Barrier()
    output = os.path.join(shared_tmp, "out.h5md")
    convert(source, output, comm=comm, precision=0.001, chunk_frames=chunk_frames, threads=2, progress=False,
            parallel_compression=parallel_compression)
    comm.Barrier()
    universe = mda.Universe(output)
    stored = np.stack([ts.positions.copy() for ts in universe.trajectory]) / 10
    source_nm = np.stack([ts.positions.copy() for ts in mda.Universe(source).trajectory]) / 10
    assert stored.shape == source_nm.shape
    assert np.abs(stored.astype(np.float64) - source_nm).max() <= 0.0005 + 1e-6


def test_a_failing_encoder_leaves_nothing_behind(tmp_path, monkeypatch):
    """A chunk the codec cannot compress: one error, no output, no temporary."""
    from h5mdtool.h5md import chunkwriter

    source = str(tmp_path / "in.trr")
    _trr(source, np.ones((12, 5, 3), np.float32))

    def refuse(pipeline, rows, chunks, dtype):
        raise OutputError("a chunk could not be compressed (test)")

    monkeypatch.setattr(chunkwriter, "_encode", refuse)
    with pytest.raises(OutputError, match="could not be compressed"):
        convert(source, str(tmp_path / "out.h5md"), compression="zstd", chunk_frames=2, threads=2, progress=False)
    assert os.listdir(tmp_path) == ["in.trr"]


@pytest.mark.mpi
def test_rank_0_that_only_stores(comm, shared_tmp, monkeypatch):
    """--parallel-compression ranks with storing as dear as compressing: rank 0 takes no frames
    (as from 10 ranks on), stores every other rank's chunks, and the file equals the source."""
    from h5mdtool.h5md import chunkwriter

    monkeypatch.setattr(chunkwriter, "STORE_COST", 1.0)
    if comm.size > 1:
        assert chunkwriter.GatheredChunkWriter.rank_weights(comm.size)[0] == 0
    rng = np.random.default_rng(3)
    positions = rng.uniform(-3, 3, (9, 11, 3)).astype(np.float32)
    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, positions)
    comm.Barrier()
    output = os.path.join(shared_tmp, "out.h5md")
    convert(source, output, comm=comm, compression="gzip", chunk_frames=2, progress=False,
            parallel_compression="ranks")
    comm.Barrier()
    with h5py.File(output, "r") as handle:
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()], _read_trr(source)[0])


@pytest.mark.mpi
@pytest.mark.parametrize("failing", ["encoding on the last rank", "storing on rank 0"])
def test_ranks_compressing_end_together_on_one_ranks_failure(comm, shared_tmp, monkeypatch, failing):
    """--parallel-compression ranks: a chunk one rank cannot compress, or rank 0 unable to store
    the chunks (a full disk), ends every rank with one error (no hang), no output, no temporary."""
    import errno

    from h5mdtool.h5md import chunkwriter
    from h5mdtool.parallel.errors import H5mdToolError

    source = os.path.join(shared_tmp, "in.trr")
    if comm.rank == 0:
        _trr(source, np.ones((12, 5, 3), np.float32))
    comm.Barrier()
    if failing.startswith("encoding") and comm.rank == comm.size - 1:
        def refuse(pipeline, rows, chunks, dtype):
            raise OutputError("a chunk could not be compressed (test)")

        monkeypatch.setattr(chunkwriter, "_encode", refuse)
    if failing.startswith("storing") and comm.rank == 0:
        def full(self, number, start, encoded):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(chunkwriter.DirectChunkWriter, "_store", full)
    output = os.path.join(shared_tmp, "out.h5md")
    with pytest.raises(H5mdToolError) as raised:
        convert(source, output, comm=comm, compression="zstd", chunk_frames=2, progress=False, threads=1,
                parallel_compression="ranks")  # one process: its encoding thread and direct chunk writes
    expected = "could not be compressed" if failing.startswith("encoding") else "No space left on device"
    assert expected in str(raised.value)
    comm.Barrier()
    assert sorted(os.listdir(shared_tmp)) == ["in.trr"]


def test_mandatory_filter_failure_is_an_error():
    """A mandatory filter that declines a chunk fails the write, as HDF5 would; an optional one is skipped."""
    pipeline = FilterPipeline([(32015, 0, (3,))], 4)
    pipeline.functions[32015] = lambda *args: 0
    with pytest.raises(RuntimeError, match="failed"):
        pipeline.encode(np.ones(8, np.float32))
    optional = FilterPipeline([(32015, 1, (3,))], 4)
    optional.functions[32015] = lambda *args: 0
    stored, mask = optional.encode(np.ones(8, np.float32))
    assert mask == 1 and bytes(stored) == np.ones(8, np.float32).tobytes()


def test_threads_per_rank_uses_the_cores_a_process_may_run_on(monkeypatch):
    """Serially, every core of the affinity mask; unbound ranks share the node's cores."""
    assert threads_per_rank(SerialComm()) == len(os.sched_getaffinity(0))

    class FourRanks:
        size = 4

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert threads_per_rank(FourRanks()) == 4  # 2 ranks on this node share 8 cores
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE")
    for name in ("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    assert threads_per_rank(FourRanks()) == 2  # no launcher variable: all ranks on the node
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert threads_per_rank(FourRanks()) == 1  # bound to one core


def test_threads_are_recorded(tmp_path, adk):
    """The summary and the provenance say how many threads compressed; uncompressed layouts have none."""
    compressed = convert(adk[1], str(tmp_path / "z.h5md"), compression="zstd", stop=4, threads=3, progress=False)
    plain = convert(adk[1], str(tmp_path / "p.h5md"), compression="none", stop=4, progress=False)
    assert compressed["threads"] == 3 and plain["threads"] is None
    with h5py.File(str(tmp_path / "z.h5md"), "r") as handle:
        assert json.loads(handle["parameters/h5mdtool"].attrs["json"])["compression_threads"] == 3


@settings(max_examples=40, deadline=None)
@given(compression=st.sampled_from(CODECS + ["lzf", "none"]), dtype=st.sampled_from(["float32", "int32", "float64"]),
       n_frames=st.integers(1, 20), chunk_frames=st.integers(1, 8), n_atoms=st.integers(1, 30),
       threads=st.integers(1, 3), split_xyz=st.booleans(), data=st.data())
def test_chunk_reader_reads_what_hdf5_reads(tmp_path_factory, compression, dtype, n_frames, chunk_frames, n_atoms,
                                            threads, split_xyz, data):
    """Any rows and span of atoms, x, y and z chunked together or apart, through the threads or
    (lzf, uncompressed) HDF5: HDF5's values."""
    from h5mdtool.h5md.chunkcodec import ChunkReader

    values = (np.random.default_rng(n_frames).standard_normal((n_frames, n_atoms, 3)) * 50).astype(dtype)
    path = str(tmp_path_factory.mktemp("reader") / "x.h5")
    chunk_frames = min(chunk_frames, n_frames)
    with h5py.File(path, "w", libver=("v110", "latest")) as handle:
        if compression in ("lzf", "none"):
            handle.create_dataset("x", data=values, chunks=(chunk_frames, n_atoms, 1 if split_xyz else 3),
                                  compression=None if compression == "none" else "lzf")
        else:
            _dataset(handle, "x", values.shape, chunk_frames, dtype, compression, True, split_xyz)[...] = values
    start = data.draw(st.integers(0, n_frames - 1))
    stop = data.draw(st.integers(start + 1, n_frames))
    first = data.draw(st.integers(0, n_atoms - 1))
    last = data.draw(st.integers(first + 1, n_atoms))
    reader = ChunkReader(threads)
    try:
        with h5py.File(path, "r") as handle:
            out = np.empty((stop - start, last - first, 3), dtype)
            reader.read(handle["x"], start, stop, (first, last), out)
    finally:
        reader.close()
    np.testing.assert_array_equal(out, values[start:stop, first:last])


@pytest.mark.parametrize("split_xyz", [False, True], ids=["xyz-together", "xyz-apart"])
@pytest.mark.parametrize("compression", CODECS)
def test_h5md_reader_decodes_outside_hdf5_with_one_core(tmp_path, monkeypatch, adk, compression, split_xyz):
    """One core to use still decodes in h5mdtool's pipeline (faster than HDF5's byte
    unshuffle) and reads what HDF5's own filters read, over a partial last chunk, with x,
    y and z in one chunk or in three (``--split-xyz``)."""
    from h5mdtool.parallel import mpi
    from h5mdtool.formats import TrajectoryReader, scan

    output = str(tmp_path / f"{compression}.h5md")
    convert(adk[1], output, compression=compression, split_xyz=split_xyz, chunk_frames=4, stop=11, progress=False)
    with h5py.File(output, "r") as handle:
        expected = handle[f"{TRAJ}/position/value"][()]
    decoded = []
    original = FilterPipeline.decode

    def counted(self, *args, **kwargs):
        decoded.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(mpi, "threads_per_rank", lambda comm: 1)
    monkeypatch.setattr(FilterPipeline, "decode", counted)
    index = scan([output])
    with TrajectoryReader(index, None, ("positions",)) as reader:
        block = reader.new_block(index.n_frames, ("positions",))
        reader.read(np.arange(index.n_frames), block, ("positions",))
    assert len(decoded) == (9 if split_xyz else 3)  # every chunk through h5mdtool's pipeline, none through HDF5's
    np.testing.assert_array_equal(block.positions, expected)


@pytest.mark.parametrize("split_xyz", [False, True])
def test_chunk_reader_fills_chunks_never_written(tmp_path, split_xyz):
    """A chunk never written reads as HDF5's fill value, as through HDF5."""
    from h5mdtool.h5md.chunkcodec import ChunkReader

    with h5py.File(str(tmp_path / "x.h5"), "w") as handle:
        dataset = _dataset(handle, "x", (6, 4, 3), 2, "float32", "zstd", True, split_xyz)
        dataset[0:2] = 1.0
    reader = ChunkReader(2)
    with h5py.File(str(tmp_path / "x.h5"), "r") as handle:
        out = np.empty((6, 4, 3), np.float32)
        reader.read(handle["x"], 0, 6, (0, 4), out)
    reader.close()
    assert (out[:2] == 1).all() and (out[2:] == 0).all()


@pytest.mark.parametrize("compression", CODECS)
def test_chunk_reader_reports_a_corrupt_chunk(tmp_path, compression):
    """Damaged compressed bytes are an OSError (the reading stack names the frame), never garbage
    (zlib's own error escaped for gzip; Zstd's error code looked like a size)."""
    from h5mdtool.h5md.chunkcodec import ChunkReader

    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        dataset = _dataset(handle, "x", (4, 50, 3), 2, "float32", compression, True)
        dataset[...] = np.arange(600, dtype=np.float32).reshape(4, 50, 3)
        mask, stored = dataset.id.read_direct_chunk((2, 0, 0))
        dataset.id.write_direct_chunk((2, 0, 0), stored[: len(stored) // 2], filter_mask=mask)
    reader = ChunkReader(2)
    with h5py.File(path, "r") as handle:
        out = np.empty((4, 50, 3), np.float32)
        reader.read(handle["x"], 0, 2, (0, 50), out[:2])
        with pytest.raises(OSError, match="decompress"):
            reader.read(handle["x"], 0, 4, (0, 50), out)
    reader.close()


@pytest.fixture(scope="module")
def zstd_adk(tmp_path_factory, adk):
    """The AdK trajectory with zstd in 4-frame chunks, for damaging copies of it."""
    path = str(tmp_path_factory.mktemp("damaged") / "zstd.h5md")
    convert(adk[1], path, compression="zstd", chunk_frames=4, progress=False)
    return path


@pytest.mark.parametrize("ranks", [None, 2, 3])
@pytest.mark.parametrize("chunk", [7, 24])
def test_damaged_chunk_named_by_its_first_frame(tmp_path, adk, zstd_adk, chunk, ranks):
    """The message names the first frame that cannot be read, on any number of ranks (under
    MPI bench rmsd named the first frame of the block it was reading)."""
    from conftest import run_h5mdtool

    path = str(tmp_path / "damaged.h5md")
    with open(zstd_adk, "rb") as source, open(path, "wb") as target:
        target.write(source.read())
    with h5py.File(path, "r+") as handle:
        dataset = handle["particles/trajectory/position/value"]
        mask, stored = dataset.id.read_direct_chunk((4 * chunk, 0, 0))
        dataset.id.write_direct_chunk((4 * chunk, 0, 0), stored[: len(stored) // 2], filter_mask=mask)
    with h5py.File(path, "r") as handle:  # the oracle: HDF5 reading frame by frame
        dataset = handle["particles/trajectory/position/value"]
        unreadable = []
        for frame in range(dataset.shape[0]):
            try:
                dataset[frame]
            except OSError:
                unreadable.append(frame)
    assert unreadable[0] == 4 * chunk
    for args in (["bench", "rmsd", path, "-t", adk[0], "--no-progress"],
                 ["convert", path, "-o", str(tmp_path / "copy.h5md"), "--no-progress"]):
        done = run_h5mdtool(args, ranks=ranks)
        assert done.returncode == 1, done.stderr
        assert f"cannot read H5MD frame {unreadable[0]} (cannot decompress a chunk" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_encoding_threads_by_codec(tmp_path, adk, adk_frames):
    """--threads as given; by default h5mdtool's threads for gzip, whose compressing outweighs
    decoding (one per core), and HDF5's filters for the fast codecs (as fast on the machine
    measured: docs/performance.md)."""
    assert encoding_threads() is None and encoding_threads(1) == 1 and encoding_threads(4) == 4
    assert encoding_threads(0, codec("gzip"), SerialComm()) is None  # --threads 0: HDF5's filters
    assert encoding_threads(None, codec("zstd"), SerialComm()) is None
    assert encoding_threads(None, codec("gzip"), SerialComm()) == threads_per_rank(SerialComm())
    assert encoding_threads(2, codec("zstd"), SerialComm()) == 2
    summary = convert(adk[1], str(tmp_path / "z.h5md"), compression="zstd", stop=4, progress=False)
    assert summary["threads"] is None
    summary = convert(adk[1], str(tmp_path / "h.h5md"), compression="gzip", stop=4, threads=0, progress=False)
    assert summary["threads"] is None
    summary = convert(adk[1], str(tmp_path / "g.h5md"), compression="gzip", stop=4, progress=False)
    assert summary["threads"] == threads_per_rank(SerialComm())
    with h5py.File(str(tmp_path / "g.h5md"), "r") as handle:
        record = json.loads(handle["parameters/h5mdtool"].attrs["json"])
        assert record["compressed_by"] == "threads"
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()], adk_frames[:4])
    with h5py.File(str(tmp_path / "h.h5md"), "r") as handle:
        assert json.loads(handle["parameters/h5mdtool"].attrs["json"])["compressed_by"] == "hdf5"
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/value"][()], adk_frames[:4])


@pytest.mark.parametrize("planes", [1, 4, 8])
@pytest.mark.parametrize("size", [0, 1, 7, 4096, 4099, 200_000])
@pytest.mark.parametrize("kind", ["random", "zeros", "mixed"])
def test_deflate_planes_is_a_zlib_stream_of_the_data(planes, size, kind):
    """Whatever the planes and the data (none, a partial element, planes of 64 KiB and more),
    zlib and libdeflate inflate the stream to the data, and the Adler-32 is zlib's."""
    import zlib

    from h5mdtool.h5md.chunkcodec import deflate_planes, inflate

    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8)
    if kind == "zeros":
        data[:] = 0
    elif kind == "mixed":  # the first half of the planes constant, the rest random
        data[: size // 2] = 7
    stream = deflate_planes(data.tobytes(), 4, planes)
    assert zlib.decompress(stream) == data.tobytes()
    assert bytes(inflate(stream, size)) == data.tobytes()
    assert stream[:2] == zlib.compress(b"", 4)[:2]
    assert int.from_bytes(stream[-4:], "big") == zlib.adler32(data.tobytes())


def test_deflate_planes_stores_the_planes_deflate_barely_shrinks():
    """A shuffled float32 chunk whose mantissa planes are random and whose exponent plane is
    constant: the random planes go into the stream as they are (found verbatim in it), the
    constant one is deflated, and the stream is no larger than zlib's of the whole chunk
    plus a few bytes a plane."""
    import zlib

    from h5mdtool.h5md.chunkcodec import STORED_BELOW, deflate_planes

    rng = np.random.default_rng(1)
    n = 30_000
    planes = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for _ in range(3)] + [bytes([0x41]) * n]
    chunk = b"".join(planes)
    stream = deflate_planes(chunk, 4, 4)
    for plane in planes[:3]:
        assert len(zlib.compress(plane, 4)) > (1 - STORED_BELOW) * len(plane)
        assert plane[:20000] in stream and plane[-10000:] in stream  # stored blocks hold at most 65535 bytes
    assert planes[3][:1000] not in stream
    assert len(stream) <= len(zlib.compress(chunk, 4)) + 4 * 16


def test_gzip_chunks_read_back_through_hdf5_and_the_reader(tmp_path):
    """Chunks of a --compression gzip file written by h5mdtool's threads (planes deflated apart)
    decode with HDF5's own deflate filter and with h5mdtool's chunk reader to the values written."""
    from h5mdtool.h5md.chunkcodec import ChunkReader

    rng = np.random.default_rng(3)
    values = (rng.standard_normal((9, 50, 3)) * 3).astype(np.float32)
    values[:, :10] = 1.5  # planes of every kind in one chunk
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as handle:
        dataset = _dataset(handle, "x", values.shape, 4, "float32", "gzip", True)
        pipeline = FilterPipeline.of(dataset)
        for first in range(0, 9, 4):
            chunk = np.zeros((4, 50, 3), np.float32)
            chunk[: len(values[first:first + 4])] = values[first:first + 4]
            stored, mask = pipeline.encode(chunk)
            dataset.id.write_direct_chunk((first, 0, 0), stored, filter_mask=mask)
    with h5py.File(path, "r") as handle:
        np.testing.assert_array_equal(handle["x"][()], values)
        out = np.empty_like(values)
        reader = ChunkReader(2)
        try:
            assert reader.read(handle["x"], 0, 9, (0, 50), out)
        finally:
            reader.close()
        np.testing.assert_array_equal(out, values)
