"""An MPI backend for MDAnalysis's parallel analysis (MDAnalysis >= 2.8).

MDAnalysis's ``AnalysisBase.run(backend=...)`` splits the frames into computation groups,
hands them to the backend's ``apply(func, groups)`` and expects back, in frame order, one
object per group with the ``frames``, ``times`` and ``results`` of that group; it then merges
the results with the analysis's own aggregator (``_get_aggregator``) and calls
``_conclude``. :class:`MPIBackend` runs inside a script that every rank of an MPI job
executes (``mpirun -n N python script.py``): on every rank ``run()`` plans the same groups,
``apply`` divides their frames into one contiguous block per rank (on the reader's chunk
boundaries, :func:`h5mdtool.bench.partition.partition_frames`), each rank computes its block, and
the blocks' results are exchanged with ``allgather``, so the merge and ``_conclude`` happen on
every rank and every rank's ``results`` equal those of a serial run.
"""

import contextlib
import pickle
import time

import numpy as np

try:
    from MDAnalysis.analysis.backends import BackendBase
except ImportError:  # MDAnalysis before 2.8 has no analysis backends
    import MDAnalysis

    raise ImportError(f"h5mdtool.mdanalysis.MPIBackend needs MDAnalysis 2.8 or later (analysis backends); "
                      f"this is MDAnalysis {MDAnalysis.__version__}") from None

from ..parallel.errors import RemoteRankError, mark_collective
from ..parallel.mpi import balanced_slices, describe, resolve
from ..parallel.partition import partition_frames
from ..parallel.progress import JobShare, progress_bar


class _BlockResult:
    """What ``run()`` reads from a computed block: its frames, times and results."""

    def __init__(self, frames, times, results):
        self.frames, self.times, self.results = frames, times, results


