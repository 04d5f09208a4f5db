"""Frame sources for ``bench rmsd``: blocks of the selected atoms' positions and times.

One small interface over every input the benchmark reads. A source has ``n_frames``,
``n_atoms`` (of the whole system), ``scale`` (Angstrom per coordinate unit), ``chunk_frames``
(frames per storage chunk, 1 when that means nothing), ``opened`` (files this rank opened)
and ``describe()`` (format and layout for the report), and

- ``read(start, stop)`` -> ``(positions, times)``: the selected atoms of frames
  ``[start, stop)`` as a ``(k, n_selected, 3)`` float array in the source's units (a view of a
  reused buffer, valid until the next read) and their times in ps (float64);
- ``close()``: collective for an H5MD file opened with MPI-IO, so every rank calls it.

Sources:

- :class:`H5MDFrames`: ``/particles/<group>/position/value`` read with ``read_direct`` into a
  reused buffer, only the span of atoms from the first to the last selected one (whole
  frames for a protein at the start of a solvated system would be mostly water), then the
  selected atoms picked in memory. h5py's point selection on the atom axis is about 4x
  slower than reading the span, and a fresh array per block about 2x slower than the reused
  buffer (measured on the AdK H5MD, ``docs/benchmark.md``). MPI-IO on several ranks.
- :class:`TrajectoryFrames`: XTC/TRR/DCD through :class:`h5mdtool.sources.TrajectoryReader`
  with the offsets rank 0 scanned (nothing is written beside the input).
- :class:`ManifestFrames`: a split trajectory; a part is opened only when one of its frames
  is read, so each rank opens only the parts holding its frames.
- :class:`MDAnalysisFrames`: MDAnalysis Universes read frame by frame (the papers' way).
"""

import os
import warnings
from dataclasses import dataclass

import numpy as np

from .errors import InputError, mark_collective
from .manifest import read_manifest
from .mpi import SerialComm, open_h5
from .sources import TrajectoryIndex, TrajectoryReader, _h5md_factor, detect_format, scan_segment


#: Common H5MD units, converted without importing MDAnalysis (which costs a non-root rank
#: 0.3 s at start-up when it has no other use for it); others go through MDAnalysis's tables.
ANGSTROM_PER = {"nm": 10.0, "Angstrom": 1.0, "angstrom": 1.0, "pm": 0.01, "fm": 1e-5}
PS_PER = {"ps": 1.0, "fs": 1e-3, "ns": 1e3}


def _factor(path, dataset, kind):
    """Angstrom (length) or ps (time) per unit of *dataset*; 1 without a unit attribute."""
    unit = dataset.attrs.get("unit")
    if unit is None:
        return 1.0
    unit = unit.decode() if isinstance(unit, bytes) else str(unit)
    table = ANGSTROM_PER if kind == "length" else PS_PER
    if unit in table:
        return table[unit]
    return _h5md_factor(path, dataset, kind, "Angstrom" if kind == "length" else "ps")


def h5md_group(path, handle, requested=None):
    """The particle group to read: *requested*, or the first listed under ``/particles``.

    MDAnalysis's ``H5MDReader`` reads ``list(file["particles"])[0]`` (h5py lists groups by
    name unless they were created with ``track_order``), so both engines read what
    MDAnalysis reads unless ``--group`` names another.

    Raises
    ------
    InputError
        If there is no ``/particles`` group, *requested* is not one of its groups, or the
        chosen group has no ``position/value``.
    """
    particles = handle.get("particles")
    if particles is None or not len(particles):
        raise InputError(f"{path}: no /particles group: not an H5MD trajectory")
    names = list(particles)
    if requested is not None and requested not in names:
        raise InputError(f"{path}: no particle group {requested!r}; /particles holds {', '.join(names)}")
    name = requested or names[0]
    group = particles[name]
    if not (isinstance(group, type(particles)) and "position" in group and "value" in group["position"]):
        others = [n for n in names if n != name]
        hint = f"; choose another with --group ({', '.join(others)})" if others else ""
        raise InputError(f"{path}: particle group {name!r} has no position/value{hint}")
    return name


