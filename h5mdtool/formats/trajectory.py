"""One trajectory made of segment files: scanning (rank 0), the shared index, block reading.

:func:`scan` scans each segment with its format's scanner, checks that the segments hold the
same atoms, resolves overlapping steps between consecutive segments (restarts) and checks
that steps increase through the whole trajectory. The :class:`TrajectoryIndex` it returns
holds, per frame of the trajectory, the step, the time and which fields the frame holds.
"""

import os
from collections import OrderedDict

import numpy as np

from ..parallel.errors import InputError, OverlapError, UsageError
from ..parallel.mpi import SerialComm, is_parallel, root_call, same_on_every_rank
from ..parallel.testhooks import delay
from .base import ANGSTROM_PER_NM, ATOM_FIELDS, FIELDS, FrameBlock, unwrap_steps, with_stored_steps
from .registry import REGISTRY, detect_format
from .xdrscan import scan_walked

#: How segment overlaps (restarts) are handled: refuse them; keep the later segment's frames
#: (gmx trjcat's rule: a restart from a checkpoint supersedes what the earlier run wrote past
#: it); or keep the earlier segment's. ``drop`` is the older name of ``first``.
OVERLAP_POLICIES = ("error", "later", "first", "drop")
#: What to do with an incomplete last frame: refuse, or leave it out and say so.
TRUNCATION_POLICIES = ("error", "drop")


def scan_segment(path, format=None, on_truncated="error", group=None, near_step=None, comm=None, handle=None):
    """Scan one trajectory file and return its :class:`~h5mdtool.formats.base.Segment`.

    Steps stored modulo 2**32 (XTC, TRR) are placed nearest to *near_step* when given (a
    split part's recorded first step; see :func:`~h5mdtool.formats.base.unwrap_steps`).

    An XTC or TRR file's offsets come from the offsets cache when it holds the file
    (:mod:`h5mdtool.formats.offsetcache`). With a communicator of several ranks every rank
    calls it and gets the segment: an XTC or TRR file is otherwise scanned by all ranks
    together (:mod:`h5mdtool.formats.xdrscan`), any other by rank 0 and broadcast; errors
    are raised by every rank together. *handle*: an H5MD file already open
    (``h5py.File``), scanned without opening it again (serial only).

    Raises
    ------
    InputError
        If the file is missing, empty, of an unknown format, truncated or corrupt.
    """
    with same_on_every_rank(comm or SerialComm()):
        path = os.fspath(path)
        cls = REGISTRY[detect_format(path, format)]
        if cls.walker is not None:
            segment = scan_walked(cls, path, on_truncated, comm)
        elif comm is not None and is_parallel(comm):
            segment = root_call(comm, _scan_file, cls, path, on_truncated, group)
        else:
            segment = _scan_file(cls, path, on_truncated, group, handle)
        if near_step is not None and cls.step_modulus:
            _place_steps(segment, near_step)
        return segment


def _scan_file(cls, path, on_truncated, group, handle=None):
    delay("inspect", 0)
    if cls.name == "H5MD":
        return cls.scan(path, on_truncated=on_truncated, group=group, handle=handle)
    return cls.scan(path, on_truncated=on_truncated)