class MPIBackend(BackendBase):
    """Run an MDAnalysis analysis on the ranks of an MPI job, one block of frames per rank.

    Every rank runs the same script: it builds its own Universe and analysis and calls
    ``analysis.run(backend=MPIBackend(), unsupported_backend=True)``. The frames are divided
    into contiguous blocks, one per rank, that end on the trajectory's chunk boundaries
    (so no chunk of a compressed H5MD file is decompressed by two ranks); each rank computes
    its block; the blocks' results are combined with the analysis's aggregator, the way
    MDAnalysis's multiprocessing and dask backends combine theirs, and every rank ends up with
    the results of the serial run.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        The ranks that share the work. Default: ``MPI.COMM_WORLD`` when the script was
        started by an MPI launcher with several ranks, else one rank (no MPI needed).
    chunk_frames : int, optional
        Frames per storage chunk that blocks must not cut. Default: the reader's
        ``chunk_frames`` attribute (h5mdtool's reader), the chunk shape of MDAnalysis's own
        H5MD reader, else 1 (balanced blocks whose sizes differ by one at most).
    progress : bool, optional
        Show the run's progress on rank 0, counted in frames of the whole run (rank 0's
        share of its block, scaled: the ranks' blocks are equal and go at about the same
        pace). A live bar where rank 0's standard error reaches a terminal (also through
        ``mpirun``), else a line every 30 s and one at the end (``srun``, batch logs).
        MDAnalysis refuses ``run(verbose=True)`` with any backend but its serial one; this
        is the progress of an MPI run. Default False.

    Attributes
    ----------
    n_workers : int
        The communicator's size: one worker per rank. ``run(n_workers=...)`` may repeat it
        but not change it (MDAnalysis refuses a different value); the processes are started
        by ``mpirun``, not by the backend. ``run(n_parts=...)`` does not change the
        division either: the blocks follow the ranks and the chunks.
    last_run : dict or None
        After ``run()``: the ``partition`` (as :meth:`h5mdtool.bench.partition.Partition.describe`),
        ``t_compute``, each rank's seconds computing its block (rank order), and
        ``t_exchange``, this rank's seconds waiting for the others and exchanging results.

    Notes
    -----
    Analyses that MDAnalysis does not mark parallelizable (``RMSF`` in MDAnalysis 2.11,
    whose running mean cannot be split) are refused by ``run()`` itself with
    ``ValueError: Can not parallelize class ...`` on every rank, before any frame is read.
    A failure on one rank while computing raises there, and a
    :class:`~h5mdtool.parallel.errors.RemoteRankError` naming it on the others: no rank is left
    waiting.

    Examples
    --------
    In ``script.py``, run as ``mpirun -n 4 python script.py``::

        import h5mdtool.mdanalysis as h5mda
        from MDAnalysis.analysis.rms import RMSD

        u = h5mda.Universe("md.h5md")  # h5mdtool's reader; or h5mda.Universe("md.h5md", topology="md.tpr")
        rmsd = RMSD(u, select="name CA").run(backend=h5mda.MPIBackend(), unsupported_backend=True)
        # rmsd.results.rmsd is the same array on every rank
    """

    def __init__(self, comm=None, chunk_frames=None, progress=False):
        self.comm = resolve(comm)
        self.chunk_frames = chunk_frames
        self.progress = progress
        self.last_run = None
        super().__init__(n_workers=self.comm.size)

    def _get_checks(self):
        chunk = self.chunk_frames
        valid_chunk = chunk is None or (isinstance(chunk, (int, np.integer)) and chunk > 0)
        return super()._get_checks() | {valid_chunk: f"chunk_frames must be a positive integer, got {chunk!r}"}

    def apply(self, func, computations):
        """Compute this rank's share of *computations* and return every share's result.

        For the computation groups of ``AnalysisBase.run`` (``func`` is the analysis's
        ``_compute``), the groups' frames are divided into one block per rank along chunk
        boundaries, and the result is one object per non-empty block, in frame order, with
        that block's ``frames``, ``times`` and ``results``. For any other *func*, the items of
        *computations* are divided into contiguous runs over the ranks and the result is
        ``[func(item) for item in computations]``.

        Parameters
        ----------
        func : callable
        computations : list
            For ``run()``: arrays of shape (n, 2), iteration index and frame number.

        Returns
        -------
        list
            The same on every rank.
        """
        analysis = _analysis_of(func)
        if analysis is None:
            return self._apply_items(func, computations)
        return self._apply_frames(func, analysis, computations)

    def _apply_frames(self, func, analysis, computations):
        comm = self.comm
        indexed = np.concatenate([np.asarray(group, np.int64).reshape(-1, 2) for group in computations])
        partition = partition_frames(indexed[:, 1], comm.size, self._chunk_frames(analysis))
        first, last = partition.bounds[comm.rank]
        started = time.perf_counter()
        if not len(indexed):  # nothing to divide: every rank concludes on the empty run alike
            parts = [_computed(func, analysis, indexed)]
            self._record(partition, [time.perf_counter() - started], 0.0)
            return parts
        outcome = ("empty", None, None)
        if last > first:
            try:
                with self._shown(analysis, len(indexed), last - first):
                    outcome = ("ok", pickle.dumps(_computed(func, analysis, indexed[first:last])), None)
            except Exception as error:  # noqa: BLE001 - reported to the other ranks, then raised
                outcome = _failure(error)
        computed = time.perf_counter()
        reports = comm.allgather(outcome[:3] + (computed - started,))
        self._raise_failures(reports, outcome)
        self._record(partition, [report[3] for report in reports], time.perf_counter() - computed)
        return [pickle.loads(report[1]) for report in reports if report[0] == "ok"]

    def _apply_items(self, func, computations):
        comm = self.comm
        first, last = balanced_slices(len(computations), comm.size)[comm.rank]
        try:
            outcome = ("ok", pickle.dumps([func(item) for item in computations[first:last]]), None)
        except Exception as error:  # noqa: BLE001 - reported to the other ranks, then raised
            outcome = _failure(error)
        reports = comm.allgather(outcome[:3])
        self._raise_failures(reports, outcome)
        return [result for report in reports for result in pickle.loads(report[1])]

    def _raise_failures(self, reports, outcome):
        """Raise on every rank if any rank failed: the failing rank its own exception, the
        others a copy of the first failure's (same type, so every rank takes the same
        ``except`` branch of the script), caused by a RemoteRankError naming that rank."""
        failed = [rank for rank, report in enumerate(reports) if report[0] == "error"]
        if not failed:
            return
        if outcome[0] == "error":
            raise outcome[3]
        first = failed[0]
        _, message, pickled = reports[first][:3]
        remote = mark_collective(RemoteRankError(f"rank {first}: {message}"))
        try:
            error = pickle.loads(pickled)
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling
            raise remote from None
        raise error from remote

    @contextlib.contextmanager
    def _shown(self, analysis, total, mine):
        """Count rank 0's frames in a progress display of the whole run while the block is
        computed (each ``_single_frame`` call, through an instance attribute removed after)."""
        if not self.progress or self.comm.rank != 0:
            yield
            return
        bar = progress_bar(total, type(analysis).__name__, self.comm, enabled=True)
        share = JobShare(bar, total, mine)
        own = vars(analysis)
        had, before = "_single_frame" in own, own.get("_single_frame")
        single_frame = analysis._single_frame

        def counted():
            single_frame()
            share.update(1)

        own["_single_frame"] = counted
        try:
            yield
            share.finish()
        finally:
            if had:
                own["_single_frame"] = before
            else:
                own.pop("_single_frame", None)
            bar.close()

    def _record(self, partition, compute_times, exchange_time):
        self.last_run = {"partition": partition.describe(), "t_compute": compute_times, "t_exchange": exchange_time}

    def _chunk_frames(self, analysis):
        if self.chunk_frames is not None:
            return int(self.chunk_frames)
        return reader_chunk_frames(getattr(analysis, "_trajectory", None))


