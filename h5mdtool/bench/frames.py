"""Frame sources for ``bench rmsd``: blocks of the selected atoms' positions and times.

One small interface over every input the benchmark reads. A source has ``n_frames``,
``n_atoms`` (of the whole system), ``scale`` (Angstrom per coordinate unit), ``chunk_frames``
(frames per storage chunk, 1 when that means nothing), ``opened`` (files this rank opened)
and ``describe()`` (format and layout), and

- ``read(start, stop)`` -> ``(positions, times)``: the selected atoms of frames
  ``[start, stop)`` as a ``(k, n_selected, 3)`` float array in the source's units (a view of a
  reused buffer, valid until the next read) and their times in ps (float64);
- ``close()``: collective for an H5MD file opened with MPI-IO, so every rank calls it.

The frames of a trajectory are those holding positions (an H5MD velocity or force element
may have steps of its own), numbered from 0; their times are the scanned ones, or MDAnalysis's 1 ps per frame
when the input records no time (:func:`position_times`).

Sources:

- :class:`TrajectoryFrames`: any format through :class:`h5mdtool.formats.TrajectoryReader`,
  with the scanned metadata (nothing is written beside the input). An H5MD file is
  read with MPI-IO on several ranks, a span of atoms at a time (:mod:`h5mdtool.formats.h5md`).
- :class:`ManifestFrames`: a split trajectory; a part is opened only when one of its frames
  is read, so each rank opens only the parts holding its frames.
- :class:`MDAnalysisFrames`: MDAnalysis Universes read frame by frame (the papers' way).

:func:`h5mdtool.formats.read_frame` reads one whole frame through the same stack (rank 0's reference frame).
"""

import os
import warnings
from dataclasses import dataclass

import numpy as np

from ..formats import TrajectoryIndex, TrajectoryReader, scan_segment
from ..formats.base import ANGSTROM_PER_NM, LibraryName, reason
from ..formats.trajectory import OpenFiles
from ..parallel.errors import H5mdToolError, InputError
from ..parallel.mpi import agree, capture_errors
from ..subfiles.manifest import ManifestError, clock_problem, read_manifest, segment_clock


def position_frames(index):
    """Trajectory frame numbers (of *index*) of the frames holding positions."""
    return np.flatnonzero(index.fields["positions"])


def position_times(index):
    """Time (ps) of each frame of *index* holding positions; 0, 1, 2... ps (MDAnalysis's
    default) when the input records no time."""
    frames = position_frames(index)
    if index.time is None:
        return np.arange(len(frames), dtype=np.float64)
    return np.asarray(index.time[frames], np.float64)


class TrajectoryFrames:
    """Selected atoms' positions (nm) and times (ps) of a scanned trajectory, any format.

    Frames are those holding positions. An H5MD file is opened with MPI-IO by every rank of
    *comm* at once (collective) when *comm* has several ranks.
    """

    scale = ANGSTROM_PER_NM

    def __init__(self, index, atom_indices, block_frames, comm=None):
        self.index = index
        self.frames = position_frames(index)
        self.n_frames, self.n_atoms = len(self.frames), index.n_atoms
        self.reader = TrajectoryReader(index, atom_indices, ("positions",), comm=comm)
        self.block = self.reader.new_block(block_frames)
        self.opened = [segment.path for segment in index.segments]
        first = index.segments[0]
        self.element = first.details.get("elements", {}).get("positions") if first.format == "H5MD" else None
        chunks = self.element and self.element["chunks"]
        self.chunk_frames = int(chunks[0]) if chunks else 1
        self.mpi_io = comm is not None and comm.size > 1 and first.format == "H5MD"

    def describe(self):
        if self.element is None:
            return {"format": ",".join(self.index.formats), "layout": "single shared file",
                    "offsets": "scanned"}
        chunks = self.element["chunks"]
        return {
            "format": "H5MD", "layout": "chunked" if chunks else "contiguous",
            "chunks": list(chunks) if chunks else None, "compression": self.element["compression"],
            "compression_opts": self.element["compression_opts"], "dtype": str(np.dtype(self.element["dtype"])),
            "particles_group": self.index.segments[0].details["group"].split("/", 1)[1], "mpi_io": self.mpi_io,
        }

    def read(self, start, stop, fresh=False):
        """Positions and times of frames ``[start, stop)`` (see the module's docstring);
        *fresh*: in a new buffer the caller may keep, instead of the reused one."""
        if fresh or stop - start > self.block.capacity:
            self.block = self.reader.new_block(stop - start)
        self.reader.read(self.frames[start:stop], self.block)
        n = self.block.n
        times = self.block.time[:n].copy()
        if self.index.time is None:  # MDAnalysis's default: dt = 1 ps
            times = np.arange(start, stop, dtype=np.float64)
        return self.block.positions[:n], times

    def close(self):
        self.reader.close()


