"""Trajectories read through MDAnalysis's own reader for their format (TRZ, GSD, LAMMPS dump).

For formats without a reader of h5mdtool's own, a :class:`MDAnalysisFormat` subclass names
MDAnalysis's reader (``MDAnalysis.coordinates.core.get_reader_for(path, format=...)``) and
the few facts MDAnalysis does not give uniformly (where the atom count or the step is). The
contract is the one of every format of this package:

* the scan (rank 0) opens the reader once and loads every frame, recording its step, time
  (ps, as MDAnalysis reports it), box and which of velocities and forces it holds, and checks
  that time and box are finite; a frame that cannot be decoded is named in the error (the
  last one may be left out with ``on_truncated="drop"``);
* each rank opens its own reader, only for segments holding its frames, and reads blocks of
  frames for a selection of atoms.

Values are MDAnalysis's, with its unit conversions (the reader's native units to Angstrom,
ps, Angstrom/ps and kJ/(mol Angstrom)), then converted to h5mdtool's units and rounded once
to float32: positions and velocities divided by 10, forces multiplied by 10,
box vectors ``triclinic_vectors`` of MDAnalysis's dimensions divided by 10. Formats
without units (GSD, LAMMPS dump files) are read as MDAnalysis reads them: as Angstrom and ps.
A format whose native units are h5mdtool's (TRZ: nm, nm/ps, ps) is read as stored
(``convert_units=False``), so its float32 values are kept bit for bit instead of going
through Angstrom and back (which moved one value in a few by one unit in the last place).

The cost: every frame is decoded twice (once by the scan on rank 0, once by the rank that
reads it), by MDAnalysis one frame at a time, and each rank's reader builds its own frame
index when it opens a file (LAMMPS dump files are read line by line for it). MDAnalysis's
readers for these formats keep no offset or lock files; the XTC and TRR readers, which do,
are never used here (h5mdtool reads those formats itself).
"""

import os
import struct
import sys
import traceback
import warnings

import numpy as np

from ..parallel.errors import InputError
from .base import ANGSTROM_PER_NM, Format, LibraryName, Segment, file_stat, reason, truncated
from .netcdf import convert_to

#: MDAnalysis's units (Angstrom, Angstrom/ps, kJ/(mol Angstrom)) -> h5mdtool's: (multiplier, divisor).
TO_H5MDTOOL = {"positions": (1.0, ANGSTROM_PER_NM), "velocities": (1.0, ANGSTROM_PER_NM),
               "forces": (ANGSTROM_PER_NM, 1.0)}
#: Exceptions MDAnalysis's readers raise for files they cannot decode.
DECODE_ERRORS = (OSError, EOFError, ValueError, IndexError, KeyError, TypeError, RuntimeError, struct.error,
                 StopIteration, AttributeError)


def _release_half_built_reader(error):
    """Free the reader whose ``__init__`` raised *error*, silencing its ``__del__``.

    The traceback keeps the half-built reader alive; when it is freed later, MDAnalysis's
    ``ReaderBase.__del__`` calls ``close()``, which fails on the missing file handle and
    prints a traceback on standard error ("Exception ignored in ..."). Clearing the
    traceback's frames frees it here, with that report silenced.
    """
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        traceback.clear_frames(error.__traceback__)
    finally:
        sys.unraisablehook = hook


