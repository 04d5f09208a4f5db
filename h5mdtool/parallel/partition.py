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

from dataclasses import dataclass

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
    """

    scheme: str
    bounds: list
    units: int = 0
    shared_units: int = 0

    def counts(self):
        """Frames per rank."""
        return [b - a for a, b in self.bounds]

    def describe(self):
        """JSON-ready summary for the report."""
        return {"scheme": self.scheme, "units": self.units, "shared_units": self.shared_units,
                "frames_per_rank": self.counts()}


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
