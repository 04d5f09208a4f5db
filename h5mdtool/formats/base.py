"""What every trajectory format of h5mdtool provides: a scanned :class:`Segment`, a reader,
and the reusable :class:`FrameBlock` readers fill.

A format is a subclass of :class:`Format` (one module per format in this package, listed in
the registry of :mod:`h5mdtool.formats`). It has two halves, following the project's MPI
rules:

* :meth:`Format.scan` runs on one rank. It reads every frame header of one file, checks
  each (atom count, which fields the frame holds, finite box and time, the frame's byte
  length) and accounts for the file to the byte, and returns a :class:`Segment`: small,
  picklable, broadcast to every rank. Formats whose frames are found by walking their
  headers (XTC, TRR) also have a :class:`FrameWalk`, with which all ranks scan a file
  together (:mod:`h5mdtool.formats.xdrscan`). Nothing is ever written beside the input.
* An instance, made on any rank from a :class:`Segment`, reads blocks of frames for a
  selection of atoms into a :class:`FrameBlock`, in h5mdtool's units (nm, ps, nm/ps,
  kJ/(mol nm)), and checks what it decoded is finite.
"""

import os
import stat
from dataclasses import dataclass, field

import numpy as np

from ..h5md.units import (  # noqa: F401 - the formats import them from here
    ANGSTROM_PER_NM, ATOM_FIELDS, FIELDS, NAMES, UNITS
)
from ..parallel.errors import InputError, UnreadableError, locked_file_message


def reason(error):
    """First line of an exception's message, or its type name."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def hdf5_open_error(path, error):
    """An :class:`InputError` for an HDF5 file h5py could not open, saying why in user terms:
    a missing file, a directory, a file that is not HDF5 at all (HDF5 itself says only
    "unable to open file" of those with some drivers), a lock."""
    text = reason(error)
    if "unable to lock file" in text.lower():
        return InputError(locked_file_message(path))
    if isinstance(path, (str, bytes, os.PathLike)):
        if not os.path.lexists(path):
            return InputError(f"{path}: no such file")
        if os.path.isdir(path):
            return InputError(f"{path}: a directory, not an H5MD file")
        if _not_hdf5(path):
            return InputError(f"{path}: not a readable H5MD file (not an HDF5 file; 'h5mdtool convert' "
                              "makes one of any trajectory it reads)")
    return InputError(f"{path}: not a readable H5MD file ({text})")


def _not_hdf5(path):
    """True when *path* can be read and holds no HDF5 signature where HDF5 looks for one."""
    import h5py

    try:
        with open(path, "rb"):
            pass
        return not h5py.is_hdf5(path)
    except (OSError, ValueError):
        return False


class LibraryName:
    """A name by which a C library can open *path*, even when *path* is not UTF-8.

    MDAnalysis's decoders (libmdaxdr, libdcd), pytng and gsd encode file names as UTF-8, so
    a name holding other bytes (which Python carries as lone surrogates, PEP 383) fails
    there. Such a file is opened here and named by its descriptor (``/proc/self/fd/N``),
    which stays open until :meth:`close`. Other names are passed through unchanged.
    """

    def __init__(self, path):
        self.fd = None
        self.name = path
        try:
            os.fsencode(path).decode("utf-8")
        except UnicodeDecodeError:
            try:
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as error:
                raise InputError(f"{path}: cannot be read ({reason(error)})") from None
            self.name = f"/proc/self/fd/{self.fd}"

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.name

    def __exit__(self, *exc_info):
        self.close()


#: XTC and TRR frame headers store the step in 32 bits: GROMACS writes its 64-bit step
#: modulo 2**32 (read as signed), so step 2**31 (4.3 us at 2 fs) comes back as -2**31.
STEP_MODULUS = 2**32


def unwrap_steps(stored, near=None):
    """The steps of a file whose headers store them modulo :data:`STEP_MODULUS` (XTC, TRR).

    Consecutive frames are taken to be less than 2**31 steps apart (4.3 us at 2 fs between
    saved frames), so a jump of more than that is the 32-bit field wrapping. The first frame
    is placed nearest to step *near* (the last step of the previous segment); without one, a
    negative stored step is read as the wrapped one (MD steps are never negative).

    Returns
    -------
    numpy.ndarray of int64
        The steps; equal to *stored* wherever nothing wrapped.

    See Also
    --------
    with_stored_steps : the :attr:`Segment.details` that record the change.
    """
    stored = np.asarray(stored, np.int64)
    if len(stored) == 0:
        return stored
    half = STEP_MODULUS // 2
    jumps = np.diff(stored)
    turns = np.concatenate([[0], np.cumsum((jumps < -half).astype(np.int64) - (jumps > half))])
    if near is None:
        base = 1 if stored[0] < 0 else 0
    else:
        base = (int(near) - int(stored[0]) + half) // STEP_MODULUS
    return stored + (turns + base) * STEP_MODULUS


def with_stored_steps(details, stored, steps):
    """*details* of a segment, recording the *stored* steps when :func:`unwrap_steps` changed them."""
    stored = np.asarray(stored, np.int64)
    if not np.array_equal(stored, steps):
        details["stored_step"] = stored
    return details


def check_regular_file(path, error=UnreadableError):
    """Raise *error* unless *path* is an existing regular file (never opens it).

    Opening a FIFO blocks until a writer appears, and a device can be endless: both are
    refused from :func:`os.stat` alone.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as problem:
        raise error(f"{path}: cannot be read ({problem.strerror})") from None
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise error(f"{path}: is {kind}, not a regular file")


