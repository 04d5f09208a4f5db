"""GROMACS XTC: every frame header read and checked, and every frame decoded, by h5mdtool.

An XTC frame (big-endian XDR) is a 56-byte header -- magic 1995, atom count, step, time,
the 3x3 box in nm, the atom count again -- followed, for more than 9 atoms, by the
precision, the integer bounds and the byte count of the compressed coordinates (92 bytes in
all), then the compressed bytes padded to a multiple of 4; frames of up to 9 atoms store
their coordinates as plain floats. The scan walks the headers with one ``pread`` each
(58,800 frames in about 0.07 s, as fast as MDAnalysis's own offset scan) and checks every
one before anything is decoded.

Frames are decoded by h5mdtool's C extension :mod:`h5mdtool.formats._xtcframe`, which
checks every bit it reads against the frame's byte count and every integer against the
frame's integer box: MDAnalysis's ``libmdaxdr`` (GROMACS's xdrfile) trusts the compressed
bytes and reads and writes out of bounds on a damaged frame (an abort, or results that
differ from run to run). Its positions are libmdaxdr's bit for bit.

Positions decoded from a compressed frame are integers divided by the precision, so they
are finite whenever the precision is, which the scan checks.
"""

import os
import struct
from collections import namedtuple

import numpy as np

from ..parallel.errors import H5mdToolError, InputError
from .base import STEP_MODULUS, Format, FrameWalk, Segment, reason, truncated, unwrap_steps, with_stored_steps

MAGIC = 1995
#: Header bytes of a frame with compressed coordinates (more than 9 atoms).
HEADER = 92
#: Header bytes up to and including the second atom count.
SHORT_HEADER = 56
#: Frames of at most this many atoms store plain floats.
SMALL = 9
_HEAD = struct.Struct(">ii")
_COUNT = struct.Struct(">i")
#: Header layout read back for every frame at once.
_FIELDS = np.dtype([("magic", ">i4"), ("natoms", ">i4"), ("step", ">i4"), ("time", ">f4"),
                    ("box", ">f4", (9,)), ("natoms2", ">i4"), ("precision", ">f4")])


def _byte_limit(n_atoms):
    """Largest credible compressed size of *n_atoms* coordinates (the raw size, with room)."""
    return 3 * 4 * n_atoms + 1024


class Walk(FrameWalk):
    """The walk through an XTC file's frames, one header at a time, each checked
    (:class:`~h5mdtool.formats.base.FrameWalk`); ``records`` holds the first 60 bytes of each frame."""

    kind = "XTC"
    #: Bytes read to find a frame's length and check its header.
    head_bytes = HEADER
    #: Bytes of frame 0 that hold its atom count.
    count_bytes = 8

    def run(self, stop=None):
        path, size, n_atoms = self.path, self.size, self.n_atoms
        position, frame = self.position, self.frame
        offsets, headers = self.offsets, self.records
        try:
            while position < size and (stop is None or position < stop):
                head = os.pread(self.fd, HEADER, position)
                if len(head) < 8:
                    if frame == 0:
                        raise InputError(f"{path}: not an XTC file ({size} bytes, shorter than a frame header)")
                    self.dropped = truncated(path, frame, position, len(head), None, self.on_truncated)
                    return False
                magic, natoms = _HEAD.unpack_from(head)
                if magic != MAGIC:
                    if frame == 0:
                        raise InputError(f"{path}: not an XTC file (magic number {magic}, expected {MAGIC})")
                    raise InputError(
                        f"{path}: frame {frame} at byte {position} does not start with an XTC header "
                        f"(magic number {magic}): the file is corrupt"
                    )
                if n_atoms is None:
                    if natoms < 1:
                        raise InputError(f"{path}: the first frame declares {natoms} atoms")
                    n_atoms = self.n_atoms = natoms
                elif natoms != n_atoms:
                    raise InputError(
                        f"{path}: frame {frame} at byte {position} declares {natoms} atoms but frame 0 "
                        f"has {n_atoms}: h5mdtool needs the same atoms in every frame"
                    )
                if natoms <= SMALL:
                    length = SHORT_HEADER + 12 * natoms
                elif len(head) < HEADER:
                    self.dropped = truncated(path, frame, position, len(head), None, self.on_truncated)
                    return False
                else:
                    count = _COUNT.unpack_from(head, HEADER - 4)[0]
                    if not 0 <= count <= _byte_limit(natoms):
                        raise InputError(
                            f"{path}: frame {frame} at byte {position} declares {count} bytes of "
                            f"coordinates for {natoms} atoms: the file is corrupt"
                        )
                    length = HEADER + ((count + 3) & ~3)
                if position + length > size:
                    self.dropped = truncated(path, frame, position, size - position, length, self.on_truncated)
                    return False
                offsets.append(position)
                headers.append(head[:60])
                position += length
                frame += 1
        finally:
            self.position, self.frame = position, frame
        return True

    def rows(self):
        """The headers walked as a compact ``(n, 60)`` uint8 array."""
        return np.frombuffer(b"".join(h.ljust(60, b"\0") for h in self.records), np.uint8).reshape(-1, 60)

    @staticmethod
    def candidates(words, n_atoms):
        hits = np.flatnonzero(words[:-1] == MAGIC)
        return hits[words[hits + 1] == n_atoms]

    @staticmethod
    def first_atom_count(head):
        if len(head) < 8:
            return None
        magic, natoms = _HEAD.unpack_from(head)
        return natoms if magic == MAGIC and natoms >= 1 else None


