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
3. the pieces are joined in file order: the true chain of frames enters each range at the
   position where the previous range's chain left it; when that position is a frame start
   of the range's piece, the piece's frames from there on are the file's (the walk from a
   position is determined by the bytes alone); otherwise (a false start, a damaged header
   the search stepped over) every rank walks that range again from the true position.

Every rank first learns the others' piece summaries (where each piece starts and ends,
whether its walk finished cleanly: :func:`summary`). When each piece starts where the one
before ended, as in a sound file, the join is known from them alone (:func:`chained`), and
each rank sends its piece once, compactly (:func:`compact`: frame lengths, and only the
words of its headers that change from frame to frame: the step and time, and the box of a
run at constant pressure; 12 bytes a frame of a 600x AdK XTC against 68 for its offsets and
headers as they are), in one ``Allgatherv`` every rank unpacks (:func:`expand`). Otherwise
the pieces themselves are gathered and joined as above.

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
    stat, cached = root_call(comm, _lookup, cls, path, is_parallel(comm))
    if cached is not None:
        if is_parallel(comm):  # rank 0 sent it packed
            header, count, end, payload = cached
            with same_on_every_rank(comm):
                cached = expand(cls.walker, path, [{"header": header, "count": count, "end": end}], [payload],
                                [True])
        segment = cls.segment(path, stat, *cached, None)
        segment.cached = True
        return segment
    if is_parallel(comm):
        offsets, rows, dropped = _walk_together(cls, path, stat, on_truncated, comm)
    else:
        stat, walk = cls.walker.whole_file(path, on_truncated)
        offsets, rows, dropped = walk.walked_offsets(), walk.rows(), walk.dropped
    segment = cls.segment(path, stat, offsets, rows, dropped)  # raises for headers that disagree
    if comm.rank == 0 and dropped is None:
        offsetcache.store(cls, path, stat, offsets, rows)
    return segment


def _walk_together(cls, path, stat, on_truncated, comm):
    """Every rank walks its byte range; the pieces are chained from their summaries and sent
    packed, or, when they do not chain, gathered and joined (the module's docstring).

    Returns
    -------
    offsets, rows, dropped
        As :func:`join_pieces`, on every rank.
    """
    ranges = byte_ranges(stat.st_size, comm.size)
    piece = walk_piece(cls.walker, path, stat.st_size, ranges[comm.rank], comm.rank == 0)
    header, payload = compact(piece)
    summaries = comm.allgather(summary(piece, header, len(payload)))
    taken = chained(ranges, summaries, stat.st_size)
    with same_on_every_rank(comm):
        if taken is None:  # a false start, a damaged or incomplete frame: join the pieces themselves
            return join_pieces(cls, path, stat, on_truncated, ranges, comm.allgather(piece))
        payloads = _allgatherv(comm, payload if taken[comm.rank] else b"",
                               [s["payload"] if t else 0 for s, t in zip(summaries, taken)])
        return (*expand(cls.walker, path, summaries, payloads, taken), None)


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


def _lookup(cls, path, packed):
    """Rank 0: :func:`~h5mdtool.formats.offsetcache.lookup`, the offsets and headers found
    :func:`compact` when *packed* (to be broadcast): ``(stat, (header, count, end, payload))``."""
    stat, cached = offsetcache.lookup(cls, path)
    if cached is None or not packed:
        return stat, cached
    offsets, rows = cached
    header, payload = compact({"offsets": offsets[:-1], "rows": rows, "end": offsets[-1]})
    return stat, (header, len(offsets) - 1, int(offsets[-1]), payload)


def summary(piece, header, payload_bytes):
    """What every rank learns of a rank's *piece* before the join: its first frame start (None
    without frames) and where it ends, whether its walk finished cleanly, its frame count,
    its :func:`compact` *header* and the bytes of its payload."""
    offsets = piece["offsets"]
    return {"first": int(offsets[0]) if len(offsets) else None, "end": int(piece["end"]), "clean": piece["clean"],
            "count": len(offsets), "unreadable": piece["unreadable"], "header": header, "payload": payload_bytes}


