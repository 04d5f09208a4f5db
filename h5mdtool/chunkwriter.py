"""Writing filtered layouts as whole chunks compressed in h5mdtool's threads.

HDF5 1.10.8 runs a dataset's filters inside ``H5Dwrite``, one chunk after another, and
under MPI inside the collective call, where every round ends on all ranks together. For
a filtered layout convert instead encodes the chunks of per-atom datasets itself
(:mod:`.chunkcodec`: the dataset's own filters, byte-compatible with HDF5's), in a pool of
threads on every rank, while the next block of frames is being decoded. Rank 0 owns the
file, opened without MPI-IO, and stores every rank's chunks with HDF5's direct chunk write
(``H5Dwrite_chunk``) and every rank's box rows: direct chunk writes by several ranks into
one file opened with MPI-IO hang in the collective close (HDF5 1.10.8, the compression
study in docs/performance.md). What crosses MPI is the compressed chunks.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .chunkcodec import FilterPipeline, UnsupportedPipeline
from .errors import OutputError, StackError
from .mpi import agree, capture_errors, is_parallel, threads_per_rank as default_threads  # noqa: F401 - convert's default

#: Fields stored per atom (chunked by whole frames and filtered).
_BOX = "edges"


class _Group:
    """What every rank knows of one element group: chunk rows and each per-atom field's pipeline and dtype."""

    def __init__(self, fields, chunk_frames, pipelines):
        self.fields = fields
        self.chunk_frames = chunk_frames
        self.pipelines = {name: (FilterPipeline(*description), np.dtype(dtype))
                          for name, (description, dtype) in pipelines.items()}


class DirectChunkWriter:
    """Same interface as :class:`~h5mdtool.writer.TrajectoryWriter`, for filtered layouts.

    Parameters
    ----------
    writer : TrajectoryWriter or None
        On rank 0 the writer of the file it opened alone (serial HDF5); None on other ranks.
    comm : communicator
    threads : int
        Encoding threads of this rank.

    Raises
    ------
    StackError
        (On every rank) when a dataset's filters can only run inside HDF5.
    """

    def __init__(self, writer, comm, threads):
        self.writer = writer
        self.comm = comm
        description, failure = None, None
        if comm.rank == 0:
            try:
                description = [
                    (fields, writer.chunk_frames(number),
                     {name: (FilterPipeline.of(dataset).describe(), dataset.dtype.str)
                      for name, dataset in datasets.items() if name not in ("step", "time", _BOX)})
                    for number, (fields, datasets) in enumerate(writer.datasets)
                ]
            except UnsupportedPipeline as error:
                failure = str(error)
        description, failure = comm.bcast((description, failure))
        if failure is not None:
            raise StackError(f"cannot compress chunks outside HDF5: {failure}")
        self.groups = [_Group(*entry) for entry in description]
        single = all(p.thread_safe for g in self.groups for p, _ in g.pipelines.values())
        self.threads = max(1, int(threads)) if single else 1
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="h5mdtool-encode")

    def close(self):
        """Stop the encoding threads."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def chunk_frames(self, number):
        """Frames per chunk of group *number*'s per-atom data."""
        return self.groups[number].chunk_frames

    def prepare(self, number, start, arrays):
        """Start encoding the whole chunks of *arrays* (rows from dataset row *start*, a chunk boundary).

        Called from the decoding thread; returns what :meth:`write` takes. The arrays
        must stay unchanged until :meth:`write` has returned.
        """
        group = self.groups[number]
        chunk = group.chunk_frames
        prepared = {}
        for name, rows in arrays.items():
            if name == _BOX:
                prepared[name] = rows
                continue
            pipeline, dtype = group.pipelines[name]
            prepared[name] = [
                (start + first, self.pool.submit(_encode, pipeline, rows[first:first + chunk], chunk, dtype))
                for first in range(0, len(rows), chunk)
            ]
        return prepared

    def write(self, number, start, prepared):
        """Store the chunks :meth:`prepare` started (collective: every rank calls it every round)."""
        with capture_errors() as failure:
            chunks = [(name, row) + future.result()
                      for name, pieces in prepared.items() if name != _BOX for row, future in pieces]
        agree(self.comm, failure[0])
        edges = prepared.get(_BOX)
        received = self.comm.gather((chunks, start, edges)) if is_parallel(self.comm) else [(chunks, start, edges)]
        if self.comm.rank != 0:
            return
        _, datasets = self.writer.datasets[number]
        for chunks, first, edges in received:
            for name, row, data, mask in chunks:
                datasets[name].id.write_direct_chunk((row,) + (0,) * (datasets[name].ndim - 1), data,
                                                     filter_mask=mask)
            if edges is not None and len(edges):
                self.writer.rows.write(datasets[_BOX], first, edges)

    def write_series(self, number, step, time, start=0):
        """Write group *number*'s ``step`` and ``time`` (rank 0)."""
        if self.comm.rank == 0:
            self.writer.write_series(number, step, time, start)


def _encode(pipeline, rows, chunk, dtype):
    """(stored bytes, filter mask) of one chunk: *rows* padded to *chunk* rows, as HDF5 stores a last, partial chunk."""
    if len(rows) < chunk:
        full = np.zeros((chunk,) + rows.shape[1:], dtype)
        full[:len(rows)] = rows
        rows = full
    try:
        return pipeline.encode(np.ascontiguousarray(rows, dtype=dtype))
    except (RuntimeError, MemoryError) as error:
        raise OutputError(f"a chunk could not be compressed ({error})") from None