class FrameReader:
    """The frames of an XTC file, each read with one ``pread`` and decoded with every read
    checked (:mod:`h5mdtool.formats._xtcframe`).

    Parameters
    ----------
    path : str
    offsets : array of int
        Start of each frame, then the end of the last one (the scan's
        :attr:`~h5mdtool.formats.base.Segment.offsets`): a frame must fill its span exactly.
    """

    def __init__(self, path, offsets):
        try:
            from ._xtcframe import decode_frame
        except ImportError as error:
            raise H5mdToolError(f"h5mdtool's XTC decoder is not built ({error}): run 'make install', or "
                                "'pip install -e .' in the h5mdtool checkout (it needs a C compiler and the "
                                "Python headers)") from None

        self.path = path
        self.offsets = np.asarray(offsets, np.int64)
        self._decode = decode_frame
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise InputError(f"{path}: cannot be read ({reason(error)})") from None
        spans = np.diff(self.offsets)
        self.buffer = bytearray(int(spans.max()) if len(spans) else 0)

    def __len__(self):
        return len(self.offsets) - 1

    def read(self, frame):
        """The bytes of *frame*, header included (a view of a buffer the next read reuses)."""
        start, stop = int(self.offsets[frame]), int(self.offsets[frame + 1])
        view = memoryview(self.buffer)[:stop - start]
        try:
            got = os.preadv(self.fd, [view], start)
        except OSError as error:
            raise InputError(f"{self.path}: cannot read XTC frame {frame} ({reason(error)})") from None
        if got != stop - start:
            raise InputError(f"{self.path}: cannot read XTC frame {frame} (at byte {start}, it ends after {got} "
                             f"of its {stop - start} bytes: the file is shorter than when it was scanned)")
        return view

    def decode(self, frame, positions, integers=None):
        """Decode *frame* into *positions* (float32, n_atoms x 3, nm) and, when given,
        its grid integers into *integers* (int32, same shape; compressed frames only).

        Returns
        -------
        memoryview
            The frame's bytes, valid until the next read.

        Raises
        ------
        InputError
            If the frame is not a valid XTC encoding of its header's atoms, naming the file,
            the frame and what is wrong.
        """
        from ._xtcframe import CorruptFrame

        data = self.read(frame)
        try:
            self._decode(data, positions, integers)
        except CorruptFrame as error:
            raise InputError(f"{self.path}: XTC frame {frame} at byte {int(self.offsets[frame])} is corrupt "
                             f"({error}): the file is damaged") from None
        return data

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


#: A decoded frame as ``libmdaxdr.XTCFile.read`` returns it (MDAnalysis's XTCReader reads these fields).
XTCFrame = namedtuple("XTCFrame", ["x", "box", "step", "time", "prec"])


