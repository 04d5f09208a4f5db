"""Which frames each rank analyses: contiguous blocks that follow the input's layout.

- A split trajectory (manifest) is divided by parts: with N parts holding selected frames
  and R ranks where R divides N, each rank reads N/R whole parts and opens only those
  (docs/split.md: split into as many parts as the largest job has ranks, and any job whose
  rank count divides it reads whole parts). Otherwise frames are balanced and some parts are
  read by two ranks; the partition says how many.
- An H5MD file chunked by several frames is divided on chunk boundaries, so no chunk is read
  (or decompressed) by two ranks.
- Anything else: balanced contiguous blocks of the selected frames (sizes differ by one at
  most).
"""

from dataclasses import dataclass, replace

import numpy as np

from .mpi import balanced_slices


@dataclass
class Partition:
    """Each rank's share of the selected frames.

    Attributes
    ----------
    scheme : {"parts", "chunks", "frames"}
        Whole parts, whole chunks, or balanced frames.
    bounds : list of (int, int)
        Per rank, ``[a, b)`` positions in the array of selected frames.
    units : int
        Parts (or chunks) holding selected frames; 0 for ``frames`` on an unsplit input.
    shared_units : int
        Parts (or chunks) read by more than one rank.
    ranges : list of list of (int, int) or None
        After :meth:`shed`: each rank's ranges (its share, and its piece of rank 0's end).
    saved_ahead : float or None
        After :meth:`shed`: the frames' worth of work the other ranks did ahead, in all.
    """

    scheme: str
    bounds: list
    units: int = 0
    shared_units: int = 0
    ranges: list = None
    saved_ahead: float = None

    def rank_ranges(self, rank):
        """The ``[a, b)`` position ranges *rank* analyses: its bounds, or after
        :meth:`shed` its share and its piece of rank 0's."""
        if self.ranges is None:
            a, b = self.bounds[rank]
            return [(a, b)] if b > a else []
        return self.ranges[rank]

    def counts(self):
        """Frames per rank (after :meth:`shed`, with the frames moved)."""
        return [sum(b - a for a, b in self.rank_ranges(rank)) for rank in range(len(self.bounds))]

    def shed(self, ahead, selected, chunk_frames=1, min_piece=1):
        """This partition with the end of rank 0's share moved to the ranks that did *ahead*
        frames' worth of work in all while it planned (:func:`shed_root_frames`)."""
        ranges = shed_root_frames(self.bounds, ahead, selected, chunk_frames, min_piece)
        return replace(self, ranges=ranges, saved_ahead=round(float(ahead), 1))

    def describe(self):
        """JSON-ready summary for the report (with :meth:`shed`: the frames' worth of work
        each rank did ahead, and each rank's share as first planned)."""
        summary = {"scheme": self.scheme, "units": self.units, "shared_units": self.shared_units,
                   "frames_per_rank": self.counts()}
        if self.saved_ahead is not None:
            summary.update(read_ahead_saved_frames=self.saved_ahead,
                           planned_frames_per_rank=[b - a for a, b in self.bounds])
        return summary


def _unit_bounds(unit_ids):
    """Positions where each run of equal unit ids starts, plus the end: ``[0, ..., len]``."""
    starts = np.flatnonzero(np.diff(unit_ids)) + 1
    return np.concatenate([[0], starts, [len(unit_ids)]]).astype(np.int64)


def _by_units(unit_bounds, n_ranks):
    return [(int(unit_bounds[a]), int(unit_bounds[b])) for a, b in balanced_slices(len(unit_bounds) - 1, n_ranks)]


def _shared(unit_bounds, bounds):
    """Units whose frames are divided among two or more ranks."""
    inner = set(int(x) for x in unit_bounds)
    cuts = [a for a, b in bounds if b > a and a not in inner]
    return len({int(np.searchsorted(unit_bounds, cut, side="right")) - 1 for cut in cuts})


