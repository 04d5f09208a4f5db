"""Writing filtered layouts as whole chunks compressed outside HDF5 (``--threads``, ``--parallel-compression ranks``).

HDF5 1.10.8 runs a dataset's filters inside ``H5Dwrite``, one chunk after another, in the
thread that writes. With ``--threads N``, when one process writes the file, convert instead
encodes the chunks of per-atom datasets itself (:mod:`.chunkcodec`: the dataset's own
filters, read back by any HDF5 reader) in a pool of threads while the next block of frames
is being decoded, and stores them with HDF5's direct chunk write (``H5Dwrite_chunk``)
(:class:`DirectChunkWriter`). It is the default for gzip, whose compressing outweighs
decoding (:func:`encoding_threads`); for the fast codecs HDF5's filters were as fast on the
2-core machine measured (docs/performance.md).

Under MPI, by default, the ranks write filtered datasets collectively through parallel HDF5;
direct chunk writes by several ranks into one file opened with MPI-IO hang in the collective
close (HDF5 1.10.8; docs/performance.md). With ``--parallel-compression ranks`` each rank
encodes its own chunks and rank 0, which alone opens the file, stores them
(:class:`GatheredChunkWriter`).
"""

import typing
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..parallel.errors import OutputError
from ..parallel.mpi import agree, capture_errors
from ..parallel.outputs import write_failures_reported
from .chunkcodec import FilterPipeline, row_offsets

#: Fields written as rows, not chunks: the box, and the element groups' step and time.
_SERIES = ("edges", "step", "time")


def encoding_threads(asked=None, codec=None, comm=None):
    """Threads that compress chunks (``--threads``), or None to leave the filters to HDF5.

    *asked* 0: None, HDF5's filters. Without *asked*: the cores this process may use
    (:func:`~h5mdtool.parallel.mpi.threads_per_rank` of *comm*) for a *codec*
    (:class:`~h5mdtool.h5md.codecs.Codec`) that compresses in threads by default (gzip: 600x
    AdK on 2 cores in 33 s against 61 s with HDF5's filter, docs/performance.md), else None. For the fast codecs HDF5's filters, run inside
    ``H5Dwrite`` while a thread decodes the next frames, were as fast on the 2-core
    development machine (each chunk hands the GIL back and forth with the decoding thread).
    """
    if asked is not None:
        return max(1, int(asked)) if int(asked) else None
    if codec is not None and codec.threads_by_default:
        from ..parallel.mpi import threads_per_rank

        return threads_per_rank(comm)
    return None