def _failure(error):
    """This rank's report of *error*: its description and the pickled exception (None if it
    does not pickle), then the exception itself, kept on this rank."""
    try:
        pickled = pickle.dumps(error)
    except Exception:  # noqa: BLE001 - any exception may hold unpicklable state
        pickled = None
    return ("error", describe(error), pickled, error)


def reader_chunk_frames(reader):
    """Frames per storage chunk of an MDAnalysis *reader*, 1 when it has none.

    h5mdtool's reader says so in ``chunk_frames``; MDAnalysis's own H5MD reader keeps the
    positions dataset, whose chunk shape says it.
    """
    declared = getattr(reader, "chunk_frames", None)
    if declared is not None:
        return max(1, int(declared))
    group = getattr(reader, "_particle_group", None)  # MDAnalysis.coordinates.H5MD.H5MDReader
    try:
        chunks = group["position/value"].chunks
    except (TypeError, KeyError, AttributeError, ValueError):
        return 1
    return int(chunks[0]) if chunks else 1


def _analysis_of(func):
    """The analysis whose ``_compute`` *func* calls (``run()`` passes a partial of it), or None."""
    from MDAnalysis.analysis.base import AnalysisBase

    method = getattr(func, "func", func)
    owner = getattr(method, "__self__", None)
    if isinstance(owner, AnalysisBase) and getattr(method, "__name__", None) == "_compute":
        return owner
    return None


def _computed(func, analysis, indexed):
    """Run *func* on one block and return the block's frames, times and results.

    ``_compute`` works on the analysis object itself; what it sets (``n_frames`` of the block,
    the sliced trajectory, ``_prepare``'s attributes) is undone afterwards, so ``run()`` merges
    and concludes on the object as it stood before, as with MDAnalysis's multiprocessing
    backend, whose workers compute on copies.
    """
    saved = dict(vars(analysis))
    try:
        computed = func(indexed)
        return _BlockResult(computed.frames, computed.times, computed.results)
    finally:
        vars(analysis).clear()
        vars(analysis).update(saved)