def chained(ranges, summaries, size):
    """Which pieces make the file's chain of frames, whole, from *summaries* alone: a list of
    booleans (one per rank), or None when a piece does not start where the chain enters its
    range, a walk did not finish cleanly or a rank could not read the file (the pieces must
    then be joined themselves, :func:`join_pieces`).

    The chain enters range r where the piece before it ended; a range the chain has already
    passed contributes nothing.
    """
    taken, position = [], 0
    for (_, hi), piece in zip(ranges, summaries):
        if piece["unreadable"]:
            return None
        if position >= size or position >= hi:
            taken.append(False)
            continue
        if piece["first"] != position or not piece["clean"]:
            return None
        taken.append(True)
        position = piece["end"]
    return taken if position >= size else None


def compact(piece):
    """A piece's frames in few bytes: ``(header, payload)``.

    The packed headers are taken as words (of 4 bytes when a header's width allows, else
    bytes). The *header* (small, picklable) holds the first frame start, the width of a frame
    length (4 bytes when every length fits, else 8), the packed headers' dtype and row
    shape, the first frame's header and which of its words every frame repeats; the
    *payload* holds the frame lengths, then, frame after frame, the words that change.
    :func:`expand` puts them back together.
    """
    offsets = piece["offsets"]
    if not len(offsets):
        return None, b""
    rows = piece["rows"]
    lengths = np.diff(np.append(offsets, piece["end"]))
    length_type = np.uint32 if lengths.max() < 2**32 else np.int64
    records = np.ascontiguousarray(rows).view(np.uint8).reshape(len(offsets), -1)
    words = _words(records)
    same = (words == words[0]).all(axis=0)
    header = {"first": int(offsets[0]), "length_type": np.dtype(length_type).str, "dtype": rows.dtype,
              "shape": rows.shape[1:], "width": records.shape[1], "row": records[0].tobytes(), "same": same}
    payload = lengths.astype(length_type).tobytes() + np.ascontiguousarray(words[:, ~same]).tobytes()
    return header, payload


def _words(records):
    """The uint8 rows *records* seen as rows of 4-byte words when their width allows, else as they are."""
    return records.view(np.uint32) if records.shape[1] % 4 == 0 else records


def expand(walker, path, summaries, payloads, taken):
    """The frames of the pieces *taken* (:func:`chained`) from their :func:`compact` forms:
    ``(offsets, rows)`` as :func:`join_pieces` gives them.

    Parameters
    ----------
    walker : type
        The format's :class:`~h5mdtool.formats.base.FrameWalk`.
    path : str
    summaries : list of dict
        Every rank's :func:`summary`.
    payloads : list of bytes-like
        Every rank's payload (empty for a piece not taken).
    taken : list of bool
    """
    pieces = [(s, memoryview(p)) for s, p, t in zip(summaries, payloads, taken) if t]
    n = sum(s["count"] for s, _ in pieces)
    first = pieces[0][0]["header"]
    records = np.empty((n, first["width"]), np.uint8)
    words = _words(records)
    starts = np.empty(n, np.int64)
    row = 0
    for piece, payload in pieces:
        header, count = piece["header"], piece["count"]
        length_type = np.dtype(header["length_type"])
        split = count * length_type.itemsize
        lengths = np.frombuffer(payload[:split], length_type)
        starts[row] = header["first"]
        np.cumsum(lengths[:-1], out=starts[row + 1:row + count])
        starts[row + 1:row + count] += header["first"]
        block = words[row:row + count]
        block[:] = np.frombuffer(header["row"], words.dtype)
        varying = ~header["same"]
        if varying.any():
            block[:, varying] = np.frombuffer(payload[split:], words.dtype).reshape(count, int(varying.sum()))
        row += count
    rows = records.view(first["dtype"]).reshape((n,) + tuple(first["shape"]))
    return walker.file_offsets(path, starts, pieces[-1][0]["end"]), rows


def _allgatherv(comm, data, sizes):
    """Every rank's bytes *data* (of the *sizes* every rank knows), in rank order, on every rank."""
    from mpi4py import MPI

    displacements = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    received = np.empty(int(sum(sizes)), np.uint8)
    send = np.frombuffer(data, np.uint8) if len(data) else np.empty(0, np.uint8)
    comm.Allgatherv([send, MPI.BYTE], [received, list(sizes), list(displacements), MPI.BYTE])
    return [received[d:d + n] for d, n in zip(displacements, sizes)]


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