def checked_part_scans(manifest, frames, group=None, scanned=None):
    """Scan the parts of *manifest* holding *frames*, refusing any that holds other frames
    than the manifest records for it (swapped or copied parts).

    Each part's first and last step and time come from the scan a reader of the part makes
    anyway, so the check costs no read; each rank checks the parts it reads.

    Parameters
    ----------
    manifest : Manifest
    frames : array of int
        Frame numbers of the whole trajectory (increasing).
    group : str, optional
        H5MD particle group of the parts.
    scanned : dict, optional
        Part path -> Segment already scanned (by :class:`ManifestFrames`: reading ahead),
        checked without scanning the part again.

    Returns
    -------
    dict
        Part path -> its scanned :class:`~h5mdtool.formats.base.Segment`.

    Raises
    ------
    ManifestError
        ``MAN009``, ``MAN008`` or ``MAN015`` (:func:`h5mdtool.subfiles.manifest.clock_problem`),
        naming the part.
    InputError
        A part that cannot be read.
    """
    frames = np.asarray(frames, np.int64)
    starts = np.array([part.start for part in manifest.parts], np.int64)
    numbers = np.unique(np.searchsorted(starts, frames, side="right") - 1) if len(frames) else []
    parts = [manifest.parts[int(number)] for number in numbers]
    scanned = scanned or {}
    scans = {part.path: scanned.get(part.path) or _scan_part(part, group) for part in parts}
    clocks = {path: segment_clock(segment) for path, segment in scans.items()}
    for part in parts:
        problem = clock_problem(manifest, part, *clocks[part.path], others=clocks)
        if problem is not None:
            raise ManifestError(manifest.path, problem)
    for part in parts:
        refuse_frames_without_positions(scans[part.path])
    return scans


def refuse_frames_without_positions(segment):
    """Refuse *segment* if one of its frames holds no positions: a TRR saving velocities or
    forces alone (nstvout != nstxout), an H5MD velocity or force element at steps of its own.

    Callers exempt a single H5MD file, whose frames are the rows of its positions (as
    MDAnalysis numbers them); not the parts of a split trajectory, whose manifest numbers
    every frame of each part.

    Raises
    ------
    InputError
        Naming the file and its first frame without positions (as the file numbers them).
    """
    present = segment.fields.get("positions")
    kept = segment.kept_frames
    if present is not None and present[kept].all():
        return
    frame = segment.skip if present is None else segment.skip + int(np.flatnonzero(~present[kept])[0])
    raise InputError(f"{segment.path}: frame {frame} holds no positions (velocities or forces only); "
                     "bench rmsd reads trajectories whose every frame holds positions")


def _scan_part(part, group=None):
    """A part's :class:`~h5mdtool.formats.base.Segment`, steps placed near the manifest's."""
    return scan_segment(part.path, group=group, near_step=part.first_step)


def _part_source(part, segment, n_atoms, atom_indices, block_frames):
    source = TrajectoryFrames(TrajectoryIndex([segment]), atom_indices, block_frames)
    if source.n_frames != part.n_frames or source.n_atoms != n_atoms:
        source.close()
        raise InputError(
            f"{part.path}: {source.n_frames} frames of {source.n_atoms} atoms, but the manifest "
            f"lists {part.n_frames} frames of {n_atoms} atoms"
        )
    return source