class DirectChunkWriter:
    """:class:`~h5mdtool.h5md.writer.TrajectoryWriter`'s writes, with chunks compressed in threads.

    Parameters
    ----------
    writer : TrajectoryWriter
        The writer of a file opened by this process alone (serial HDF5).
    threads : int
        Encoding threads.

    Raises
    ------
    UnsupportedPipeline
        When a dataset's filters can only run inside HDF5 (see :func:`direct_chunk_writes`).
    """

    def __init__(self, writer, threads):
        self.writer = writer
        self._start(encoded_datasets(writer), threads)

    def _start(self, specs, threads):
        """Pipelines of the datasets *specs* describes (:func:`encoded_datasets`) and the encoding threads."""
        self.specs = specs
        self.pipelines = [{name: FilterPipeline(spec.filters, spec.itemsize) for name, spec in group.items()}
                          for group in specs]
        safe = all(p.thread_safe for group in self.pipelines for p in group.values())
        self.threads = max(1, int(threads)) if safe else 1
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="h5mdtool-encode")

    def close(self):
        """Stop the encoding threads."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def chunk_frames(self, number):
        """Frames per chunk of group *number*'s per-atom data."""
        return next(iter(self.specs[number].values())).chunks[0]

    def prepare(self, number, start, arrays):
        """Start encoding the whole chunks of *arrays* (rows from dataset row *start*, a chunk boundary).

        Called from the decoding thread; returns what :meth:`write` takes. The arrays must
        stay unchanged until :meth:`write` has returned.
        """
        prepared = {}
        for name, rows in arrays.items():
            if name in _SERIES:
                prepared[name] = rows
                continue
            spec = self.specs[number][name]
            chunks = spec.chunks
            prepared[name] = [
                ((start + first,) + offset,
                 self.pool.submit(_encode, self.pipelines[number][name],
                                  rows[first:first + chunks[0], ..., offset[-1]:offset[-1] + chunks[-1]],
                                  chunks, spec.dtype))
                for first in range(0, len(rows), chunks[0]) for offset in spec.offsets
            ]
        return prepared

    @staticmethod
    def rank_weights(n_ranks):
        """Shares of the frames by rank: None, equal ones (one process writes)."""
        return None

    def write(self, number, start, prepared):
        """Store the chunks :meth:`prepare` started and the box rows."""
        self._store(number, start, _encoded(prepared))

    def _store(self, number, start, encoded):
        """Store chunks encoded from dataset row *start* on (:func:`_encoded`) and the box rows."""
        _, datasets = self.writer.datasets[number]
        for name, value in encoded.items():
            dataset = datasets[name]
            if name in _SERIES:
                if len(value):
                    self.writer.rows.write(dataset, start, value)
                continue
            for corner, data, mask in value:
                dataset.id.write_direct_chunk(corner, data, filter_mask=mask)

    def write_series(self, number, step, time, start=0):
        """Write group *number*'s ``step`` and ``time``."""
        self.writer.write_series(number, step, time, start)


#: MPI tag of the encoded chunks sent to rank 0.
_CHUNKS_TAG = 0x4835
#: What rank 0's storing of every rank's chunks costs, as a fraction of decoding and
#: compressing all the frames. Measured on AdK 600x with zstd, 2 ranks with a core each,
#: equal shares: rank 0 stored the 1.7 GB of chunks in 1.45 s and received rank 1's in
#: 0.24 s, where decoding and compressing took 11.3 s of CPU (0.15). Whole runs with 0.12,
#: 0.15 and 0.25 took 10.7, 10.2 and 12.9 s (0.25 made rank 1 the slowest).
STORE_COST = 0.12