class TrajectoryIndex:
    """The shared metadata of a trajectory made of one or more segments.

    Attributes
    ----------
    segments : list of Segment
    n_atoms : int
    starts : numpy.ndarray
        Trajectory frame number of each segment's first kept frame, then the frame count.
    step, time : numpy.ndarray
        Per trajectory frame (``time`` None when the inputs record no time).
    fields : dict
        Field name -> bool array: which trajectory frames hold it.
    dtype : str
        ``float64`` if any segment stores double-precision values, else ``float32``.
    boundary : list of str
        Per dimension, ``periodic`` or ``none``.
    """

    def __init__(self, segments):
        self.segments = list(segments)
        self.n_atoms = self.segments[0].n_atoms
        kept = [segment.kept for segment in self.segments]
        self.starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        self.step = np.concatenate([s.step[s.kept_frames] for s in self.segments]).astype(np.int64)
        times = [s.time for s in self.segments]
        self.time = None if any(t is None for t in times) else np.concatenate(
            [t[s.kept_frames] for t, s in zip(times, self.segments)])
        self.fields = {}
        for name in FIELDS:
            if any(name in s.fields for s in self.segments):
                self.fields[name] = np.concatenate([
                    s.fields[name][s.kept_frames] if name in s.fields else np.zeros(s.kept, bool)
                    for s in self.segments
                ])
        self.dtype = "float64" if any(s.dtype == "float64" for s in self.segments) else "float32"
        self.boundary = _boundary(self.segments, self.fields.get("box"))

    @property
    def n_frames(self):
        """Frames in the whole trajectory, after overlaps were dropped."""
        return int(self.starts[-1])

    @property
    def formats(self):
        return sorted({segment.format for segment in self.segments})

    @property
    def periodic(self):
        """True when any dimension is periodic."""
        return "periodic" in self.boundary

    def has(self, name):
        """True when any frame holds field *name*."""
        present = self.fields.get(name)
        return present is not None and bool(present.any())

    def boundary_for(self, frames):
        """Per-dimension boundary of an output holding *frames*: the trajectory's
        :attr:`boundary`, or open when none of those frames holds a box (no edges to write)."""
        box = self.fields.get("box")
        if box is None or not box[np.asarray(frames, dtype=np.int64)].any():
            return ["none"] * 3
        return list(self.boundary)

    def locate(self, frames):
        """Map trajectory frame numbers to ``(segment numbers, frame numbers in the file)``."""
        frames = np.asarray(frames, dtype=np.int64)
        seg = np.searchsorted(self.starts, frames, side="right") - 1
        skips = np.array([s.skip for s in self.segments], dtype=np.int64)
        return seg, frames - self.starts[seg] + skips[seg]

    def element_groups(self, frames, fields):
        """Group *fields* by the frames of *frames* that hold them.

        Returns
        -------
        list of (tuple of str, numpy.ndarray)
            Each group's fields and its frames (trajectory frame numbers); positions (with the
            box, when asked) first, then fields sampled at other frames. Fields sampled at
            the same frames share a group, so they share step and time in the file. Fields
            none of *frames* holds are left out.
        """
        frames = np.asarray(frames, np.int64)
        groups = []
        for name in fields:
            if name == "box":
                continue
            present = self.fields[name][frames]
            if name != "positions" and not present.any():
                continue  # not held in these frames (a split part of a trajectory that has it elsewhere)
            for group_fields, group_present in groups:
                if np.array_equal(group_present, present):
                    group_fields.append(name)
                    break
            else:
                groups.append(([name], present))
        result = []
        for group_fields, present in groups:
            if "positions" in group_fields and "box" in fields:
                group_fields.append("box")
            result.append((tuple(group_fields), frames[present]))
        return result

    def describe(self):
        """JSON-friendly summary of the segments."""
        return [segment.describe() for segment in self.segments]


def _boundary(segments, box):
    """Per-dimension boundary of the whole trajectory.

    H5MD segments state theirs; XTC, TRR and DCD segments are periodic when they hold a box.
    A segment without a box in any frame (or only boxes of zeros) is open.
    A dimension is periodic when it is periodic in any segment.
    """
    boundary = ["none"] * 3
    for segment in segments:
        present = segment.fields.get("box")
        has_box = present is not None and present[segment.kept_frames].any()
        own = segment.boundary if segment.boundary is not None and has_box else ["periodic" if has_box else "none"] * 3
        boundary = ["periodic" if "periodic" in pair else "none" for pair in zip(boundary, own)]
    return boundary