def file_stat(path):
    """``os.stat`` of an input trajectory, refusing what cannot be one.

    Raises
    ------
    InputError
        Missing, a directory or other non-regular file (a FIFO would block), empty, unreadable.
    """
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({reason(error)})") from None
    import stat as stat_module

    if stat_module.S_ISDIR(stat.st_mode):
        raise InputError(f"{path}: is a directory, not a trajectory file")
    if not stat_module.S_ISREG(stat.st_mode):
        raise InputError(f"{path}: not a regular file (a pipe or device cannot be scanned and read again)")
    if stat.st_size == 0:
        raise InputError(f"{path}: file is empty")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return stat


@dataclass
class Segment:
    """What rank 0 learned about one trajectory file; picklable, broadcast to every rank.

    Attributes
    ----------
    path, format : str
    n_atoms, n_frames : int
    size : int
        Bytes of the file when it was scanned.
    mtime : float
    step : numpy.ndarray
        int64, one per frame.
    time : numpy.ndarray or None
        float64 in ps, one per frame; None when the file records no time (H5MD allows it).
    fields : dict
        Field name (``positions``, ``velocities``, ``forces``, ``box``) -> bool array, which
        frames hold it. Fields the file never holds are absent.
    dtype : str
        Floating-point type of the per-atom values as read (``float32``, or ``float64`` for a
        double-precision TRR or H5MD file).
    boundary : list of str
        Per dimension, ``periodic`` or ``none``.
    offsets : numpy.ndarray, optional
        XTC/TRR: byte offset of each frame, followed by the end of the last one.
    details : dict
        Format-specific facts the readers need (picklable).
    skip : int
        Leading frames dropped because an earlier segment already holds their steps
        (``--on-overlap first``).
    cut : int
        Trailing frames dropped because a later segment restarts at or before their steps
        (``--on-overlap later``).
    dropped : dict, optional
        What the scan left out (an incomplete last frame), for the summary and provenance.
    cached : bool
        XTC/TRR: the offsets came from the offsets cache (:mod:`h5mdtool.formats.offsetcache`),
        not from walking the file.
    """

    path: str
    format: str
    n_atoms: int
    n_frames: int
    size: int
    mtime: float
    step: np.ndarray
    time: np.ndarray
    fields: dict
    dtype: str = "float32"
    boundary: list = None
    offsets: np.ndarray = None
    details: dict = field(default_factory=dict)
    skip: int = 0
    cut: int = 0
    dropped: dict = None
    cached: bool = False

    @property
    def kept_frames(self):
        """The frames of this file that belong to the trajectory, as a slice."""
        return slice(self.skip, self.n_frames - self.cut)

    @property
    def kept(self):
        """Number of frames of this file that belong to the trajectory."""
        return max(self.n_frames - self.skip - self.cut, 0)

    def has(self, name):
        """True when any kept frame holds field *name*."""
        present = self.fields.get(name)
        return present is not None and bool(present[self.kept_frames].any())

    def __getstate__(self):
        """The segment as it is pickled (rank 0 broadcasts it): its per-frame arrays that are
        a constant or an arithmetic run, as regular files' steps, times and fields are, as
        three numbers each (:class:`Run`), the others as they are."""
        state = dict(self.__dict__)
        state["step"], state["time"], state["offsets"] = (Run.of(state[name]) for name in ("step", "time", "offsets"))
        state["fields"] = {name: Run.of(present) for name, present in self.fields.items()}
        return state

    def __setstate__(self, state):
        state = dict(state)
        for name in ("step", "time", "offsets"):
            state[name] = Run.expanded(state[name])
        state["fields"] = {name: Run.expanded(present) for name, present in state["fields"].items()}
        self.__dict__.update(state)

    def describe(self):
        """JSON-friendly summary (provenance, summaries)."""
        kept = self.step[self.kept_frames]
        record = {
            "path": os.path.abspath(self.path),
            "format": self.format,
            "size": self.size,
            "mtime": self.mtime,
            "n_frames": self.n_frames,
            "frames_dropped_as_overlap": self.skip + self.cut,
            "first_step": int(kept[0]) if len(kept) else None,
            "last_step": int(kept[-1]) if len(kept) else None,
            "fields": {name: int(present.sum()) for name, present in self.fields.items()},
        }
        if self.dropped:
            record["dropped"] = dict(self.dropped)
        return record


