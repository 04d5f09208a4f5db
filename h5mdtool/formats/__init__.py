"""The reading stack of h5mdtool: one module per trajectory format, one registry.

Every command that reads trajectories (convert, split, ``validate --against``, ``bench
rmsd``) goes through this package:

* :func:`scan` (rank 0) scans the segments of one trajectory, checking every frame header,
  and returns a :class:`TrajectoryIndex` to broadcast;
* :class:`TrajectoryReader` (any rank) reads blocks of frames of that index for a selection
  of atoms into a :class:`FrameBlock`, opening only the segments holding them.

Adding a format means adding a module with a :class:`~h5mdtool.formats.base.Format`
subclass and listing it in :data:`REGISTRY`, as MDAnalysis's ``coordinates`` package and
h5py's driver table do.

Also here: GROMACS index files (:mod:`.ndx`) and ``-b/-e/--dt`` frame selections by time
(:mod:`.frametimes`).

May import: :mod:`h5mdtool.h5md` (the chunk reader, codecs) and :mod:`h5mdtool.parallel`.
"""

from .base import ATOM_FIELDS, FIELDS, UNITS, Format, FrameBlock, Segment
from .registry import EXTENSIONS, REGISTRY, detect_format, format_class, load_decoders
from .trajectory import (
    OVERLAP_POLICIES, TRUNCATION_POLICIES, TrajectoryIndex, TrajectoryReader, check_trajectory, read_frame, scan,
    scan_segment, select_frames
)

__all__ = [
    "ATOM_FIELDS", "EXTENSIONS", "FIELDS", "OVERLAP_POLICIES", "REGISTRY", "TRUNCATION_POLICIES", "UNITS",
    "Format", "FrameBlock", "Segment", "TrajectoryIndex", "TrajectoryReader", "check_trajectory", "detect_format",
    "format_class", "read_frame",
    "load_decoders", "scan", "scan_segment", "select_frames",
]