def scan(paths, on_overlap="error", format=None, on_truncated="error", group=None, continues=None, comm=None):
    """Scan the segments of one trajectory and return a :class:`TrajectoryIndex`.

    Serial by default (rank 0 scans and broadcasts the index); with a communicator of
    several ranks, collective: every rank calls it and gets the index, the segments scanned
    as :func:`scan_segment` scans them, errors raised by every rank together.

    Parameters
    ----------
    paths : sequence of str
        Segment files in trajectory order.
    on_overlap : {"error", "later", "first"}
        A segment that starts at or before the last step of an earlier one (a restart):
        refuse; keep the later segment's frames, dropping the earlier segments' frames from
        its first step on (gmx trjcat's rule, :attr:`Segment.cut`); or keep the earlier
        segments' frames, dropping the later one's up to their last step
        (:attr:`Segment.skip`). ``"drop"`` is the older name of ``"first"``.
    format : str, optional
        Format name for every segment, overriding the extensions.
    on_truncated : {"error", "drop"}
        An incomplete last frame of a segment: refuse, or leave it out (recorded).
    group : str, optional
        H5MD particle group to read (default: the first listed, as MDAnalysis reads).
    continues : int, optional
        The last step before the first segment (an append's file): steps stored modulo 2**32
        (XTC, TRR) are placed after it; overlaps with it are the caller's to check.
    comm : communicator, optional
        Scan with every rank of *comm* (collective).

    Raises
    ------
    InputError
        Unreadable or corrupt inputs, segments with different atom counts or time records,
        steps that do not increase.
    OverlapError
        Overlapping segments with ``on_overlap="error"``.
    """
    with same_on_every_rank(comm or SerialComm()):
        return _scan(paths, on_overlap, format, on_truncated, group, continues, comm)


def _scan(paths, on_overlap, format, on_truncated, group, continues, comm):
    if on_overlap not in OVERLAP_POLICIES:
        raise UsageError(f"on_overlap must be one of {OVERLAP_POLICIES}, got {on_overlap!r}")
    if on_truncated not in TRUNCATION_POLICIES:
        raise UsageError(f"on_truncated must be one of {TRUNCATION_POLICIES}, got {on_truncated!r}")
    if not paths:
        raise UsageError("no input trajectory given")
    segments = [scan_segment(path, format, on_truncated, group, comm=comm) for path in paths]
    first = segments[0]
    for segment in segments[1:]:
        if segment.n_atoms != first.n_atoms:
            raise InputError(
                f"{segment.path} has {segment.n_atoms} atoms but {first.path} has "
                f"{first.n_atoms}: segments must hold the same atoms"
            )
        if (segment.time is None) != (first.time is None):
            with_time, without = (first, segment) if segment.time is None else (segment, first)
            raise InputError(
                f"{with_time.path} records time but {without.path} does not: segments must agree"
            )
    chain_steps(segments, continues)
    if on_overlap == "later":
        _keep_later(segments)
    else:
        _keep_first(segments, on_overlap)
    if not any(segment.kept for segment in segments):
        raise InputError("no frame is left once overlapping steps are dropped")
    return TrajectoryIndex(segments)


def _keep_first(segments, on_overlap):
    """Drop each segment's leading frames whose steps an earlier segment already holds (or refuse)."""
    last = None  # (step, path) of the last kept frame so far
    for segment in segments:
        if last is not None and segment.step[0] <= last[0]:
            if on_overlap == "error":
                raise OverlapError(
                    f"{segment.path} starts at step {int(segment.step[0])} but {last[1]} already "
                    f"reached step {last[0]}: segments overlap (a restart: --on-overlap later keeps "
                    "the restart's frames, as gmx trjcat does; first keeps the earlier file's)"
                )
            segment.skip = int(np.count_nonzero(np.maximum.accumulate(segment.step) <= last[0]))
        if segment.kept:
            last = (int(segment.step[-1]), segment.path)


def _keep_later(segments):
    """Drop each segment's trailing frames from the first step of any later segment on: a run
    restarted from a checkpoint continues from that step, and what the earlier run wrote past
    it (up to a crash) is not the trajectory the restart continues."""
    limit = None  # the smallest first step of the later segments
    for segment in reversed(segments):
        if limit is not None:
            tail_min = np.minimum.accumulate(segment.step[::-1])
            segment.cut = int(np.count_nonzero(tail_min >= limit))
        first = int(segment.step[0])
        limit = first if limit is None else min(limit, first)


def chain_steps(segments, continues=None):
    """Place the steps each segment stores modulo 2**32 (XTC, TRR) after the previous segment's
    last step (after *continues* for the first), in place: a segment written after step 2**31
    stores them wrapped (see :func:`~h5mdtool.formats.base.unwrap_steps`)."""
    previous = continues
    for segment in segments:
        if previous is not None and REGISTRY[segment.format].step_modulus:
            _place_steps(segment, previous)
        previous = int(segment.step[-1])