def _series_ps(time, scale, start, stop):
    """Times (ps) of frames ``[start, stop)`` from an H5MD ``time`` dataset (None: 1 ps a frame,
    MDAnalysis's default; a scalar: H5MD 1.1's fixed interval with an ``offset`` attribute)."""
    if time is None:
        return np.arange(start, stop, dtype=np.float64)
    if time.shape == ():
        offset = float(time.attrs.get("offset", 0.0))
        return (offset + float(time[()]) * np.arange(start, stop)) * scale
    return np.asarray(time[start:stop], np.float64) * scale


def h5md_time_ps(path, position, start, stop):
    """Times (ps) of frames ``[start, stop)`` of an H5MD ``position`` element."""
    time = position.get("time")
    return _series_ps(time, 1.0 if time is None else _factor(path, time, "time"), start, stop)


def h5md_frame(path, group, frame):
    """All positions (Angstrom, float32) and the box (MDAnalysis ``dimensions`` or None) of
    one frame of an H5MD particle *group*, read with h5py (rank 0's reference frame: also
    for files MDAnalysis's reader refuses, such as a fixed time interval).

    Raises
    ------
    InputError
        Units h5mdtool cannot convert.
    """
    import h5py

    with h5py.File(path, "r") as handle:
        particles = handle["particles"][group]
        value = particles["position/value"]
        positions = (np.asarray(value[frame], np.float64) * _factor(path, value, "length")).astype(np.float32)
        dimensions = None
        box = particles.get("box")
        boundary = [] if box is None else [b.decode() if isinstance(b, bytes) else str(b)
                                           for b in np.atleast_1d(box.attrs.get("boundary", []))]
        if box is not None and "edges" in box and boundary and all(b == "periodic" for b in boundary):
            edges = box["edges"]
            dataset = edges["value"] if isinstance(edges, h5py.Group) else edges
            data = dataset[frame] if isinstance(edges, h5py.Group) else dataset[()]
            data = np.asarray(data, np.float64) * _factor(path, dataset, "length")
            from MDAnalysis.lib.mdamath import triclinic_box

            dimensions = [*data, 90.0, 90.0, 90.0] if data.shape == (3,) else triclinic_box(*data)
    return positions, dimensions


class H5MDFrames:
    """Selected atoms' positions and times from an H5MD file (MPI-IO on several ranks).

    Raises
    ------
    InputError
        If the file has no positions or units h5mdtool cannot convert (collective: every
        rank sees the same metadata).
    """

    def __init__(self, path, atom_indices, comm, block_frames=1024, group=None):
        self.path = path
        self.handle = open_h5(path, "r", comm)
        try:
            self.group_name = h5md_group(path, self.handle, group)
            self._inspect(atom_indices, block_frames)
        except InputError as error:
            self.handle.close()
            raise mark_collective(error)
        self.opened = [path]

    def _inspect(self, atom_indices, block_frames):
        position = self.handle["particles"][self.group_name]["position"]
        self.value = position["value"]
        if self.value.ndim != 3 or self.value.shape[2] != 3:
            raise InputError(f"{self.path}: {self.value.name} has shape {self.value.shape}, not (frames, atoms, 3)")
        self.n_frames, self.n_atoms = int(self.value.shape[0]), int(self.value.shape[1])
        self.scale = _factor(self.path, self.value, "length")
        self.time = position.get("time")
        self.time_scale = 1.0 if self.time is None else _factor(self.path, self.time, "time")
        self.chunk_frames = self.value.chunks[0] if self.value.chunks else 1
        indices = np.asarray(atom_indices, np.int64)
        # read the span of atoms from the first to the last selected one, pick in memory
        self.first, self.last = int(indices.min()), int(indices.max()) + 1
        self.pick = indices - self.first
        if np.array_equal(self.pick, np.arange(self.last - self.first)):
            self.pick = None  # the selection is the whole span: no copy
        self.buffer = np.empty((0, self.last - self.first, 3), self.value.dtype)
        self.block_frames = block_frames
        value = self.value
        self._description = {
            "format": "H5MD",
            "layout": "chunked" if value.chunks else "contiguous",
            "chunks": list(value.chunks) if value.chunks else None,
            "compression": value.compression,
            "compression_opts": value.compression_opts,
            "dtype": str(value.dtype),
            "particles_group": self.group_name,
            "mpi_io": self.handle.driver == "mpio",
        }

    def describe(self):
        return dict(self._description)

    def _times(self, start, stop):
        return _series_ps(self.time, self.time_scale, start, stop)

    def read(self, start, stop):
        count = stop - start
        if len(self.buffer) < count:
            self.buffer = np.empty((max(count, self.block_frames), self.last - self.first, 3), self.value.dtype)
        if count:
            self.value.read_direct(self.buffer, np.s_[start:stop, self.first:self.last], np.s_[0:count])
        positions = self.buffer[:count]
        if self.pick is not None:
            positions = np.take(positions, self.pick, axis=1)
        return positions, self._times(start, stop)

    def close(self):
        self.handle.close()


