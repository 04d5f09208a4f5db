"""XTC and TRR frame offsets: from the offsets cache, or found by all ranks together.

XTC and TRR frames carry no index: their starts are found by walking the headers, one frame
after the other (:class:`~h5mdtool.formats.base.FrameWalk`), which on one rank takes about
10 us per frame (a 588,000-frame XTC: over a second while every other rank waits). Here
the file is cut into one byte range per rank, and

1. each rank finds the first frame start in its range: a 4-byte-aligned position where a
   header of the file's atom count begins and whose frame, and the frame after it, pass
   the walk's checks; rank 0 starts at byte 0;
2. each rank walks its range from there, with every check of the serial scan, until a
   frame starts in the next range (or the walk refuses a frame, or the file ends);
3. the pieces (frame starts and packed headers, compact arrays) are gathered on every rank
   and joined in file order: the true chain of frames enters each range at the position
   where the previous range's chain left it; when that position is a frame start of the
   range's piece, the piece's frames from there on are the file's (the walk from a position
   is determined by the bytes alone); otherwise (a false start, a damaged header the search
   stepped over) every rank walks that range again from the true position.

Where a piece's walk refused a frame, every rank walks again from that frame with its true
number, so a damaged file gives the serial scan's error, word for word, on every rank at
once; no rank raises before the gather, so none is left waiting. The joined frames are
then checked and turned into a :class:`~h5mdtool.formats.base.Segment` as the serial scan
does (the format's ``segment``). The result equals the serial scan's exactly.
"""

import os

import numpy as np

from ..parallel.errors import InputError
from ..parallel.mpi import SerialComm, balanced_slices, is_parallel, root_call, same_on_every_rank
from . import offsetcache
from .base import reason

#: Bytes searched at once for a frame start.
SEARCH_WINDOW = 1 << 20
#: Frames a start found by the search must walk cleanly (or reach the end of the file) to be taken.
CONFIRM_FRAMES = 2