class Run:
    """A 1-D array that is an arithmetic run, ``first + stride * arange(n)`` exactly (a
    constant with stride 0), kept as those three numbers and its dtype."""

    __slots__ = ("first", "stride", "n", "dtype")

    def __init__(self, first, stride, n, dtype):
        self.first, self.stride, self.n, self.dtype = first, stride, n, dtype

    @classmethod
    def of(cls, array):
        """A :class:`Run` of *array* when it is one (integers, floats or booleans, bit for bit),
        else *array* itself (None, or an array of another shape or kind)."""
        if not isinstance(array, np.ndarray) or array.ndim != 1 or len(array) < 2 or array.dtype.kind not in "biuf":
            return array
        if array.dtype.kind == "b":
            return cls(bool(array[0]), 0, len(array), array.dtype.str) if (array == array[0]).all() else array
        run = cls(array[0].item(), (array[1:2] - array[:1])[0].item(), len(array), array.dtype.str)
        return run if np.array_equal(run.array(), array) else array

    def array(self):
        """The array it stands for."""
        dtype = np.dtype(self.dtype)
        if dtype.kind == "b":
            return np.full(self.n, self.first, dtype)
        values = np.arange(self.n, dtype=dtype)
        values *= np.asarray(self.stride, dtype)
        values += np.asarray(self.first, dtype)
        return values

    @staticmethod
    def expanded(value):
        """*value* as an array when it is a :class:`Run`, else as it is."""
        return value.array() if isinstance(value, Run) else value


class FrameBlock:
    """Reusable buffers for up to *capacity* frames of one trajectory.

    Attributes ``positions``, ``velocities``, ``forces`` are ``(capacity, n_atoms, 3)``
    arrays of *dtype* for the fields read (None otherwise), ``edges`` ``(capacity, 3, 3)``
    box vectors as rows in nm (of *dtype* too) (zeros where a frame has no box), ``step`` int64 and ``time``
    float64 ps. Only the first ``n`` rows are valid after a read.
    """

    def __init__(self, capacity, n_atoms, fields, dtype=np.float32):
        self.capacity = int(capacity)
        self.n_atoms = int(n_atoms)
        self.fields = tuple(fields)
        self.dtype = np.dtype(dtype)
        shape = (self.capacity, self.n_atoms, 3)
        for name in ATOM_FIELDS:
            setattr(self, name, np.empty(shape, self.dtype) if name in self.fields else None)
        self.edges = np.zeros((self.capacity, 3, 3), self.dtype)
        self.step = np.zeros(self.capacity, np.int64)
        self.time = np.zeros(self.capacity, np.float64)
        self.n = 0

    def view(self, name):
        """The valid rows of array *name*."""
        array = getattr(self, name)
        return None if array is None else array[: self.n]


