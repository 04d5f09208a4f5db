"""Writing filtered layouts from one process as whole chunks compressed in threads (``--threads``).

HDF5 1.10.8 runs a dataset's filters inside ``H5Dwrite``, one chunk after another, in the
thread that writes. With ``--threads N``, when one process writes the file, convert instead
encodes the chunks of per-atom datasets itself (:mod:`.chunkcodec`: the dataset's own
filters, read back by any HDF5 reader) in a pool of threads while the next block of frames
is being decoded, and stores them with HDF5's direct chunk write (``H5Dwrite_chunk``). It
is opt-in: on the 2-core machine measured, HDF5's filters were faster (docs/performance.md).
Under MPI the ranks keep writing filtered datasets collectively
through parallel HDF5 (filtered datasets are written collectively): direct chunk writes by several ranks into one
file opened with MPI-IO hang in the collective close (HDF5 1.10.8; docs/performance.md).
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..parallel.errors import OutputError
from .chunkcodec import FilterPipeline, row_offsets

#: Fields written as rows, not chunks: the box, and the element groups' step and time.
_SERIES = ("edges", "step", "time")


def encoding_threads(asked=None):
    """Threads that compress chunks (``--threads``), or None to leave the filters to HDF5.

    Opt-in: on the 2-core development machine HDF5's filters, run inside ``H5Dwrite`` while
    a thread decodes the next frames, were faster than h5mdtool's threads (each chunk hands
    the GIL back and forth with the decoding thread: docs/performance.md); whether more
    cores turn that around was not measured.
    """
    return None if asked is None else max(1, int(asked))


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
        self.pipelines = [{name: FilterPipeline.of(dataset) for name, dataset in datasets.items()
                           if name not in _SERIES}
                          for _, datasets in writer.datasets]
        safe = all(p.thread_safe for group in self.pipelines for p in group.values())
        self.threads = max(1, int(threads)) if safe else 1
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="h5mdtool-encode")

    def close(self):
        """Stop the encoding threads."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def chunk_frames(self, number):
        """Frames per chunk of group *number*'s per-atom data."""
        return self.writer.chunk_frames(number)

    def prepare(self, number, start, arrays):
        """Start encoding the whole chunks of *arrays* (rows from dataset row *start*, a chunk boundary).

        Called from the decoding thread; returns what :meth:`write` takes. The arrays must
        stay unchanged until :meth:`write` has returned.
        """
        _, datasets = self.writer.datasets[number]
        prepared = {}
        for name, rows in arrays.items():
            if name in _SERIES:
                prepared[name] = rows
                continue
            dataset = datasets[name]
            chunks = dataset.chunks
            prepared[name] = [
                ((start + first,) + offset,
                 self.pool.submit(_encode, self.pipelines[number][name],
                                  rows[first:first + chunks[0], ..., offset[-1]:offset[-1] + chunks[-1]],
                                  chunks, dataset.dtype))
                for first in range(0, len(rows), chunks[0]) for offset in row_offsets(dataset)
            ]
        return prepared

    def write(self, number, start, prepared):
        """Store the chunks :meth:`prepare` started and the box rows."""
        _, datasets = self.writer.datasets[number]
        for name, value in prepared.items():
            dataset = datasets[name]
            if name in _SERIES:
                if len(value):
                    self.writer.rows.write(dataset, start, value)
                continue
            for corner, future in value:
                data, mask = future.result()
                dataset.id.write_direct_chunk(corner, data, filter_mask=mask)

    def write_series(self, number, step, time, start=0):
        """Write group *number*'s ``step`` and ``time``."""
        self.writer.write_series(number, step, time, start)


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