class ManifestFrames:
    """Frames of a split trajectory; a part is opened by :meth:`open_for` or when one of its
    frames is first read, so each rank opens only the parts holding its frames.

    Every part is read through the reading stack in nm, whatever units its file uses; H5MD
    parts read particle group *group* (default: the first listed, as MDAnalysis reads).
    """

    chunk_frames = 1
    scale = ANGSTROM_PER_NM

    def __init__(self, manifest, atom_indices, block_frames, group=None, scans=None):
        self.manifest = manifest
        #: part path -> Segment scanned (given: checked_part_scans; or made when opened)
        self.scans = dict(scans or {})
        self.n_frames, self.n_atoms = manifest.n_frames, manifest.n_atoms
        self.atom_indices, self.block_frames, self.group = atom_indices, block_frames, group
        self.sources = OpenFiles()

    @property
    def opened(self):
        return [os.path.relpath(path, os.path.dirname(self.manifest.path)) for path in self.sources.ever_opened]

    def describe(self):
        return {"format": self.manifest.format, "layout": "split", "parts": len(self.manifest.parts),
                "manifest": self.manifest.path}

    def _source(self, part):
        source = self.sources.get(part.path)
        if source is None:
            self.sources.make_room()
            if part.path not in self.scans:
                self.scans[part.path] = _scan_part(part, self.group)
            source = _part_source(part, self.scans[part.path], self.n_atoms, self.atom_indices, self.block_frames)
            self.sources.add(part.path, source)
        return source

    def open_for(self, frames):
        """Open now the parts holding *frames* (opening is not reading: the benchmark times it
        apart); beyond ``MAX_OPEN_SEGMENTS`` parts the others are opened when read."""
        frames = np.asarray(frames)
        for part in self.manifest.parts:
            if self.sources.full():
                break
            if np.any((frames >= part.start) & (frames < part.stop)):
                self._source(part)

    def read(self, start, stop, fresh=False):
        positions, times = [], []
        for part in self.manifest.parts_for(start, stop):
            p, t = self._source(part).read(max(start, part.start) - part.start, min(stop, part.stop) - part.start,
                                           fresh)
            positions.append(p)
            times.append(t)
        if not positions:
            width = self.n_atoms if self.atom_indices is None else len(self.atom_indices)
            return np.empty((0, width, 3), np.float32), np.empty(0)
        if len(positions) == 1:
            return positions[0], times[0]
        return np.concatenate(positions), np.concatenate(times)

    def close(self):
        self.sources.close()


def checked_manifest(path):
    """Read a split manifest and check that every part is there, at its listed size (rank 0).

    Raises
    ------
    InputError
        If the manifest is unreadable or a part is missing or of another size than listed.
    """
    manifest = read_manifest(path)
    for part in manifest.parts:
        if not os.path.isfile(part.path):
            raise InputError(f"{part.path}: part listed in {manifest.path} is missing")
        size = os.path.getsize(part.path)
        if size != part.bytes:
            raise InputError(
                f"{part.path}: {size} bytes on disk but {part.bytes} in {manifest.path} "
                "(changed since the split?)"
            )
    return manifest


@dataclass
class Piece:
    """One file of a trajectory read through MDAnalysis: frames ``[start, stop)`` of the whole
    trajectory are this file's frames ``skip, skip + 1, ...``."""

    path: str
    format: str
    start: int
    stop: int
    skip: int = 0
    offsets: np.ndarray = None

    def frame_offsets(self):
        """XTC/TRR byte offset of each frame, then the end of the last one: rank 0's scan,
        or this file's own scan on first use (a part)."""
        if self.offsets is None:
            self.offsets = scan_segment(self.path).offsets
        return self.offsets