class Format:
    """Base class of a trajectory format: scan a file on rank 0, read blocks on any rank.

    Subclasses set :attr:`name`, :attr:`extensions` and :attr:`decoders` and implement
    :meth:`scan` and :meth:`read_frames`. A format with a :attr:`walker` implements
    ``segment(path, stat, offsets, rows, dropped)`` instead of :meth:`scan`: the
    :class:`Segment` of a walked file from its frame offsets and the walker's packed rows.

    Parameters
    ----------
    segment : Segment
        From :meth:`scan`.
    atom_indices : array of int, optional
        Atoms to read, in increasing order; all when None.
    """

    #: Format name as users write it (``--format``), upper case.
    name = None
    #: File extensions (lower case, with the dot) that select this format.
    extensions = ()
    #: Modules that decode this format, imported early by ranks other than 0.
    decoders = ()
    #: True when decoded values are finite by construction (no check needed).
    finite_by_construction = False
    #: Refuse non-finite values (off only where they are the object of study: validate --against).
    check_values = True
    #: The modulus of the steps the file stores (XTC, TRR: 2**32), None when they are whole.
    step_modulus = None
    #: The :class:`FrameWalk` of a format whose frames are found by walking their headers
    #: (XTC, TRR): all ranks scan such a file together (:mod:`h5mdtool.formats.xdrscan`).
    walker = None

    def __init__(self, segment, atom_indices=None):
        self.segment = segment
        self.atom_indices = None if atom_indices is None else np.asarray(atom_indices, np.int64)

    @classmethod
    def scan(cls, path, on_truncated="error"):
        """Scan one file (rank 0) and return its :class:`Segment`: a format with a
        :attr:`walker` walks every frame header from the start of the file; others override it.

        Parameters
        ----------
        path : str
        on_truncated : {"error", "drop"}
            An incomplete last frame (a crashed run): refuse, or leave it out and record it
            in :attr:`Segment.dropped`.

        Raises
        ------
        InputError
            The file is missing, of another format, truncated or corrupt; the message names
            the frame and byte offset.
        """
        if cls.walker is None:
            raise NotImplementedError
        stat, walk = cls.walker.whole_file(path, on_truncated)
        return cls.segment(path, stat, walk.walked_offsets(), walk.rows(), walk.dropped)

    def read_frames(self, frames, block, row, fields):
        """Fill rows ``row...`` of *block* with *fields* of local *frames* (increasing).

        The caller asks only for fields the frames hold. Step and time are filled by
        :meth:`read`. Returns the next free row.
        """
        raise NotImplementedError

    def read(self, frames, block, row, fields):
        """Read local *frames* into *block* from *row* on, with step, time and box; check values.

        Returns
        -------
        int
            The next free row.

        Raises
        ------
        InputError
            If a frame cannot be decoded or holds non-finite values (naming file and frame).
        """
        frames = np.asarray(frames, np.int64)
        segment = self.segment
        for name in fields:
            if name == "box":  # optional per frame: frames without one get zero edges
                continue
            present = segment.fields.get(name)
            if present is None or not present[frames].all():
                missing = frames[0] if present is None else frames[~present[frames]][0]
                raise InputError(f"{segment.path}: frame {int(missing)} holds no {NAMES[name]}")
        end = self.read_frames(frames, block, row, [f for f in fields if f != "box"])
        rows = slice(row, end)
        block.step[rows] = segment.step[frames]
        block.time[rows] = np.nan if segment.time is None else segment.time[frames]
        if self.check_values and segment.time is not None and not np.isfinite(segment.time[frames]).all():
            bad = frames[~np.isfinite(segment.time[frames])][0]
            raise InputError(f"{segment.path}: frame {int(bad)} has a non-finite time; h5mdtool refuses NaN "
                             "and infinite values")
        if self.check_values and not self.finite_by_construction:
            for name in fields:
                values = block.edges[rows] if name == "box" else getattr(block, name)[rows]
                self.check_finite(values, frames, name)
        return end

    def check_finite(self, values, frames, name):
        """Raise :class:`InputError` naming the first frame of *values* with a NaN or infinity."""
        if np.isfinite(values).all():
            return
        bad = ~np.isfinite(values.reshape(len(values), -1))
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        detail = ""
        if name != "box":
            atom = int(np.flatnonzero(bad[row])[0]) // 3
            if self.atom_indices is not None:
                atom = int(self.atom_indices[atom])
            detail = f" (atom {atom})"
        raise InputError(
            f"{self.segment.path}: frame {int(frames[row])} holds non-finite {NAMES[name]}{detail}; "
            "h5mdtool refuses NaN and infinite values"
        )

    def error(self, frame, error):
        """An :class:`InputError` for a frame that could not be decoded."""
        return InputError(f"{self.segment.path}: cannot read {self.name} frame {int(frame)} ({reason(error)})")

    def close(self):
        """Release the file (collective for an H5MD file opened with MPI-IO)."""