def byte_ranges(size, n_ranks):
    """One ``(first, stop)`` byte range per rank, cut at multiples of 4 (frame starts are)."""
    words = -(-int(size) // 4)
    return [(4 * first, min(4 * stop, size)) for first, stop in balanced_slices(words, n_ranks)]


def scan_walked(cls, path, on_truncated, comm=None):
    """The :class:`~h5mdtool.formats.base.Segment` of XTC or TRR file *path* of format *cls*.

    Rank 0 looks the file up in the offsets cache (:mod:`h5mdtool.formats.offsetcache`);
    when the cache does not hold it, the file is scanned, by every rank of *comm* together
    when it has several (see the module's docstring), and rank 0 keeps the scan of a whole,
    sound file in the cache. Every rank of *comm* calls it.

    Returns
    -------
    Segment
        On every rank, equal to ``cls.scan(path, on_truncated)``.

    Raises
    ------
    InputError
        On every rank together (flagged collective), the serial scan's error.
    """
    comm = comm or SerialComm()
    stat, cached = root_call(comm, offsetcache.lookup, cls, path)
    if cached is not None:
        segment = cls.segment(path, stat, *cached, None)
        segment.cached = True
        return segment
    if is_parallel(comm):
        ranges = byte_ranges(stat.st_size, comm.size)
        pieces = comm.allgather(walk_piece(cls.walker, path, stat.st_size, ranges[comm.rank], comm.rank == 0))
        with same_on_every_rank(comm):
            offsets, rows, dropped = join_pieces(cls, path, stat, on_truncated, ranges, pieces)
    else:
        stat, walk = cls.walker.whole_file(path, on_truncated)
        offsets, rows, dropped = walk.walked_offsets(), walk.rows(), walk.dropped
    segment = cls.segment(path, stat, offsets, rows, dropped)  # raises for headers that disagree
    if comm.rank == 0 and dropped is None:
        offsetcache.store(cls, path, stat, offsets, rows)
    return segment


def join_pieces(cls, path, stat, on_truncated, ranges, pieces):
    """The frames of *path* from the pieces of every rank (:func:`walk_piece`, in rank
    order), as the serial scan finds them; every rank calls it.

    Returns
    -------
    offsets, rows, dropped
        As :func:`_join`.

    Raises
    ------
    InputError
        The serial scan's error.
    """
    failures = [piece["unreadable"] for piece in pieces if piece["unreadable"]]
    if failures:
        raise InputError(f"{path}: cannot be read ({failures[0]})")
    return _join(cls.walker, path, stat.st_size, on_truncated, ranges, pieces)


def walk_piece(walker, path, size, byte_range, first):
    """A rank's piece: the frames it walked in *byte_range* (a dict of compact arrays);
    *first* for rank 0, whose range starts with frame 0.

    Never raises for what the file holds: a frame the walk refuses ends the piece
    (``clean`` False) and the join walks it again; a read error is reported in
    ``unreadable``.
    """
    lo, hi = byte_range
    piece = {"start": None, "offsets": np.empty(0, np.int64), "rows": None, "end": lo, "clean": False,
             "n_atoms": None, "unreadable": None}
    if hi <= lo:
        return piece
    try:
        with open(path, "rb", buffering=0) as handle:
            fd = handle.fileno()
            if first:
                walk = walker(path, fd, size, "error")
            else:
                n_atoms = walker.first_atom_count(os.pread(fd, walker.count_bytes, 0))
                walk = None if n_atoms is None else _first_start(walker, path, fd, size, lo, hi, n_atoms)
                if walk is None:
                    return piece
            piece["start"] = walk.position
            try:
                piece["clean"] = walk.run(stop=hi)
            except InputError:
                piece["clean"] = False
    except OSError as error:
        piece["unreadable"] = reason(error)
        return piece
    piece.update(offsets=np.asarray(walk.offsets, np.int64), rows=walk.rows(), end=walk.position,
                 n_atoms=walk.n_atoms)
    return piece


def _first_start(walker, path, fd, size, lo, hi, n_atoms):
    """A walk standing after the first credible frame start in ``[lo, hi)`` and the frames
    that confirmed it, or None when the range holds none."""
    window_start = lo
    while window_start < hi:
        data = os.pread(fd, min(SEARCH_WINDOW, hi - window_start) + walker.head_bytes, window_start)
        words = np.frombuffer(data[: len(data) // 4 * 4], ">i4")
        for index in walker.candidates(words, n_atoms):
            position = window_start + 4 * int(index)
            if position >= hi:
                return None
            walk = walker(path, fd, size, "error", position=position, frame=1, n_atoms=n_atoms)
            try:
                for _ in range(CONFIRM_FRAMES):
                    walk.run(stop=walk.position + 1)  # one frame (none at the end of the file)
            except InputError:
                continue
            return walk
        window_start += SEARCH_WINDOW
    return None


def _join(walker, path, size, on_truncated, ranges, pieces):
    """The frames of the whole file from the gathered *pieces*, as the serial walk finds them.

    Returns
    -------
    offsets : numpy.ndarray
        Start of each frame, then the end of the last one.
    rows : numpy.ndarray
        The packed headers (:meth:`~h5mdtool.formats.base.FrameWalk.rows`).
    dropped : dict or None
    """
    offsets, rows = [], []
    position, frame, n_atoms = 0, 0, None
    with open(path, "rb", buffering=0) as handle:
        def walk_from(stop):
            """Walk the file from *position* as the serial scan would (every rank alike)."""
            walk = walker(path, handle.fileno(), size, on_truncated, position=position, frame=frame, n_atoms=n_atoms)
            try:
                finished = walk.run(stop=stop)
            except OSError as error:
                raise InputError(f"{path}: cannot be read ({reason(error)})") from None
            offsets.append(np.asarray(walk.offsets, np.int64))
            rows.append(walk.rows())
            return walk, finished

        for (lo, hi), piece in zip(ranges, pieces):
            if position >= size or position >= hi:
                continue
            at = int(np.searchsorted(piece["offsets"], position))
            if at < len(piece["offsets"]) and piece["offsets"][at] == position:
                offsets.append(piece["offsets"][at:])
                rows.append(piece["rows"][at:])
                frame += len(piece["offsets"]) - at
                position, n_atoms = int(piece["end"]), piece["n_atoms"]
                if piece["clean"]:
                    continue
                stop = None  # the piece's walk refused the next frame: the serial walk says why
            else:
                stop = hi  # no piece frame there: walk the range as one rank would
            walk, finished = walk_from(stop)
            frame, position, n_atoms = walk.frame, walk.position, walk.n_atoms
            if not finished:  # an incomplete last frame, dropped
                return _joined(walker, path, offsets, rows, position, walk.dropped)
    return _joined(walker, path, offsets, rows, position, None)


def _joined(walker, path, offsets, rows, end, dropped):
    starts = np.concatenate(offsets) if offsets else np.empty(0, np.int64)
    offsets = walker.file_offsets(path, starts, end)
    return offsets, np.concatenate([r for r in rows if len(r)]), dropped