class MDAnalysisFrames:
    """Frames through MDAnalysis Universes, one frame at a time (the papers' way).

    Positions are in Angstrom (``scale`` 1). Each file (*pieces*: one file, the segments of
    a trajectory, or the parts of a split one) gets its own ``Universe(topology, file)`` when
    one of its frames is first read; with several ranks a single H5MD file is opened by all
    of them at once with ``driver="mpio"``. XTC/TRR readers get the offsets rank 0 computed
    instead of building them on every rank and writing offset and lock files beside the
    trajectory; H5MD readers read the particle group *h5md_group*.

    Parameters
    ----------
    pieces : list of Piece
    topology : str
    atom_indices : array of int
        The atoms whose positions :meth:`frame` returns, in this order.
    comm : communicator
    n_atoms : int
        Atoms of the whole system.
    h5md_group : str, optional
    relative_to : str, optional
        Directory the ``opened`` paths are given relative to (a manifest's).
    times : array of float, optional
        Time (ps) of each frame from h5mdtool's scan, reported instead of MDAnalysis's
        ``ts.time``: MDAnalysis 2.11 converts an H5MD time in fs to ps in float32 (250000 fs
        became 250.000015 ps; make fuzz cases 2535-2539).
    """

    scale = 1.0
    chunk_frames = 1

    def __init__(self, pieces, topology, atom_indices, comm, n_atoms, h5md_group=None, relative_to=None, times=None):
        self.pieces, self.topology, self.comm = pieces, topology, comm
        self.times = times
        self.atom_indices = np.asarray(atom_indices, np.int64)
        self.h5md_group, self.relative_to = h5md_group, relative_to
        self.n_frames, self.n_atoms = pieces[-1].stop, n_atoms
        self.starts = np.array([piece.start for piece in pieces], np.int64)
        self.universes = OpenFiles(close=_close_universe)
        self.current = None
        if len(pieces) == 1 and pieces[0].format == "H5MD" and comm.size > 1:
            # Collective: every rank opens the file. The ranks agree on a failure, to report
            # it once (make fuzz case 2120: one line per rank, then MPI_ABORT), and close the
            # file together: a failed MDAnalysis open leaves it open, and closing it later
            # (the garbage collector, at another moment on each rank) hangs (case 350).
            with capture_errors() as failure:
                self._open(0, parallel=True)
            try:
                agree(comm, failure[0])
            except H5mdToolError:  # this rank's error, or RemoteRankError where the open worked
                self.close()
                close_hdf5_files(pieces[0].path)
                raise

    @property
    def opened(self):
        paths = [self.pieces[number].path for number in self.universes.ever_opened]
        if self.relative_to is None:
            return paths
        return [os.path.relpath(path, self.relative_to) for path in paths]

    def describe(self):
        return {"reader": "MDAnalysis"}

    def _open(self, number, parallel=False):
        import MDAnalysis

        piece = self.pieces[number]
        kwargs = {}
        reader = mdanalysis_reader(piece, self.h5md_group)
        if reader is not None:
            kwargs["format"] = reader
        if parallel:
            kwargs.update(driver="mpio", comm=self.comm)
        open_before = {f.id for f in open_hdf5_files(piece.path)} if piece.format == "H5MD" and not parallel else ()
        self.universes.make_room()
        # h5py opens any name; MDAnalysis's other readers need one in UTF-8
        name = None if piece.format == "H5MD" else LibraryName(piece.path)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                universe = MDAnalysis.Universe(self.topology, piece.path if name is None else name.name, **kwargs)
        except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
            if name is not None:
                name.close()
            if isinstance(error, InputError):  # h5mdtool's own decoder refused a frame
                raise
            hint = ""
            if piece.format == "H5MD" and _fixed_step(piece.path, self.h5md_group):
                hint = ("; its H5MDReader needs a step value per frame and this file stores a fixed step "
                        "interval: --engine blocks reads it")
            if piece.format == "H5MD" and not parallel:  # MDAnalysis left it open (MPI-IO: see __init__)
                close_hdf5_files(piece.path, keep=open_before)
            raise InputError(f"{piece.path}: MDAnalysis cannot read it with {self.topology} "
                             f"({reason(error)}){hint}") from None
        universe.h5mdtool_atoms = universe.atoms[self.atom_indices]
        universe.h5mdtool_name = name
        return self.universes.add(number, universe)

    def open_for(self, frames):
        """Build now the Universes of the files holding *frames* (each parses the topology);
        beyond ``MAX_OPEN_SEGMENTS`` files the others are built when read."""
        frames = np.asarray(frames)
        for number, piece in enumerate(self.pieces):
            if self.universes.full():
                break
            if number not in self.universes and np.any((frames >= piece.start) & (frames < piece.stop)):
                self._open(number)

    def frame(self, number):
        """Load frame *number*; returns (the atoms' positions in Angstrom, time in ps).

        Raises
        ------
        InputError
            If a position is NaN or infinite, naming the file, its frame and the atom, as
            the blocks engine's readers do (MDAnalysis's kernels would fail on it later with
            an error that names neither).
        """
        piece_number = int(np.searchsorted(self.starts, number, side="right")) - 1
        universe = self.universes.get(piece_number) or self._open(piece_number)
        piece = self.pieces[piece_number]
        local = number - piece.start + piece.skip
        ts = universe.trajectory[local]
        positions = universe.h5mdtool_atoms.positions
        if not np.isfinite(positions).all():
            atom = int(self.atom_indices[np.flatnonzero(~np.isfinite(positions).all(axis=1))[0]])
            raise InputError(f"{piece.path}: frame {int(local)} holds non-finite positions (atom {atom}); "
                             "h5mdtool refuses NaN and infinite values")
        return positions, ts.time if self.times is None else self.times[number]

    def read(self, start, stop):
        positions, times = zip(*(self.frame(i) for i in range(start, stop)))
        return np.array(positions, dtype=np.float64), np.array(times, dtype=np.float64)

    def close(self):
        self.universes.close()


def _close_universe(universe):
    universe.trajectory.close()
    if universe.h5mdtool_name is not None:
        universe.h5mdtool_name.close()


def open_hdf5_files(path):
    """The HDF5 file handles (``h5py.h5f.FileID``) this process holds on *path*."""
    import h5py

    found = []
    for file_id in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        try:
            if os.path.samefile(os.fsdecode(file_id.name), path):
                found.append(file_id)
        except OSError:
            continue
    return found