class MDAnalysisXTCFile:
    """The reading side of MDAnalysis's ``libmdaxdr.XTCFile`` over :class:`FrameReader`, for
    MDAnalysis's ``XTCReader`` (its ``_file``): the frames engine of ``bench rmsd`` reads
    XTC through MDAnalysis's Universe, but decodes with the checked decoder.

    Parameters
    ----------
    path : str
    offsets : array of int
        Start of each frame, then the end of the last one (h5mdtool's scan).
    mode : {"r"}
    """

    def __init__(self, path, offsets, mode="r"):
        if mode != "r":
            raise ValueError("h5mdtool reads XTC files only")
        self.frames = None
        self._offsets = np.asarray(offsets, np.int64)
        self.open(path, mode)

    def open(self, path, mode="r"):
        self.close()
        self.path = os.fsdecode(path)
        self.frames = FrameReader(self.path, self._offsets)
        self.n_atoms = _HEAD.unpack_from(self.frames.read(0))[1]
        self.position = 0

    @property
    def offsets(self):
        return self._offsets[:-1]

    def set_offsets(self, offsets):
        if not np.array_equal(offsets, self.offsets):
            raise ValueError("offsets differ from h5mdtool's scan of the file")

    def calc_offsets(self):
        return self.offsets

    def __len__(self):
        return len(self.frames)

    def tell(self):
        return self.position

    def seek(self, frame):
        if not 0 <= frame < len(self):
            raise EOFError(f"frame {frame} is not in the file's {len(self)} frames")
        self.position = frame

    def read_direct_x(self, positions):
        """Decode the next frame into *positions* (float32, n_atoms x 3)."""
        if self.position >= len(self):
            raise StopIteration
        data = self.frames.decode(self.position, positions)
        header = np.frombuffer(data[:60].tobytes().ljust(60, b"\0"), _FIELDS)[0]  # small frames: no precision
        self.position += 1
        precision = float(header["precision"]) if self.n_atoms > SMALL else 1000.0
        return XTCFrame(positions, header["box"].astype(np.float32).reshape(3, 3), int(header["step"]),
                        float(header["time"]), precision)

    def read(self):
        return self.read_direct_x(np.empty((self.n_atoms, 3), np.float32))

    def close(self):
        if self.frames is not None:
            self.frames.close()
            self.frames = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class XTCFormat(Format):
    """GROMACS XTC trajectories (positions in nm, lossy on the file's integer grid)."""

    name = "XTC"
    extensions = (".xtc",)
    decoders = ("h5mdtool.formats._xtcframe",)
    step_modulus = STEP_MODULUS

    #: The frame walker the scans share (:class:`Walk`).
    walker = Walk

    @classmethod
    def segment(cls, path, stat, offsets, rows, dropped):
        """The :class:`Segment` of a walked file: frame starts and the end of the last frame
        (*offsets*), the headers (*rows*, from :meth:`Walk.rows`), checked together.

        Raises
        ------
        InputError
            The first frame whose header repeats another atom count or declares a precision
            that is not a positive number.
        """
        table = np.ascontiguousarray(rows).view(_FIELDS).reshape(-1)
        n_atoms = int(table["natoms"][0])
        frames = np.arange(len(table))
        bad = frames[table["natoms2"] != n_atoms]
        if len(bad):
            raise InputError(f"{path}: frame {bad[0]} repeats a different atom count in its header: corrupt")
        box = table["box"].astype(np.float32).reshape(-1, 3, 3)
        time = table["time"].astype(np.float64)  # non-finite values are refused when frames are read
        precision = None
        if n_atoms > SMALL:
            precision = table["precision"].astype(np.float64)
            bad = frames[~(np.isfinite(precision) & (precision > 0))]
            if len(bad):
                raise InputError(f"{path}: frame {bad[0]} declares precision {precision[bad[0]]}: corrupt")
        step = unwrap_steps(table["step"])
        return Segment(
            path=path, format=cls.name, n_atoms=n_atoms, n_frames=len(table),
            size=stat.st_size, mtime=stat.st_mtime,
            step=step, time=time,
            fields={"positions": np.ones(len(table), bool), "box": box.reshape(len(box), -1).any(axis=1)},
            boundary=None, offsets=np.asarray(offsets, np.int64),
            details=with_stored_steps({"box": box, "precision": precision}, table["step"], step), dropped=dropped,
        )

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        # small frames store plain floats, which may be anything
        self.finite_by_construction = segment.n_atoms > SMALL
        self.frames = FrameReader(segment.path, segment.offsets)
        self.scratch = np.empty((segment.n_atoms, 3), np.float32)

    def read_frames(self, frames, block, row, fields):
        box = self.segment.details["box"]
        target = block.positions if "positions" in fields else None
        direct = self.atom_indices is None and target is not None and target.dtype == np.float32
        for frame in frames:
            frame = int(frame)
            output = target[row] if direct else self.scratch
            self.frames.decode(frame, output)
            if target is not None and not direct:
                picked = output if self.atom_indices is None else output[self.atom_indices]
                target[row] = picked
            block.edges[row] = box[frame]
            row += 1
        return row

    def close(self):
        self.frames.close()
