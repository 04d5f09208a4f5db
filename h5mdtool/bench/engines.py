"""The two ways ``bench rmsd`` reads and superposes a rank's frames.

- ``blocks`` (:class:`BlocksEngine`): blocks of frames read at once from h5mdtool's sources
  and the batched numpy kernel of :mod:`h5mdtool.bench.rmsd`.
- ``frames`` (:class:`FramesEngine`): MDAnalysis Universes read frame by frame and the same
  calls MDAnalysis's ``rms.RMSD`` makes per frame (QCP, then the RMSD groups), as the papers
  measured.

Both walk the rank's frames in the blocks of :func:`frame_blocks`, charge reading to
``t_io`` and the kernel to ``t_compute`` on the rank's :class:`~h5mdtool.bench.timing.PhaseClock`,
repeat the kernel ``compute_load`` times (Khoshlessan et al. 2020's 40x/70x/100x RMSD loads), and call
the test hook ``rmsd-block`` once per block while reading.
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from ..parallel.testhooks import delay
from .rmsd import fit_rmsd, group_rmsd


def block_edges(start, stop, block_frames, chunk_frames=1):
    """Blocks ``[(a, b), ...]`` tiling frames ``[start, stop)``.

    With chunks of several frames, blocks are whole multiples of the chunk (at least one
    chunk, even when that is more than *block_frames*) and end on chunk boundaries, so no
    chunk is read, or decompressed, twice.
    """
    if chunk_frames > 1:
        step = max(1, block_frames // chunk_frames) * chunk_frames
        edges = list(range((start // step + 1) * step, stop, step))
        bounds = [start, *edges, stop]
    else:
        bounds = [*range(start, stop, block_frames), stop]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def frame_blocks(frames, block_frames, chunk_frames=1):
    """Split a rank's *frames* (increasing numbers) into blocks: ``[(first row, frames), ...]``.

    Consecutive frames are cut by :func:`block_edges` (on chunk boundaries); a strided or
    irregular selection into groups of *block_frames* frames.
    """
    frames = np.asarray(frames, np.int64)
    if len(frames) == 0:
        return []
    if frames[-1] - frames[0] + 1 == len(frames):
        first = int(frames[0])
        return [(a - first, frames[a - first:b - first])
                for a, b in block_edges(first, int(frames[-1]) + 1, block_frames, chunk_frames)]
    return [(row, frames[row:row + block_frames]) for row in range(0, len(frames), block_frames)]


class BlocksEngine:
    """Blocks of frames from an h5mdtool source, superposed by the batched kernel.

    Parameters
    ----------
    source : frame source (:mod:`h5mdtool.bench.frames`)
    plan : h5mdtool.bench.analysis.RmsdPlan
    compute_load : int
    """

    def __init__(self, source, plan, compute_load=1):
        self.source, self.plan, self.compute_load = source, plan, compute_load
        scale = float(source.scale)  # Angstrom per unit of the source: superpose in its units
        self.scale = scale
        self.reference = plan.reference_fit / scale
        self.group_references = [reference / scale for reference in plan.reference_groups]
        self.weights = plan.fit_weights if plan.weighted else None
        self.buffer = None

    def read(self, frames):
        """Positions (source units) and times of *frames*: one read when they are consecutive."""
        first, last = int(frames[0]), int(frames[-1])
        if last - first + 1 == len(frames):
            return self.source.read(first, last + 1)
        times = np.empty(len(frames))
        for row, frame in enumerate(frames):
            positions, time = self.source.read(int(frame), int(frame) + 1)
            if self.buffer is None or len(self.buffer) < len(frames) or self.buffer.dtype != positions.dtype:
                self.buffer = np.empty((len(frames),) + positions.shape[1:], positions.dtype)
            self.buffer[row] = positions[0]
            times[row] = time[0]
        return self.buffer[:len(frames)], times

    def compute(self, positions):
        """RMSD (Angstrom) of each frame: fit group, then each RMSD group (k, 1 + groups)."""
        plan = self.plan
        fit = positions if plan.fit_columns is None else positions[:, plan.fit_columns]
        out = np.empty((len(positions), 1 + len(plan.group_columns)))
        for _ in range(self.compute_load):
            if not plan.group_columns:
                out[:, 0] = fit_rmsd(fit, self.reference, self.weights)
                continue
            out[:, 0], centres, rotation = fit_rmsd(fit, self.reference, self.weights, rotations=True)
            for column, (atoms, reference, weights) in enumerate(
                    zip(plan.group_columns, self.group_references, plan.group_weights), 1):
                out[:, column] = group_rmsd(positions[:, atoms], reference, weights, centres, rotation)
        return out * self.scale

    def run_read(self, blocks, atoms, results, clock, progress=None):
        """Fill the first rows of *results* from blocks read already (frames read ahead while
        rank 0 planned, :mod:`h5mdtool.bench.read_ahead`): ``(positions of every atom,
        times)`` pairs in frame order, of which *atoms* (``plan.read_indices``) are analysed.
        Returns the seconds of each block's kernel call alone."""
        row, seconds = 0, []
        with threadpool_limits(limits=1, user_api="blas"):
            for positions, times in blocks:
                rows = slice(row, row + len(positions))
                results[rows, 1] = times
                started = time.perf_counter()
                # np.take gathers from blocks no longer in the cache 1.6x faster than fancy indexing
                results[rows, 2:] = self.compute(np.take(positions, atoms, axis=1))
                seconds.append(time.perf_counter() - started)
                clock.charge("t_compute")
                row += len(positions)
                if progress is not None:
                    progress.update(len(positions))
        return seconds

    def run(self, frames, results, clock, rank, block_frames, progress=None):
        """Fill *results* (rows of *frames*: time, RMSDs) block by block, charging *clock*;
        *progress* (:class:`~h5mdtool.parallel.progress.JobShare`) counts the frames done."""
        # The kernel's BLAS calls are small (fit group atoms x 3): OpenBLAS's threads gain
        # nothing and spin between calls on the cores that decompress chunks.
        with threadpool_limits(limits=1, user_api="blas"):
            for row, block in frame_blocks(frames, block_frames, self.source.chunk_frames):
                positions, times = self.read(block)
                delay("rmsd-block", rank)
                clock.charge("t_io")
                rows = slice(row, row + len(block))
                results[rows, 1] = times
                results[rows, 2:] = self.compute(positions)
                clock.charge("t_compute")
                if progress is not None:
                    progress.update(len(block))