def partition_frames(selected, n_ranks, chunk_frames=1, part_edges=None):
    """Divide *selected* frames among *n_ranks* ranks, following the input's layout.

    Parameters
    ----------
    selected : numpy.ndarray of int
        The frame numbers to analyse, increasing.
    n_ranks : int
    chunk_frames : int
        Frames per storage chunk (H5MD); 1 when it means nothing.
    part_edges : sequence of int, optional
        For a split trajectory: the first frame of each part, then the total frame count.

    Returns
    -------
    Partition
    """
    selected = np.asarray(selected, dtype=np.int64)
    if part_edges is not None:
        unit_ids = np.searchsorted(np.asarray(part_edges, np.int64), selected, side="right") - 1
        unit_bounds = _unit_bounds(unit_ids)
        units = len(unit_bounds) - 1 if len(selected) else 0
        if units and units % n_ranks == 0:
            return Partition("parts", _by_units(unit_bounds, n_ranks), units, 0)
        bounds = balanced_slices(len(selected), n_ranks)
        return Partition("frames", bounds, units, _shared(unit_bounds, bounds) if units else 0)
    if chunk_frames > 1 and len(selected):
        unit_bounds = _unit_bounds(selected // int(chunk_frames))
        return Partition("chunks", _by_units(unit_bounds, n_ranks), len(unit_bounds) - 1, 0)
    return Partition("frames", balanced_slices(len(selected), n_ranks))


def shed_root_frames(bounds, ahead, selected, chunk_frames=1, min_piece=1):
    """Move the end of rank 0's share to the ranks that read ahead while rank 0 worked alone.

    While rank 0 resolves an analysis (the serial part of ``bench rmsd``) the other ranks
    read the first frames of their shares (:mod:`h5mdtool.bench.read_ahead`). Rank 0 then
    keeps the head of its share and the end is divided evenly among K other ranks (ranks 1
    to K), so that rank 0 is left with as many frames still to do as the others on average:
    it gives away ``K / (K + 1)`` times its frames less the others' mean of frames left,
    rounded to the nearest chunk boundary (no chunk is read by two ranks). K is every other
    rank, or fewer where pieces of *min_piece* frames need fewer: each rank taking a piece
    of a split trajectory's part opens that part and scans it from its start, so at scale a
    few ranks take larger pieces instead of every rank a few frames.

    Parameters
    ----------
    bounds : list of (int, int)
        :attr:`Partition.bounds`: each rank's ``[a, b)`` positions in *selected*.
    ahead : float
        Frames' worth of work the other ranks did ahead, in all (one ``allreduce``): the
        frames they read, less the compute those still need
        (:meth:`h5mdtool.bench.read_ahead.ReadAhead.saved_frames`).
    selected : numpy.ndarray of int
        The selected frame numbers (increasing), for chunk boundaries.
    chunk_frames : int
        Frames per storage chunk (1 when it means nothing).
    min_piece : int
        Frames a piece of rank 0's end should hold at least (one rank takes the whole end
        when it is smaller).

    Returns
    -------
    list of list of (int, int)
        Per rank, its non-empty ranges of positions in *selected*: rank 0 the head of its
        share; every other rank its own share, then its piece of rank 0's end (if any).

    Examples
    --------
    >>> shed_root_frames([(0, 100), (100, 200)], 40, np.arange(200))
    [[(0, 80)], [(100, 200), (80, 100)]]
    """
    n_ranks = len(bounds)
    ranges = [[(a, b)] if b > a else [] for a, b in bounds]
    if n_ranks < 2 or ahead <= 0:
        return ranges
    others = (sum(b - a for a, b in bounds[1:]) - ahead) / (n_ranks - 1)
    first, last = bounds[0]
    lead = last - first - others  # rank 0's frames left beyond the others' mean
    receivers = n_ranks - 1
    if min_piece > 1:  # K: pieces of lead / (K + 1) frames hold min_piece at least, 1 <= K < N
        receivers = int(min(receivers, max(1, lead // min_piece - 1)))
    excess = lead * receivers / (receivers + 1)
    cut = last - int(round(min(max(excess, 0.0), last - first)))
    if chunk_frames > 1 and first < cut < last:  # to the nearest chunk boundary
        units = np.asarray(selected[first:last], np.int64) // int(chunk_frames)
        edges = np.concatenate([[first], first + np.flatnonzero(np.diff(units)) + 1, [last]])
        cut = int(edges[np.argmin(np.abs(edges - cut))])
    if cut >= last:
        return ranges
    ranges[0] = [(first, cut)] if cut > first else []
    pieces = partition_frames(np.asarray(selected[cut:last]), receivers, chunk_frames).bounds
    for rank, (a, b) in enumerate(pieces, 1):
        if b > a:
            ranges[rank].append((cut + a, cut + b))
    return ranges