def _place_steps(segment, near):
    stored = segment.details.get("stored_step", segment.step)
    steps = unwrap_steps(stored, near=near)
    if not np.array_equal(steps, segment.step):
        segment.step = steps
        segment.details.pop("stored_step", None)
        with_stored_steps(segment.details, stored, steps)


def check_trajectory(index, frames):
    """Refuse what an H5MD trajectory cannot hold: steps that do not increase, non-finite times.

    Called by the commands that write H5MD (readers and ``validate --against`` accept both).

    Raises
    ------
    InputError
        Naming the segment and its frame.
    """
    frames = np.asarray(frames, np.int64)
    steps = index.step[frames]
    bad = np.flatnonzero(np.diff(steps) <= 0)
    if len(bad):
        number, local = index.locate(frames[bad[0] + 1:bad[0] + 2])
        raise InputError(
            f"{index.segments[int(number[0])].path}: frame {int(local[0])} has step {int(steps[bad[0] + 1])} after "
            f"step {int(steps[bad[0]])}: steps must increase through a trajectory"
        )
    if index.time is not None:
        finite = np.isfinite(index.time[frames])
        if not finite.all():
            number, local = index.locate(frames[~finite][:1])
            raise InputError(f"{index.segments[int(number[0])].path}: frame {int(local[0])} has a non-finite time")


def select_frames(n_frames, start=None, stop=None, step=None):
    """Frame numbers picked by Python slice semantics ``[start:stop:step]``, as a range.

    Raises
    ------
    UsageError
        If *step* is not positive.
    InputError
        If no frame is selected.
    """
    if step is not None and step < 1:
        raise UsageError(f"--step must be a positive number of frames, got {step}")
    frames = range(n_frames)[slice(start, stop, step)]
    if len(frames) == 0:
        asked = " ".join(f"{flag} {value}" for flag, value in (("--start", start), ("--stop", stop), ("--step", step))
                         if value is not None)
        first, end, _ = slice(start, stop, step).indices(n_frames)
        if first >= n_frames:
            raise InputError(f"{asked} selects no frame: the trajectory has {n_frames} frame(s)"
                             + (f" (0-{n_frames - 1})" if n_frames else ""))
        raise InputError(f"{asked} is an empty range: it starts at frame {first} and stops before frame {end} "
                         f"(of the {n_frames} frames, 0-{n_frames - 1})")
    return frames


#: Segments a :class:`TrajectoryReader` keeps open at most: a trajectory of thousands of
#: ``-noappend`` parts would otherwise run out of file descriptors (``ulimit -n``, often 1024).
MAX_OPEN_SEGMENTS = 32


class OpenFiles:
    """Open readers by key, at most :data:`MAX_OPEN_SEGMENTS` of them: call :meth:`make_room`
    before opening one; the least recently used is closed first.

    Parameters
    ----------
    close : callable, optional
        Closes one reader (default: its ``close()``).
    """

    def __init__(self, close=None):
        self._items = OrderedDict()
        self._close = close or (lambda item: item.close())
        self._ever = {}  # every key added, in order (a dict as an ordered set)

    @property
    def ever_opened(self):
        """Every key added so far, in order, closed since or not."""
        return list(self._ever)

    def get(self, key):
        """The open reader of *key* (now the most recently used), or None."""
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def __contains__(self, key):
        return key in self._items

    def __len__(self):
        return len(self._items)

    def full(self):
        return len(self._items) >= MAX_OPEN_SEGMENTS

    def make_room(self):
        """Close the least recently used readers until one more may be opened."""
        while self._items and self.full():
            self._close(self._items.popitem(last=False)[1])

    def add(self, key, item):
        self._items[key] = item
        self._ever[key] = None
        return item

    def close(self):
        """Close every reader, the least recently used first."""
        while self._items:
            self._close(self._items.popitem(last=False)[1])