class MDAnalysisFormat(Format):
    """Base of formats read through an MDAnalysis reader; subclasses set :attr:`mda_format`."""

    #: MDAnalysis's name of the format (``format=`` of a Universe).
    mda_format = None
    #: False when the file records no time and MDAnalysis's default (1 ps per frame or step) is used.
    records_time = True
    #: True when the reader's native units are h5mdtool's (nm, nm/ps, ps): values are read as stored.
    native_units = False

    @classmethod
    def reader_kwargs(cls, path):
        """Keyword arguments for the reader (for example an atom count the file header lacks)."""
        return {}

    @classmethod
    def frame_step(cls, ts, frame):
        """The simulation step of *ts* (frame number *frame*)."""
        step = ts.data.get("step")
        return frame if step is None else int(step)

    @classmethod
    def frame_count(cls, reader, path, size, on_truncated):
        """``(frames to read, dropped record or None)`` of an open *reader*."""
        return int(reader.n_frames), None

    @classmethod
    def load(cls, reader, frame):
        """Load *frame* into the reader's timestep and return it."""
        return reader[frame]

    @classmethod
    def open_reader(cls, path, name=None):
        """An MDAnalysis reader of *path* (``convert_units=True``), warnings silenced.

        *name* is the name MDAnalysis opens (a :class:`LibraryName`'s), *path* by default.

        Raises
        ------
        InputError
            If MDAnalysis cannot open the file as this format.
        """
        from MDAnalysis.coordinates.core import get_reader_for

        kwargs = cls.reader_kwargs(path)
        try:
            with warnings.catch_warnings():  # deprecations, units MDAnalysis guesses
                warnings.simplefilter("ignore")
                reader_class = get_reader_for(path, format=cls.mda_format)
                return reader_class(name or path, convert_units=not cls.native_units, **kwargs)
        except (ImportError, NotImplementedError) as error:
            failure, message = error, f"{path}: MDAnalysis cannot read {cls.name} files here ({reason(error)})"
        except DECODE_ERRORS as error:
            failure, message = error, f"{path}: not a readable {cls.name} file ({reason(error)})"
        _release_half_built_reader(failure)
        raise InputError(message) from None

    @classmethod
    def scan(cls, path, on_truncated="error"):
        stat = file_stat(path)
        with LibraryName(path) as name:
            return cls._scan_open(path, stat, cls.open_reader(path, name), on_truncated)

    @classmethod
    def _scan_open(cls, path, stat, reader, on_truncated):
        try:
            n_frames, dropped = cls.frame_count(reader, path, stat.st_size, on_truncated)
            n_atoms = int(reader.n_atoms)
            if n_atoms < 1:
                raise InputError(f"{path}: declares {n_atoms} atoms")
            step = np.zeros(n_frames, np.int64)
            time = np.zeros(n_frames, np.float64)
            present = {name: np.zeros(n_frames, bool) for name in ("velocities", "forces", "box")}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for frame in range(n_frames):
                    try:
                        ts = cls.load(reader, frame)
                        step[frame] = cls.frame_step(ts, frame)
                        time[frame] = ts.time
                        dimensions = ts.dimensions
                        present["velocities"][frame] = ts.has_velocities
                        present["forces"][frame] = ts.has_forces
                    except DECODE_ERRORS as error:
                        raise InputError(f"{path}: cannot read {cls.name} frame {frame} ({reason(error)})") from None
                    if not np.isfinite(time[frame]):
                        raise InputError(f"{path}: frame {frame} has a non-finite time")
                    if dimensions is not None:
                        if not np.isfinite(dimensions).all():
                            raise InputError(f"{path}: frame {frame} has a non-finite box")
                        present["box"][frame] = bool(np.any(dimensions[:3]))
        finally:
            reader.close()
        if n_frames == 0:
            raise InputError(f"{path}: holds no complete {cls.name} frame")
        fields = {"positions": np.ones(n_frames, bool)}
        fields.update({name: values[:n_frames] for name, values in present.items() if values[:n_frames].any()})
        return Segment(
            path=path, format=cls.name, n_atoms=n_atoms, n_frames=n_frames, size=stat.st_size,
            mtime=stat.st_mtime, step=step[:n_frames], time=time[:n_frames], fields=fields,
            details={"mdanalysis_format": cls.mda_format, "time_recorded": cls.records_time}, dropped=dropped,
        )

    def __init__(self, segment, atom_indices=None):
        super().__init__(segment, atom_indices)
        self.reader = None
        self.library_name = LibraryName(segment.path)
        try:
            self.reader = self.open_reader(segment.path, self.library_name.name)
            self.frame_count(self.reader, segment.path, os.path.getsize(segment.path), "drop")
        except (InputError, OSError) as error:
            self.close()
            raise self.error(0, error) from None

    def read_frames(self, frames, block, row, fields):
        from MDAnalysis.lib.mdamath import triclinic_vectors

        box = self.segment.fields.get("box")
        factors = {name: (1.0, 1.0) if self.native_units else TO_H5MDTOOL[name] for name in fields}
        box_divisor = 1.0 if self.native_units else ANGSTROM_PER_NM
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for frame in frames:
                frame = int(frame)
                try:
                    ts = self.load(self.reader, frame)
                    for name in fields:
                        values = getattr(ts, name)
                        if self.atom_indices is not None:
                            values = values[self.atom_indices]
                        convert_to(getattr(block, name)[row], values, None, *factors[name])
                    if box is not None and box[frame]:
                        block.edges[row] = np.asarray(triclinic_vectors(ts.dimensions), np.float64) / box_divisor
                    else:
                        block.edges[row] = 0.0
                except DECODE_ERRORS as error:
                    raise self.error(frame, error) from None
                row += 1
        return row

    def close(self):
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.library_name.close()