def close_hdf5_files(path, keep=frozenset()):
    """Close the HDF5 file handles this process holds on *path* (and the objects in them),
    except those whose identifiers (``FileID.id``) are in *keep*.

    With MPI-IO closing is collective: call it on every rank at the same point.
    """
    import h5py

    for file_id in open_hdf5_files(path):
        if file_id.id not in keep:
            h5py.File(file_id).close()


_READER_CLASSES = {}


def _fixed_step(path, group=None):
    """True when the positions of the H5MD file's particle group (default: the first) have a scalar step."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            particles = handle["particles"]
            name = group or next(iter(particles))
            return particles[name]["position/step"].shape == ()
    except Exception:  # noqa: BLE001 - only a hint for a message
        return False


def mdanalysis_reader(piece, h5md_group=None):
    """The MDAnalysis reader class or format name for *piece*.

    XTC/TRR: a reader that takes the offsets rank 0 computed, or that this rank scans for a
    part (nothing written beside the file); H5MD: MDAnalysis's reader of particle group
    *h5md_group* (None: the first listed, as MDAnalysis reads), leaving out velocities and
    forces saved at steps of their own (MDAnalysis's reads their rows as if they were the
    positions'). Each class has a format name of its own, so MDAnalysis's registry of
    readers is otherwise unchanged.
    """
    if piece.format in ("XTC", "TRR"):
        return _reader_with_offsets(piece.format, piece.frame_offsets())
    if piece.format == "H5MD":
        if h5md_group not in _READER_CLASSES:
            _READER_CLASSES[h5md_group] = _h5md_reader(h5md_group)
        return _READER_CLASSES[h5md_group]
    # the format the scan read (MDAnalysis's name for it too): a LAMMPS DCD ends in .dcd,
    # from which MDAnalysis alone would choose CHARMM's reader and its time unit
    return piece.format


def _reader_with_offsets(fmt, offsets):
    """An MDAnalysis XTC/TRR reader class that takes the given offsets (no offset files).

    *offsets* are the scan's: the start of each frame, then the end of the last one. XTC
    frames are decoded by h5mdtool's checked decoder
    (:class:`~h5mdtool.formats.xtc.MDAnalysisXTCFile`), never by ``libmdaxdr``, which
    reads out of bounds on a damaged frame.
    """
    from MDAnalysis.coordinates.TRR import TRRReader
    from MDAnalysis.coordinates.XTC import XTCReader

    from ..formats.xtc import MDAnalysisXTCFile

    base = XTCReader if fmt == "XTC" else TRRReader

    def _load_offsets(self):
        self._xdr.set_offsets(offsets[:-1])

    def close(self):
        if hasattr(self, "_xdr"):  # not when opening failed (its __del__ would print a traceback)
            base.close(self)

    members = {"format": f"H5MDTOOL-{fmt}", "_load_offsets": _load_offsets, "close": close}
    if fmt == "XTC":
        members["_file"] = staticmethod(lambda path, mode="r": MDAnalysisXTCFile(path, offsets, mode))
    return type(f"H5mdTool{fmt}Reader", (base,), members)


def _h5md_reader(group):
    """An MDAnalysis H5MD reader class of particle group *group* (None: the first listed)
    that does not read velocities or forces saved at other steps than the positions."""
    from MDAnalysis.coordinates.H5MD import H5MDReader

    def _select(self):
        if group is not None:
            self._particle_group = self._file["particles"][group]

    def _own_steps(self, name):
        particles = self._particle_group
        if name not in particles or "position" not in particles:
            return False
        mine, positions = particles[name], particles["position"]
        if mine["value"].shape[0] != positions["value"].shape[0]:
            return True
        steps = mine.get("step"), positions.get("step")
        return all(s is not None and s.shape == positions["value"].shape[:1] for s in steps) \
            and not np.array_equal(steps[0][()], steps[1][()])

    def open_trajectory(self):
        H5MDReader.open_trajectory(self)
        _select(self)
        self._h5mdtool_skip = [name for name in ("velocity", "force") if _own_steps(self, name)]

    def _read_frame(self, frame):
        for name in getattr(self, "_h5mdtool_skip", ()):
            self._has[name] = False
        return H5MDReader._read_frame(self, frame)

    def __setstate__(self, state):
        H5MDReader.__setstate__(self, state)
        _select(self)

    return type("H5mdToolH5MDReader", (H5MDReader,),
                {"format": "H5MDTOOL-H5MD" if group is None else f"H5MDTOOL-H5MD-{group}",
                 "open_trajectory": open_trajectory, "_read_frame": _read_frame, "__setstate__": __setstate__})