class TrajectoryReader:
    """Reads arbitrary frames of a scanned trajectory, opening segments only when needed.

    At most :data:`MAX_OPEN_SEGMENTS` segments are open at once (the least recently read is
    closed first); H5MD segments opened collectively stay open until :meth:`close`.

    Parameters
    ----------
    index : TrajectoryIndex
        From :func:`scan` (broadcast by rank 0).
    atom_indices : array of int, optional
        Atoms to keep, in increasing order; all atoms when None.
    fields : sequence of str
        Which of ``positions``, ``velocities``, ``forces`` and ``box`` to read.
    comm : communicator, optional
        Open H5MD segments with MPI-IO on every rank of *comm* at once (collective: every
        rank must create the reader). Other formats are opened by each rank on its own.
    finite : bool
        Refuse NaN and infinite values (default); ``validate --against`` reads them to report.
    """

    def __init__(self, index, atom_indices=None, fields=("positions",), comm=None, finite=True):
        self.index = index
        self.finite = finite
        self.atom_indices = None if atom_indices is None else np.asarray(atom_indices, np.int64)
        self.fields = tuple(fields)
        self.n_atoms = index.n_atoms if atom_indices is None else len(self.atom_indices)
        self._collective = {}
        self._open = OpenFiles()
        if comm is not None and comm.size > 1:
            for number, segment in enumerate(index.segments):
                if segment.format == "H5MD":
                    self._collective[number] = REGISTRY["H5MD"](segment, self.atom_indices, comm=comm)
                    self._collective[number].check_values = finite

    def new_block(self, capacity, fields=None):
        """A :class:`FrameBlock` for *capacity* frames of *fields* (default: the reader's)."""
        names = self.fields if fields is None else fields
        return FrameBlock(capacity, self.n_atoms, [f for f in names if f in ATOM_FIELDS], self.index.dtype)

    def _segment(self, number):
        reader = self._collective.get(number)
        if reader is not None:
            return reader
        reader = self._open.get(number)
        if reader is not None:
            return reader
        self._open.make_room()
        segment = self.index.segments[number]
        reader = REGISTRY[segment.format](segment, self.atom_indices)
        reader.check_values = self.finite
        return self._open.add(number, reader)

    def read(self, frames, block, fields=None, row=0):
        """Fill *block* with trajectory *frames* (increasing numbers) from its row *row* on; returns *block*.

        Parameters
        ----------
        frames : array of int
        block : FrameBlock
        fields : sequence of str, optional
            Fields to read (default: the reader's); every frame must hold each of them
            (the box excepted: frames without one get zero edges).
        row : int
            The block's row for the first frame (rows before it are kept: a block may be
            filled in several reads); ``block.n`` becomes the row after the last frame.
        """
        fields = self.fields if fields is None else tuple(fields)
        segments, local = self.index.locate(frames)
        # not np.unique: its first call imports numpy.ma (20 ms), on rank 0's setup and on
        # each rank's first block read ahead; increasing frames give segments in order
        for number in dict.fromkeys(segments.tolist()):
            mask = segments == number
            segment = self.index.segments[int(number)]
            wanted = [f for f in fields if f != "box" or f in segment.fields]
            row = self._segment(int(number)).read(local[mask], block, row, wanted)
        block.n = row
        return block

    def close(self):
        self._open.close()
        for reader in self._collective.values():
            reader.close()
        self._collective.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_frame(index, frame, box=True):
    """All positions (Angstrom, float32) and the box (MDAnalysis ``dimensions``, or None) of
    trajectory frame *frame* of *index*, read through :class:`~h5mdtool.formats.TrajectoryReader`.

    The box is given when the frame holds one, every dimension is periodic and *box* is
    true (False: the box is not read, and MDAnalysis, which converts it, not imported).

    Raises
    ------
    InputError
        If the frame cannot be read.
    """
    box = box and "box" in index.fields
    fields = ("positions", "box") if box else ("positions",)
    with TrajectoryReader(index, None, fields) as reader:
        block = reader.read(np.array([frame], np.int64), reader.new_block(1))
        positions = (np.asarray(block.positions[0], np.float64) * ANGSTROM_PER_NM).astype(np.float32)
        edges = np.asarray(block.edges[0], np.float64) * ANGSTROM_PER_NM
    boxed = box and bool(index.fields["box"][frame])
    if not (boxed and edges.any() and all(b == "periodic" for b in index.boundary)):
        return positions, None
    from MDAnalysis.lib.mdamath import triclinic_box

    return positions, triclinic_box(*edges)
