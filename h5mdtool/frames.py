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

- :class:`TrajectoryFrames`: any format through :class:`h5mdtool.formats.TrajectoryReader`,
  with the metadata rank 0 scanned (nothing is written beside the input). An H5MD file is
  read with MPI-IO on several ranks, a span of atoms at a time (:mod:`h5mdtool.formats.h5md`).
- :class:`ManifestFrames`: a split trajectory; a part is opened only when one of its frames
  is read, so each rank opens only the parts holding its frames.
- :class:`MDAnalysisFrames`: MDAnalysis Universes read frame by frame (the papers' way).
"""

import os
import warnings

import numpy as np

from .errors import InputError, mark_collective
from .manifest import is_manifest, read_manifest
from .formats import TrajectoryIndex, TrajectoryReader, detect_format, load_decoders, scan, scan_segment
from .mpi import SerialComm, root_call


class TrajectoryFrames:
    """Selected atoms' positions (nm) and times (ps) of a scanned trajectory, any format.

    Frames are those holding positions. An H5MD file is opened with MPI-IO by every rank of
    *comm* at once (collective) when *comm* has several ranks.
    """

    scale = 10.0

    def __init__(self, index, atom_indices, block_frames, comm=None):
        self.index = index
        self.frames = np.flatnonzero(index.fields["positions"])
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
                    "offsets": "scanned by rank 0 and broadcast"}
        chunks = self.element["chunks"]
        return {
            "format": "H5MD", "layout": "chunked" if chunks else "contiguous",
            "chunks": list(chunks) if chunks else None, "compression": self.element["compression"],
            "compression_opts": self.element["compression_opts"], "dtype": str(np.dtype(self.element["dtype"])),
            "particles_group": self.index.segments[0].details["group"].split("/", 1)[1], "mpi_io": self.mpi_io,
        }

    def read(self, start, stop):
        if stop - start > self.block.capacity:
            self.block = self.reader.new_block(stop - start)
        self.reader.read(self.frames[start:stop], self.block)
        n = self.block.n
        times = self.block.time[:n].copy()
        if self.index.time is None:  # MDAnalysis's default: dt = 1 ps
            times = np.arange(start, stop, dtype=np.float64)
        return self.block.positions[:n], times

    def close(self):
        self.reader.close()


def _part_source(part, n_atoms, atom_indices, block_frames):
    source = TrajectoryFrames(TrajectoryIndex([scan_segment(part.path)]), atom_indices, block_frames)
    if source.n_frames != part.n_frames or source.n_atoms != n_atoms:
        source.close()
        raise InputError(
            f"{part.path}: {source.n_frames} frames of {source.n_atoms} atoms, but the manifest "
            f"lists {part.n_frames} frames of {n_atoms} atoms"
        )
    return source


class ManifestFrames:
    """Frames of a split trajectory; parts are opened only when one of their frames is read."""

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

    def read(self, start, stop):
        positions, times = [], []
        for part in self.manifest.parts_for(start, stop):
            source = self._source(part)
            p, t = source.read(max(start, part.start) - part.start, min(stop, part.stop) - part.start)
            positions.append(p if source.scale == self.scale else p * (source.scale / self.scale))
            times.append(t)
        if not positions:
            return np.empty((0, len(self.atom_indices), 3), np.float32), np.empty(0)
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


def _inspect(path):
    """Format and index of a trajectory file, scanned on rank 0."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    index = scan([path])
    return index.formats[0], index.n_atoms, index


def open_frames(path, atom_indices, block_frames, comm):
    """Open *path* for the blocks engine; rank 0 reads shared metadata once and broadcasts.

    Raises
    ------
    InputError
        Missing or unreadable input or parts (on every rank together).
    """
    if is_manifest(path):
        return ManifestFrames(root_call(comm, checked_manifest, path), atom_indices, block_frames)
    if comm.rank != 0:
        load_decoders([path])
    _, _, index = root_call(comm, _inspect, path)
    return TrajectoryFrames(index, atom_indices, block_frames, comm)


class MDAnalysisFrames:
    """Frames through MDAnalysis Universes, one frame at a time (the papers' way).

    Positions are in Angstrom (``scale`` 1). XTC/TRR readers get the offsets rank 0 computed
    instead of building them on every rank and writing offset and lock files beside the
    trajectory. An H5MD file is opened with ``driver="mpio"`` on several ranks.
    """

    scale = 1.0
    chunk_frames = 1

    def __init__(self, path, topology, selection, comm, index=None, manifest=None):
        self.path, self.topology, self.selection, self.comm = path, topology, selection, comm
        self.manifest = manifest
        self.universes = {}
        if manifest is not None:
            self.n_frames, self.n_atoms = manifest.n_frames, manifest.n_atoms
            self._describe = {"format": manifest.format, "layout": "split", "parts": len(manifest.parts),
                              "manifest": manifest.path}
        else:
            universe = self._universe(path, index, comm)
            self.universes[path] = universe
            self.n_frames, self.n_atoms = universe.trajectory.n_frames, universe.atoms.n_atoms
            if index.formats[0] == "H5MD":
                self._describe = {"format": "H5MD", "mpi_io": comm.size > 1}
            else:
                self._describe = {"format": index.formats[0], "layout": "single shared file",
                                  "offsets": "scanned by rank 0 and broadcast"}
        self._describe["reader"] = "MDAnalysis"

    @property
    def opened(self):
        if self.manifest is None:
            return [self.path]
        return [os.path.relpath(path, os.path.dirname(self.manifest.path)) for path in self.universes]

    def describe(self):
        return dict(self._describe)

    def _universe(self, path, index, comm):
        import MDAnalysis

        kwargs = {}
        if index is not None and index.segments[0].format in ("XTC", "TRR"):
            kwargs["format"] = _reader_with_offsets(index.segments[0].format, index.segments[0].offsets[:-1])
        elif (index is None or index.formats[0] == "H5MD") and comm.size > 1:
            kwargs.update(driver="mpio", comm=comm)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                universe = MDAnalysis.Universe(self.topology, path, **kwargs)
        except Exception as error:  # noqa: BLE001 - MDAnalysis raises many types here
            raise InputError(f"{path}: MDAnalysis cannot read it with {self.topology} ({error})") from None
        universe.h5mdtool_group = universe.select_atoms(self.selection)
        return universe

    def _locate(self, frame):
        if self.manifest is None:
            return self.universes[self.path], frame
        part = self.manifest.parts_for(frame, frame + 1)[0]
        if part.path not in self.universes:
            index = None
            if detect_format(part.path) != "H5MD":
                index = TrajectoryIndex([scan_segment(part.path)])
            self.universes[part.path] = self._universe(part.path, index, SerialComm())
        return self.universes[part.path], frame - part.start

    def frame(self, number):
        """Load frame *number*; returns (selected positions in Angstrom, time in ps)."""
        universe, local = self._locate(number)
        ts = universe.trajectory[local]
        return universe.h5mdtool_group.positions, ts.time

    def read(self, start, stop):
        positions, times = zip(*(self.frame(i) for i in range(start, stop)))
        return np.array(positions, dtype=np.float64), np.array(times, dtype=np.float64)

    def close(self):
        for universe in self.universes.values():
            universe.trajectory.close()


def _reader_with_offsets(fmt, offsets):
    """An MDAnalysis XTC/TRR reader class that takes the given offsets (no offset files)."""
    from MDAnalysis.coordinates.TRR import TRRReader
    from MDAnalysis.coordinates.XTC import XTCReader

    base = XTCReader if fmt == "XTC" else TRRReader

    def _load_offsets(self):
        self._xdr.set_offsets(offsets)

    # a format name of its own keeps MDAnalysis's registry of readers unchanged
    return type(f"H5mdTool{fmt}Reader", (base,), {"format": f"H5MDTOOL-{fmt}", "_load_offsets": _load_offsets})


def open_mdanalysis(path, topology, selection, comm, n_topology_atoms):
    """Open *path* for the frames engine; rank 0 scans shared XTC/TRR/DCD files once.

    Raises
    ------
    InputError
        Missing or unreadable input or parts, or a trajectory whose atom count is not
        *n_topology_atoms* (checked on rank 0 before any Universe is built, so every rank
        stops together).
    """
    if is_manifest(path):
        manifest = root_call(comm, checked_manifest, path)
        fmt, n_atoms, index = manifest.format, manifest.n_atoms, None
    else:
        manifest = None
        fmt, n_atoms, index = root_call(comm, _inspect, path)
    if n_atoms != n_topology_atoms:
        raise mark_collective(atom_count_error(topology, n_topology_atoms, path, n_atoms))
    return MDAnalysisFrames(path, topology, selection, comm, index=index, manifest=manifest)


def atom_count_error(topology, n_topology_atoms, path, n_atoms):
    return InputError(f"{topology} has {n_topology_atoms} atoms but {path} has {n_atoms}")