class GatheredChunkWriter(DirectChunkWriter):
    """Several ranks write one filtered file: each rank compresses its own chunks, rank 0 stores them.

    HDF5 1.10.8 runs the filters of a parallel write inside its collective ``H5Dwrite``,
    where every round ends on all ranks together, and direct chunk writes by several ranks
    into one file opened with MPI-IO hang (docs/performance.md). Here rank 0 alone opens
    the file (serial HDF5); every rank encodes its chunks with the datasets' own filters
    (:mod:`.chunkcodec`, in *threads* threads) and, each round, sends the stored bytes to
    rank 0, which writes its own and then every other rank's, as they arrive, with HDF5's
    direct chunk write.
    The ranks share the compression; only compressed bytes travel and are written, by one
    process, so the writing does not scale with the ranks (docs/performance.md gives the
    model).

    Parameters
    ----------
    comm : communicator
    specs : list of dict
        :func:`encoded_datasets` of rank 0's writer, the same on every rank.
    writer : TrajectoryWriter or None
        Rank 0: the writer of the file it opened alone; None on the other ranks.
    threads : int
        Encoding threads per rank.
    path, label : str
        The file rank 0 writes, and the name its failures give it (the final output's).
    """

    def __init__(self, comm, specs, writer, threads, path, label):
        self.comm = comm
        self.writer = writer
        self.path, self.label = path, label
        self._start(specs, threads)

    def write(self, number, start, prepared):
        """Collective: every rank's chunks of one round, stored by rank 0.

        Every rank calls it once per round (with nothing to write, empty arrays). A rank
        whose encoding failed sends no chunks but takes part; rank 0 receives from every
        rank even after its own storing failed, so that no sender waits forever; at the end
        of the round every rank learns of any failure.
        """
        with capture_errors() as failure:
            encoded = _encoded(prepared)
        if self.comm.rank != 0:
            self.comm.send(None if failure[0] else (start, encoded), dest=0, tag=_CHUNKS_TAG)
            agree(self.comm, failure[0])
            return
        if failure[0] is None:
            with capture_errors() as failure:
                with write_failures_reported(self.path, self.label):
                    self._store(number, start, encoded)
        from mpi4py import MPI

        for _ in range(1, self.comm.size):  # in the order they arrive: one message per rank and round
            theirs = self.comm.recv(source=MPI.ANY_SOURCE, tag=_CHUNKS_TAG)
            if failure[0] is None and theirs is not None:
                with capture_errors() as failure:
                    with write_failures_reported(self.path, self.label):
                        self._store(number, *theirs)
        agree(self.comm, failure[0])

    def write_series(self, number, step, time, start=0):
        """Collective: rank 0 writes group *number*'s ``step`` and ``time`` (every rank holds them)."""
        with capture_errors() as failure:
            if self.writer is not None:
                with write_failures_reported(self.path, self.label):
                    self.writer.write_series(number, step, time, start)
        agree(self.comm, failure[0])

    @staticmethod
    def rank_weights(n_ranks):
        """Shares of the frames: rank 0, which stores every chunk (:data:`STORE_COST`), takes
        less than the others, and none from ``1 + 1 / STORE_COST`` ranks on.

        With T the decoding and compressing of all frames, c = :data:`STORE_COST`, rank 0's
        share a and every other rank's b: ``a + c T = b`` and ``a + (N - 1) b = T``, so
        ``a / b = (1 - (N - 1) c) / (1 + c)``.
        """
        root = max(0.0, (1 - (n_ranks - 1) * STORE_COST) / (1 + STORE_COST))
        return [root] + [1.0] * (n_ranks - 1)


def _encoded(prepared):
    """What :meth:`DirectChunkWriter.prepare` started, once encoded: ``(corner, bytes, filter
    mask)`` of each chunk, and the box rows as they were."""
    return {name: value if name in _SERIES else [(corner, *future.result()) for corner, future in value]
            for name, value in prepared.items()}


class EncodedDataset(typing.NamedTuple):
    """What encoding a dataset's chunks takes, in plain values another process can receive."""

    #: ``(filter id, flags, client data values)`` of each filter (:class:`~.chunkcodec.FilterPipeline`).
    filters: list
    itemsize: int
    chunks: tuple
    dtype: str
    #: :func:`~.chunkcodec.row_offsets`
    offsets: list


def encoded_datasets(writer):
    """Per element group of *writer* (:class:`~h5mdtool.h5md.writer.TrajectoryWriter`), an
    :class:`EncodedDataset` of each per-atom dataset.

    Raises
    ------
    UnsupportedPipeline
        When a dataset's filters can only run inside HDF5.
    """
    specs = []
    for _, datasets in writer.datasets:
        group = {}
        for name, dataset in datasets.items():
            if name in _SERIES:
                continue
            pipeline = FilterPipeline.of(dataset)
            group[name] = EncodedDataset(pipeline.filters, pipeline.itemsize, tuple(dataset.chunks),
                                         dataset.dtype.str, row_offsets(dataset))
        specs.append(group)
    return specs


def _encode(pipeline, rows, chunks, dtype):
    """(stored bytes, filter mask) of one chunk: *rows* padded to the chunk's shape, as HDF5
    stores a dataset's last, partial chunk."""
    if rows.shape != tuple(chunks) or rows.dtype != dtype:
        full = np.zeros(chunks, dtype)
        full[:len(rows)] = rows
        rows = full
    try:
        return pipeline.encode(rows)
    except (RuntimeError, MemoryError) as error:
        raise OutputError(f"a chunk could not be compressed ({error})") from None