class TRZFormat(MDAnalysisFormat):
    """IBIsCO/YASP TRZ trajectories (positions and velocities in nm, nm/ps; time in ps), read as stored.

    The file header has no atom count; each frame's has, so the first frame's is used. The
    step is the frame's ``ntrj`` field (MDAnalysis's ``ts.data["frame"]``). Frames have a fixed
    size: each is read from its own offset, not by MDAnalysis's relative seek.
    """

    name = "TRZ"
    extensions = (".trz",)
    mda_format = "TRZ"
    native_units = True
    decoders = ("MDAnalysis.coordinates.TRZ",)
    #: Bytes of the file header, and of a frame header up to its atom count.
    HEADER = 100
    NATOMS_AT = HEADER + 12

    @classmethod
    def reader_kwargs(cls, path):
        with open(path, "rb") as handle:
            head = handle.read(cls.NATOMS_AT + 4)
        if len(head) < cls.NATOMS_AT + 4:
            raise InputError(f"{path}: {len(head)} bytes, shorter than a TRZ header and frame header")
        n_atoms = struct.unpack_from("<i", head, cls.NATOMS_AT)[0]
        if n_atoms < 1:
            raise InputError(f"{path}: the first TRZ frame declares {n_atoms} atoms (not a TRZ file, or corrupt)")
        return {"n_atoms": n_atoms}

    @classmethod
    def frame_step(cls, ts, frame):
        return int(ts.data["frame"])

    @classmethod
    def load(cls, reader, frame):
        # MDAnalysis seeks relative to the frame number the last frame read stores (nframe),
        # which reads other frames than asked when those numbers are not consecutive
        reader.trzfile.seek(reader._headerdtype.itemsize + frame * reader._dtype.itemsize)
        return reader._read_next_timestep()

    @classmethod
    def frame_count(cls, reader, path, size, on_truncated):
        # frames have a fixed size; MDAnalysis counts none at all when the last is incomplete
        frame_bytes = reader._dtype.itemsize
        head = reader._headerdtype.itemsize
        whole, rest = divmod(size - head, frame_bytes)
        dropped = None
        if rest:
            dropped = truncated(path, whole, head + whole * frame_bytes, rest, frame_bytes, on_truncated)
        reader._cache["n_frames"] = whole
        return whole, dropped


class GSDFormat(MDAnalysisFormat):
    """HOOMD-blue GSD trajectories (positions and box; no units: read as Angstrom, as MDAnalysis does).

    The time is MDAnalysis's: the frame number times its default time step of 1 ps.
    """

    name = "GSD"
    extensions = (".gsd",)
    mda_format = "GSD"
    records_time = False
    decoders = ("MDAnalysis.coordinates.GSD", "gsd.hoomd")


class LAMMPSDumpFormat(MDAnalysisFormat):
    """LAMMPS text dump files (``dump atom/custom``): positions, optional velocities and forces.

    Atoms are sorted by id and the box moved to the origin, as MDAnalysis's ``DumpReader``
    does; the time is MDAnalysis's: the step times its default time step of 1 ps.

    MDAnalysis counts frames as groups of ``n_atoms + 9`` lines and silently ignores an
    incomplete last group, and a last line cut short may still parse: the file's lines are
    counted here, and a file that does not hold whole frames is truncated. A last line
    without its newline (as some editors leave files) must hold every column its frame's
    ``ITEM: ATOMS`` line names; a number cut short inside that line cannot be detected.
    """

    name = "LAMMPSDUMP"
    extensions = (".lammpstrj", ".lammpsdump")
    mda_format = "LAMMPSDUMP"
    decoders = ("MDAnalysis.coordinates.LAMMPS",)
    records_time = False
    #: Lines of a frame besides one per atom (ITEM lines, step, atom count, three box lines).
    HEADER_LINES = 9

    @classmethod
    def frame_count(cls, reader, path, size, on_truncated):
        per_frame = int(reader.n_atoms) + cls.HEADER_LINES
        starts, n_lines, last_line = _line_starts(path, per_frame)
        complete = n_lines // per_frame
        if complete and n_lines % per_frame == 0 and last_line is not None:
            columns = _atom_columns(path, starts[complete - 1], cls.HEADER_LINES)
            if len(last_line.split()) < columns:
                complete -= 1  # the last line of the last frame is cut short
        dropped = None
        if complete * per_frame != n_lines:
            start = starts[complete]
            dropped = truncated(path, complete, start, size - start, None, on_truncated)
        n_frames = int(reader.n_frames)  # builds MDAnalysis's frame offsets
        if n_frames < complete:
            raise InputError(f"{path}: MDAnalysis finds {n_frames} frames where the file has {complete}")
        reader._cache["n_frames"] = complete
        return complete, dropped


def _atom_columns(path, start, header_lines):
    """Columns named by the ``ITEM: ATOMS`` line of the frame starting at byte *start*."""
    with open(path, "rb") as handle:
        handle.seek(start)
        lines = [handle.readline() for _ in range(header_lines)]
    return len(lines[-1].split()) - 2


def _line_starts(path, per_frame):
    """Where every *per_frame*-th line starts (bytes), the line count, and a last line without newline.

    Returns
    -------
    starts : list of int
    n_lines : int
    last_line : bytes or None
        The file's last line when it does not end with a newline, else None.
    """
    starts, n_lines, position, tail = [0], 0, 0, b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 24)
            if not chunk:
                break
            for end in np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10):
                n_lines += 1
                if n_lines % per_frame == 0:
                    starts.append(position + int(end) + 1)
            tail = (tail + chunk)[-(1 << 16):]
            position += len(chunk)
    last_line = None
    if tail and not tail.endswith(b"\n"):
        n_lines += 1
        last_line = tail.rsplit(b"\n", 1)[-1]
    return starts, n_lines, last_line