class TrajectoryFrames:
    """Selected atoms' positions (nm) and times (ps) of an XTC/TRR/DCD trajectory."""

    scale = 10.0
    chunk_frames = 1

    def __init__(self, index, atom_indices, block_frames):
        self.index = index
        self.n_frames, self.n_atoms = index.n_frames, index.n_atoms
        self.reader = TrajectoryReader(index, atom_indices, ("positions",))
        self.block = self.reader.new_block(block_frames)
        self.opened = [segment.path for segment in index.segments]

    def describe(self):
        return {"format": ",".join(self.index.formats), "layout": "single shared file",
                "offsets": "scanned by rank 0 and broadcast"}

    def read(self, start, stop):
        if stop - start > self.block.capacity:
            self.block = self.reader.new_block(stop - start)
        self.reader.read(np.arange(start, stop), self.block)
        n = self.block.n
        return self.block.positions[:n], self.block.time[:n].copy()

    def close(self):
        self.reader.close()


def _part_source(part, n_atoms, atom_indices, block_frames):
    if detect_format(part.path) == "H5MD":
        source = H5MDFrames(part.path, atom_indices, SerialComm(), block_frames)
    else:
        index = TrajectoryIndex([scan_segment(part.path)], n_atoms, False, False, False)
        source = TrajectoryFrames(index, atom_indices, block_frames)
    if source.n_frames != part.n_frames or source.n_atoms != n_atoms:
        source.close()
        raise InputError(
            f"{part.path}: {source.n_frames} frames of {source.n_atoms} atoms, but the manifest "
            f"lists {part.n_frames} frames of {n_atoms} atoms"
        )
    return source