class FrameWalk:
    """The walk through a file of self-delimiting frames (XTC, TRR), one header at a time, each
    checked before anything is decoded.

    The serial scan walks a whole file from its start (:meth:`whole_file`); the collective
    scan (:mod:`h5mdtool.formats.xdrscan`) has each rank walk its byte range from a frame
    start found inside it. A subclass implements :meth:`run`, :meth:`rows`,
    :meth:`candidates` and :meth:`first_atom_count`; its frames are whole multiples of 4
    bytes long, so every frame start is a multiple of 4.

    Parameters
    ----------
    path : str
    fd : int
        Descriptor of the open file.
    size : int
        Bytes of the file.
    on_truncated : {"error", "drop"}
    position : int
        Byte where the walk starts, a frame start.
    frame : int
        Number of the frame starting there (the messages name it; frame 0 also names the
        file's kind).
    n_atoms : int, optional
        Atoms of frame 0 (None when the walk starts there).

    Attributes
    ----------
    position : int
        Start of the next frame to read; after an :class:`InputError`, of the frame refused.
    frame : int
        Its number.
    offsets : list of int
        Start of each frame walked.
    records : list
        What each frame's header says (the subclass's own form; :meth:`rows` packs them).
    dropped : dict or None
        An incomplete last frame left out (``on_truncated="drop"``).
    """

    #: Kind of file, for messages.
    kind = None
    #: Bytes read at a frame start to find its length and check its header.
    head_bytes = 0
    #: Bytes at the start of frame 0 that hold its atom count.
    count_bytes = 0

    def __init__(self, path, fd, size, on_truncated, position=0, frame=0, n_atoms=None):
        self.path, self.fd, self.size, self.on_truncated = path, fd, size, on_truncated
        self.position, self.frame, self.n_atoms = position, frame, n_atoms
        self.offsets, self.records, self.dropped = [], [], None

    def run(self, stop=None):
        """Walk frames until the end of the file, or until the next frame starts at or after *stop*.

        Returns
        -------
        bool
            False when the walk ended at an incomplete last frame (dropped), else True.

        Raises
        ------
        InputError
            At the first frame that is not a complete, well-formed frame (an incomplete last
            one too with ``on_truncated="error"``); :attr:`position` is where it starts.
        """
        raise NotImplementedError

    def rows(self):
        """The records walked as one compact numpy array, a row per frame."""
        raise NotImplementedError

    @staticmethod
    def candidates(words, n_atoms):
        """Indices into big-endian int32 *words* where a frame of *n_atoms* atoms may start (its
        header's constant fields and atom count; the walk checks the rest)."""
        raise NotImplementedError

    @staticmethod
    def first_atom_count(head):
        """The atom count that the first :attr:`count_bytes` of a file (*head*) declare, or None
        when they are no frame header of this kind."""
        raise NotImplementedError

    def walked_offsets(self):
        """Start of each frame walked, then the end of the last one (int64).

        Raises
        ------
        InputError
            If no complete frame was walked.
        """
        return self.file_offsets(self.path, self.offsets, self.position)

    @classmethod
    def file_offsets(cls, path, starts, end):
        """*starts* of the frames of file *path*, then *end*, that of the last (int64).

        Raises
        ------
        InputError
            If there is no frame.
        """
        if len(starts) == 0:
            raise InputError(f"{path}: holds no complete {cls.kind} frame")
        return np.append(np.asarray(starts, np.int64), end).astype(np.int64)

    @classmethod
    def whole_file(cls, path, on_truncated):
        """The serial scan's walk: every frame of *path*, from its start.

        Returns
        -------
        (os.stat_result, FrameWalk)

        Raises
        ------
        InputError
            As :func:`file_stat` and :meth:`run`; a file that cannot be read.
        """
        stat = file_stat(path)
        try:
            with open(path, "rb", buffering=0) as handle:
                walk = cls(path, handle.fileno(), stat.st_size, on_truncated)
                walk.run()
        except OSError as error:
            raise InputError(f"{path}: cannot be read ({reason(error)})") from None
        return stat, walk


def truncated(path, frame, start, have, need, on_truncated, hint="--on-truncated drop"):
    """The message (or drop record) for a file ending inside frame *frame*.

    Returns
    -------
    dict
        With ``on_truncated="drop"``: what was dropped, for :attr:`Segment.dropped`.

    Raises
    ------
    InputError
        With ``on_truncated="error"``.
    """
    dropped = {"frame": int(frame), "first_byte": int(start), "bytes": int(have)}
    if on_truncated == "drop":
        return dropped
    need_text = f" of the {need} it needs" if need else ""
    raise InputError(
        f"{path}: ends inside frame {frame}: {have} byte(s) from byte {start}{need_text} "
        f"(an incomplete last frame, as a crashed run leaves); pass {hint} to use the "
        f"{frame} complete frame(s)"
    )