# Below this fraction of the reference fit group's radius of gyration, above the RMSD
# without rotation, or NaN, QCP's RMSD and rotation are recomputed (see FramesEngine._svd_fit):
# its eigenvalue near a double root is resolved to about 1e-8 of the group's squared size,
# 1e-4 of its size in RMSD
UNRESOLVED_RELATIVE = 1e-3
#: A fit group whose reference's second principal axis is below this fraction of its first
#: is collinear (two atoms always are): every turn about the line fits equally, the key
#: matrix's two largest eigenvalues coincide, and QCP's RMSD is never trusted (see
#: FramesEngine._svd_fit).
COLLINEAR_RELATIVE = 1e-6


class FramesEngine:
    """MDAnalysis frame by frame, with the per-frame calls of MDAnalysis's ``rms.RMSD``."""

    def __init__(self, source, plan, compute_load=1):
        from MDAnalysis.lib import qcprot

        self.source, self.plan, self.compute_load = source, plan, compute_load
        self.qcp = qcprot.CalcRMSDRotationalMatrix
        self.weights = plan.fit_weights if plan.weighted else None
        self.reference = np.ascontiguousarray(plan.reference_fit, np.float64)
        size = np.sqrt(np.average(np.sum(self.reference**2, axis=1), weights=self.weights))
        self.unresolved_below = UNRESOLVED_RELATIVE * size
        axes = np.linalg.svd(self.reference, compute_uv=False)
        self.collinear = len(self.reference) < 3 or axes[1] <= COLLINEAR_RELATIVE * axes[0]

    def compute(self, positions):
        """RMSDs of one frame (Angstrom): QCP on the fit group, then the groups without refitting."""
        from MDAnalysis.analysis.rms import rmsd

        plan = self.plan
        out = np.empty(1 + len(plan.group_columns))
        rotation = np.zeros(9) if plan.group_columns else None
        for _ in range(self.compute_load):
            mobile = np.asarray(positions if plan.fit_columns is None else positions[plan.fit_columns], np.float64)
            centre = np.average(mobile, axis=0, weights=self.weights)
            mobile = mobile - centre
            if self.collinear:  # QCP's value would be discarded
                out[0], matrix = self._svd_fit(mobile)
            else:
                out[0] = self.qcp(self.reference, mobile, len(mobile), rotation, self.weights)
                matrix = None if rotation is None else rotation.reshape(3, 3)
                if not self.unresolved_below <= out[0] <= self._unrotated(mobile):
                    out[0], matrix = self._svd_fit(mobile)
            if rotation is None:
                continue
            for column, (atoms, reference, weights) in enumerate(
                    zip(plan.group_columns, plan.reference_groups, plan.group_weights), 1):
                moved = np.dot(np.asarray(positions[atoms], np.float64) - centre, matrix)
                out[column] = rmsd(reference, moved, weights=weights if plan.weighted else None,
                                   center=False, superposition=False)
        return out

    def _unrotated(self, mobile):
        """RMSD (A) of the centred *mobile* to the reference without rotation, a bound the best
        superposition cannot exceed (with a margin for rounding).

        For a collinear fit group QCP's Newton iteration can also land on the key matrix's
        smallest eigenvalue: MDAnalysis then reports twice the group's size (101.8 A for a
        frame against itself, two atoms 100 A apart; make fuzz case 1253).
        """
        squared = np.average(np.sum((mobile - self.reference) ** 2, axis=1), weights=self.weights)
        return np.sqrt(squared) * (1 + 1e-6) + 1e-9

    def _svd_fit(self, mobile):
        """RMSD (A) and rotation of the centred *mobile* by the blocks engine's SVD kernel.

        QCP takes the RMSD from the largest eigenvalue of its key matrix; for a frame at or
        near the reference, and for a collinear (two-atom) fit group, that eigenvalue is a
        near-double root its Newton iteration does not resolve: MDAnalysis reports 2e-3 A
        (AdK, two C-alpha atoms) or 0.5 A (two atoms 6000 A apart) where the RMSD is 0, NaN
        with a NaN rotation, or the smallest root's RMSD (see :meth:`_unrotated`). For a
        collinear group the error is not confined to small RMSDs: 2.99 A where the RMSD is
        2.77 A (two atoms 5500 A apart; make fuzz case 205 of seed 3652262229), so such a
        group is always fitted here.
        """
        values, _, rotation = fit_rmsd(mobile[None], self.reference, self.weights, rotations=True)
        return float(values[0]), rotation[0]

    def run(self, frames, results, clock, rank, block_frames, progress=None):
        """Fill *results* frame by frame: each load is I/O, each kernel call compute."""
        for row, block in frame_blocks(frames, block_frames):
            delay("rmsd-block", rank)
            for offset, frame in enumerate(block):
                positions, time = self.source.frame(int(frame))
                clock.charge("t_io")
                results[row + offset, 1] = time
                results[row + offset, 2:] = self.compute(positions)
                clock.charge("t_compute")
            if progress is not None:
                progress.update(len(block))