class ManifestFrames:
    """Frames of a split trajectory; a part is opened by :meth:`open_for` or when one of its
    frames is first read, so each rank opens only the parts holding its frames."""

    chunk_frames = 1

    def __init__(self, manifest, atom_indices, block_frames):
        self.manifest = manifest
        self.n_frames, self.n_atoms = manifest.n_frames, manifest.n_atoms
        self.atom_indices, self.block_frames = atom_indices, block_frames
        self.sources = {}
        # nm, the unit of XTC/TRR/DCD readers and of h5mdtool's H5MD parts; parts in other
        # units are converted, so every rank's frames and rank 0's reference agree
        self.scale = 10.0

    @property
    def opened(self):
        return [os.path.relpath(path, os.path.dirname(self.manifest.path)) for path in self.sources]

    def describe(self):
        return {"format": self.manifest.format, "layout": "split", "parts": len(self.manifest.parts),
                "manifest": self.manifest.path}

    def _source(self, part):
        if part.path not in self.sources:
            self.sources[part.path] = _part_source(part, self.n_atoms, self.atom_indices, self.block_frames)
        return self.sources[part.path]

    def open_for(self, frames):
        """Open now the parts holding *frames* (opening is not reading: the benchmark times it apart)."""
        frames = np.asarray(frames)
        for part in self.manifest.parts:
            if np.any((frames >= part.start) & (frames < part.stop)):
                self._source(part)

    def read(self, start, stop):
        positions, times = [], []
        for part in self.manifest.parts_for(start, stop):
            source = self._source(part)
            p, t = source.read(max(start, part.start) - part.start, min(stop, part.stop) - part.start)
            positions.append(p if source.scale == self.scale else p * (source.scale / self.scale))
            times.append(t)
        if not positions:
            return np.empty((0, len(self.atom_indices), 3), np.float32), np.empty(0)
        if len(positions) == 1:
            return positions[0], times[0]
        return np.concatenate(positions), np.concatenate(times)

    def close(self):
        for source in self.sources.values():
            source.close()


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
        """XTC/TRR byte offset of each frame (one per frame, as MDAnalysis's readers take
        them): rank 0's scan, or this file's own scan on first use (a part)."""
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
    """

    scale = 1.0
    chunk_frames = 1

    def __init__(self, pieces, topology, atom_indices, comm, n_atoms, h5md_group=None, relative_to=None):
        self.pieces, self.topology, self.comm = pieces, topology, comm
        self.atom_indices = np.asarray(atom_indices, np.int64)
        self.h5md_group, self.relative_to = h5md_group, relative_to
        self.n_frames, self.n_atoms = pieces[-1].stop, n_atoms
        self.starts = np.array([piece.start for piece in pieces], np.int64)
        self.universes = {}
        self.current = None
        if len(pieces) == 1 and pieces[0].format == "H5MD" and comm.size > 1:
            self._open(0, parallel=True)  # collective: every rank opens the file

    @property
    def opened(self):
        paths = [self.pieces[number].path for number in self.universes]
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
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                universe = MDAnalysis.Universe(self.topology, piece.path, **kwargs)
        except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
            raise InputError(f"{piece.path}: MDAnalysis cannot read it with {self.topology} ({error})") from None
        universe.h5mdtool_atoms = universe.atoms[self.atom_indices]
        self.universes[number] = universe
        return universe

    def open_for(self, frames):
        """Build now the Universes of the files holding *frames* (each parses the topology)."""
        frames = np.asarray(frames)
        for number, piece in enumerate(self.pieces):
            if number not in self.universes and np.any((frames >= piece.start) & (frames < piece.stop)):
                self._open(number)

    def frame(self, number):
        """Load frame *number*; returns (the atoms' positions in Angstrom, time in ps)."""
        piece_number = int(np.searchsorted(self.starts, number, side="right")) - 1
        universe = self.universes.get(piece_number) or self._open(piece_number)
        piece = self.pieces[piece_number]
        ts = universe.trajectory[number - piece.start + piece.skip]
        return universe.h5mdtool_atoms.positions, ts.time

    def read(self, start, stop):
        positions, times = zip(*(self.frame(i) for i in range(start, stop)))
        return np.array(positions, dtype=np.float64), np.array(times, dtype=np.float64)

    def close(self):
        for universe in self.universes.values():
            universe.trajectory.close()


_READER_CLASSES = {}


def mdanalysis_reader(piece, h5md_group=None):
    """The MDAnalysis reader class for *piece*, or None for MDAnalysis's own choice.

    XTC/TRR: a reader that takes the offsets rank 0 computed, or that this rank scans for a
    part (nothing written beside the file); H5MD with *h5md_group*: a reader of that particle group (MDAnalysis reads the
    first one). Each class has a format name of its own, so MDAnalysis's registry of readers
    is otherwise unchanged.
    """
    if piece.format in ("XTC", "TRR"):
        return _reader_with_offsets(piece.format, piece.frame_offsets())
    if piece.format == "H5MD" and h5md_group is not None:
        if h5md_group not in _READER_CLASSES:
            _READER_CLASSES[h5md_group] = _h5md_reader(h5md_group)
        return _READER_CLASSES[h5md_group]
    return None


def _reader_with_offsets(fmt, offsets):
    """An MDAnalysis XTC/TRR reader class that takes the given offsets (no offset files)."""
    from MDAnalysis.coordinates.TRR import TRRReader
    from MDAnalysis.coordinates.XTC import XTCReader

    base = XTCReader if fmt == "XTC" else TRRReader

    def _load_offsets(self):
        self._xdr.set_offsets(offsets)

    return type(f"H5mdTool{fmt}Reader", (base,), {"format": f"H5MDTOOL-{fmt}", "_load_offsets": _load_offsets})


def _h5md_reader(group):
    """An MDAnalysis H5MD reader class that reads particle group *group*."""
    from MDAnalysis.coordinates.H5MD import H5MDReader

    def open_trajectory(self):
        H5MDReader.open_trajectory(self)
        self._particle_group = self._file["particles"][group]

    def __setstate__(self, state):
        H5MDReader.__setstate__(self, state)
        self._particle_group = self._file["particles"][group]

    return type("H5mdToolH5MDReader", (H5MDReader,),
                {"format": f"H5MDTOOL-H5MD-{group}", "open_trajectory": open_trajectory, "__setstate__": __setstate__})
