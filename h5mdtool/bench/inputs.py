"""What ``bench rmsd`` reads: one description of the input, the same on every rank.

:func:`inspect_input` looks at the input (an H5MD file, one or several segments of any
format the reading stack reads, or a split manifest or its directory), every rank together,
and returns on every rank the same :class:`InputInfo`: the scanned
:class:`~h5mdtool.formats.TrajectoryIndex` (frames, atoms, steps, times, XTC/TRR offsets,
the H5MD particle group), the parts of a split trajectory, the H5MD layout, and each file's
size and modification time for the report. :func:`open_source` then opens, on every rank,
the frame source of the chosen engine (:mod:`h5mdtool.bench.frames`).
"""

import os
from dataclasses import dataclass, field

import numpy as np

from ..formats import TrajectoryIndex, detect_format, scan, scan_segment
from ..formats.base import hdf5_open_error
from ..h5md.topology import carries_topology, resolve_topology
from ..parallel.errors import InputError, UsageError, mark_collective
from ..parallel.mpi import SerialComm, is_parallel, root_call, same_on_every_rank
from ..subfiles.manifest import MANIFEST_NAME, is_manifest, read_manifest
from .frames import (
    ManifestFrames, MDAnalysisFrames, Piece, TrajectoryFrames, checked_manifest, checked_part_scans, position_frames,
    position_times, refuse_frames_without_positions
)


@dataclass
class InputInfo:
    """The input of one benchmark run, as rank 0 found it (picklable, broadcast).

    Frames are numbered among those holding positions (:mod:`h5mdtool.bench.frames`): all frames,
    except in H5MD files whose velocities or forces have steps of their own.

    Attributes
    ----------
    kind : {"H5MD", "split", "shared"}
        One H5MD file, a split trajectory, or segment file(s) of another format (or several
        H5MD files) read by every rank.
    path : str
        The input as given (absolute; the manifest for a split trajectory; the first
        segment when there are several).
    format : str
    n_frames, n_atoms : int
    files : list of dict
        ``path``, ``size`` (bytes) and ``mtime`` of every file holding frames.
    layout : dict
        For the report: ``layout`` and format-specific fields (chunks, compression, parts...).
    chunk_frames : int
        Frames per H5MD chunk (1 otherwise).
    h5md_group : str or None
        The H5MD particle group read (None: the first listed, for the parts of a split
        trajectory).
    index : TrajectoryIndex or None
        Rank 0's scan of the input (None for a split trajectory: each part is scanned by
        the rank reading it).
    manifest : Manifest or None
    h5md : dict or None
        Dataset facts for the bytes-read estimate (itemsize, filtered, stored bytes).
    part_scans : dict
        Parts of a split trajectory this process scanned (:meth:`locate`): path -> Segment,
        so that the run checks and reads them without a second scan.
    """

    kind: str
    path: str
    format: str
    n_frames: int
    n_atoms: int
    files: list
    layout: dict
    chunk_frames: int = 1
    h5md_group: str = None
    index: object = None
    manifest: object = None
    h5md: dict = field(default=None, repr=False)
    part_scans: dict = field(default_factory=dict, repr=False)

    def part_edges(self):
        """First frame of each part and the frame count (split inputs), else None."""
        if self.manifest is None:
            return None
        return [part.start for part in self.manifest.parts] + [self.n_frames]

    def pieces(self):
        """The files as :class:`~h5mdtool.bench.frames.Piece` objects (frames engine, files opened)."""
        if self.manifest is not None:
            return [Piece(part.path, self.manifest.format, part.start, part.stop) for part in self.manifest.parts]
        present = self.index.fields["positions"]
        bounds = np.concatenate([[0], np.cumsum([present[a:b].sum() for a, b in
                                                 zip(self.index.starts[:-1], self.index.starts[1:])])])
        return [Piece(segment.path, segment.format, int(start), int(stop), segment.skip,
                      segment.offsets)
                for segment, start, stop in zip(self.index.segments, bounds[:-1], bounds[1:])]

    def locate(self, frame):
        """The :class:`~h5mdtool.formats.TrajectoryIndex` holding *frame* and its frame number
        there (a split trajectory's part is scanned for it)."""
        if self.manifest is None:
            return self.index, int(position_frames(self.index)[frame])
        part = self.manifest.parts_for(frame, frame + 1)[0]
        self.part_scans.update(checked_part_scans(self.manifest, [frame], self.h5md_group, self.part_scans))
        index = TrajectoryIndex([self.part_scans[part.path]])
        return index, int(position_frames(index)[frame - part.start])

    def bytes_read(self, frames, first_atom, last_atom, whole_frames=False):
        """Bytes of the input that reading *frames* takes (see docs/benchmark.md).

        Exact for XTC/TRR (frame offsets) and formats of fixed frame size (DCD); for H5MD
        the atom span ``[first_atom, last_atom)`` of each frame, or the stored bytes of the
        chunks touched when the dataset is filtered; for parts, the part's size times the
        fraction of its frames read. *whole_frames*: the reader reads every atom (the
        frames engine): the file's size times the fraction of frames read.
        """
        frames = np.asarray(frames, np.int64)
        if len(frames) == 0:
            return 0
        if whole_frames or self.kind == "split":
            return int(round(sum(_file_fraction(piece, size, frames)
                                 for piece, size in zip(self.pieces(), (f["size"] for f in self.files)))))
        if self.kind == "H5MD":
            facts = self.h5md
            if facts["filtered"]:
                chunks = len(np.unique(frames // self.chunk_frames))
                return int(round(chunks * facts["stored_bytes"] / max(facts["n_chunks"], 1)))
            return int(len(frames) * (last_atom - first_atom) * 3 * facts["itemsize"])
        numbers, local = self.index.locate(position_frames(self.index)[frames])
        total = 0
        for number in np.unique(numbers):
            segment, mine = self.index.segments[int(number)], local[numbers == number]
            if segment.offsets is not None:  # frame starts, then the end of the last frame
                total += int((segment.offsets[mine + 1] - segment.offsets[mine]).sum())
            else:
                total += int(round(len(mine) * segment.size / segment.n_frames))
        return total


def _file_fraction(piece, size, frames):
    count = np.count_nonzero((frames >= piece.start) & (frames < piece.stop))
    return size * count / max(piece.stop - piece.start, 1)


def _stat(path):
    stat = os.stat(path)
    return {"path": os.path.abspath(path), "size": stat.st_size, "mtime": stat.st_mtime}


def manifest_path(path):
    """*path* if it names a split manifest (``.json``, or a directory holding ``manifest.json``), else None."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        return os.path.join(path, MANIFEST_NAME)
    return path if is_manifest(path) else None


def offsets_origin(segments, parallel):
    """How the frames of *segments* were found, for reports: scanned (by all ranks together
    when *parallel*), or taken from the offsets cache (:mod:`h5mdtool.formats.offsetcache`)."""
    scanned = "scanned by all ranks together" if parallel else "scanned"
    cached = sum(1 for segment in segments if segment.cached)
    if cached == 0:
        return scanned
    if cached == len(segments):
        return "from the offsets cache"
    return f"{scanned}; {cached} of {len(segments)} files from the offsets cache"


def inspect_input(paths, group=None, format=None, comm=None):
    """Describe the input: an H5MD file, segments of one trajectory, or a split manifest.

    Every rank of *comm* calls it and gets the same :class:`InputInfo`: XTC and TRR segments
    are scanned by all ranks together (:func:`h5mdtool.formats.scan`), an H5MD file's
    metadata and layout are read by rank 0 (one open) and broadcast, as are a manifest and
    the segments of other formats. Errors are raised by every rank together.

    Parameters
    ----------
    paths : sequence of str
        One H5MD file, a manifest (or its directory), or the segments of one trajectory in
        order (any format of :mod:`h5mdtool.formats`).
    group : str, optional
        H5MD particle group (default: the first listed, as MDAnalysis reads).
    format : str, optional
        Read every segment as this format (``LAMMPS`` for a LAMMPS DCD), whatever its extension.
    comm : communicator, optional
        Default: this process alone.

    Returns
    -------
    InputInfo

    Raises
    ------
    UsageError
        A manifest given with other inputs; ``group`` for an input that is not H5MD.
    InputError
        Missing, unreadable or inconsistent input.
    """
    comm = SerialComm() if comm is None else comm
    paths = [os.fspath(p) for p in paths]
    manifest, formats = root_call(comm, _classify, paths, group, format)
    if manifest is not None:
        return root_call(comm, _inspect_manifest, manifest, group)
    if len(paths) == 1 and formats[0] == "H5MD":
        index, layout, facts = root_call(comm, _inspect_h5md, paths[0], group)
        return _h5md_input(paths[0], index, layout, facts)
    index = scan(paths, group=group, format=format, comm=comm)
    with same_on_every_rank(comm):
        _check_positions(index)
    n_frames = len(position_frames(index))
    layout = {"layout": "single shared file" if len(paths) == 1 else f"{len(paths)} segments",
              "offsets": offsets_origin(index.segments, is_parallel(comm))}
    return InputInfo(kind="shared", path=os.path.abspath(paths[0]), format=",".join(index.formats),
                     n_frames=n_frames, n_atoms=index.n_atoms, files=[_stat(p) for p in paths],
                     layout=layout, h5md_group=group, index=index)


def resolve_input_topology(paths, topology=None):
    """The topology of a bench input and where it comes from, as
    :func:`~h5mdtool.h5md.topology.resolve_topology` finds it, for a split manifest too.

    ``split`` stores the same topology in every H5MD part when its input carried one (or
    was given ``--topology``), so a manifest whose first part carries a topology needs no
    ``--topology`` either. A manifest that cannot be read is left to :func:`inspect_input`
    to report.
    """
    manifest = manifest_path(paths[0]) if topology is None and len(paths) == 1 else None
    if manifest is not None:
        try:
            parts = read_manifest(manifest)
        except InputError:
            parts = None
        if parts is not None and parts.format == "H5MD" and parts.parts and carries_topology(parts.parts[0].path):
            first = parts.parts[0].path
            return first, f"stored in {first}"
    return resolve_topology(paths, topology)


def _classify(paths, group, format):
    """Rank 0: the manifest *paths* name (or None) and the format of each path, checked."""
    if not paths:
        raise UsageError("give the trajectory to read (INPUT)")
    manifests = [manifest_path(p) for p in paths]
    if any(manifests) and len(paths) > 1:
        raise UsageError("a split manifest is a whole trajectory: give it alone")
    if len(paths) == 1 and manifests[0]:
        if format is not None:
            raise UsageError("--format names the format of trajectory files; a split manifest names its parts' own")
        return manifests[0], None
    for path in paths:
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory without {MANIFEST_NAME} (not a split trajectory)")
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
    formats = [detect_format(p, format) for p in paths]
    if group is not None and any(f != "H5MD" for f in formats):
        raise InputError("--group chooses the particle group of H5MD files; this input is " + ", ".join(formats))
    return None, formats


def _check_positions(index):
    """Refuse a segment with frames that hold no positions (a TRR with velocities or forces
    only in some frames). MDAnalysis and the frames engine number every frame of such a file;
    H5MD segments are exempt: their frames without positions (another element's own steps)
    are not frames of MDAnalysis's reader, which numbers the rows of ``position``.

    Raises
    ------
    InputError
        Naming the file and its first frame without positions.
    """
    for segment in index.segments:
        if segment.format != "H5MD":
            refuse_frames_without_positions(segment)


def _inspect_manifest(path, group):
    manifest = checked_manifest(path)
    if group is not None and manifest.format != "H5MD":
        raise InputError(f"--group chooses an H5MD particle group; the parts of {path} are {manifest.format}")
    layout = {"layout": "split", "parts": len(manifest.parts), "manifest": manifest.path}
    return InputInfo(kind="split", path=manifest.path, format=manifest.format, n_frames=manifest.n_frames,
                     n_atoms=manifest.n_atoms, files=[_stat(part.path) for part in manifest.parts],
                     layout=layout, h5md_group=group, manifest=manifest)


def _inspect_h5md(path, group):
    """Rank 0: an H5MD file's scan and the layout of its positions (creation properties),
    from one open of the file.

    Returns
    -------
    (TrajectoryIndex, dict, dict)
        The index, the layout for the report, and the dataset facts of
        :attr:`InputInfo.h5md` (the stored bytes only of a filtered dataset: HDF5 counts
        them chunk by chunk).
    """
    import h5py

    from ..check.lint import dataset_filters, filters_phrase
    from ..formats.base import file_stat

    file_stat(path)
    try:
        handle = h5py.File(path, "r")
    except (OSError, ValueError) as error:
        raise hdf5_open_error(path, error) from None
    with handle:
        index = TrajectoryIndex([scan_segment(path, group=group, handle=handle)])
        _check_positions(index)
        segment = index.segments[0]
        element = segment.details["elements"]["positions"]
        try:
            value = handle[element["path"]]
            filters = [name for _, name in dataset_filters(value)]
            shuffle, scaleoffset = bool(value.shuffle), value.scaleoffset
            stored = int(value.id.get_storage_size()) if filters else None
        except (OSError, KeyError, ValueError, TypeError) as error:
            raise hdf5_open_error(path, error) from None
    chunks = element["chunks"]
    dtype = np.dtype(element["dtype"])
    layout = {
        "layout": "chunked" if chunks else "contiguous", "chunks": list(chunks) if chunks else None,
        "compression": filters_phrase(filters, element["compression_opts"] if "gzip" in filters else None),
        "compression_opts": element["compression_opts"],
        "shuffle": shuffle, "scaleoffset": scaleoffset, "filters": filters, "dtype": str(dtype),
        "particles_group": segment.details["group"].split("/", 1)[1],
    }
    chunk_frames = int(chunks[0]) if chunks else 1
    facts = {"itemsize": dtype.itemsize, "filtered": bool(filters), "stored_bytes": stored,
             "n_chunks": -(-len(position_frames(index)) // chunk_frames)}
    return index, layout, facts


def _h5md_input(path, index, layout, facts):
    """The :class:`InputInfo` of one H5MD file (see :func:`_inspect_h5md`)."""
    chunks = layout["chunks"]
    return InputInfo(kind="H5MD", path=os.path.abspath(path), format="H5MD", n_frames=len(position_frames(index)),
                     n_atoms=index.n_atoms, files=[_stat(path)], layout=layout,
                     chunk_frames=int(chunks[0]) if chunks else 1, h5md_group=layout["particles_group"],
                     index=index, h5md=facts)


def open_source(info, atom_indices, block_frames, comm, engine, topology, scans=None):
    """Open the frames of *info* on this rank (every rank calls it; MPI-IO opens are collective).

    Parameters
    ----------
    info : InputInfo
    atom_indices : array of int
        The atoms read (increasing).
    block_frames : int
        Frames read at once (blocks engine buffer size).
    comm : communicator
    engine : {"blocks", "frames"}
    topology : str
        Topology file (frames engine: every Universe parses it).
    scans : dict, optional
        A split trajectory's parts this rank scanned already (:func:`~h5mdtool.bench.frames.checked_part_scans`).
    """
    scans = scans or {}
    if engine == "frames":
        relative = os.path.dirname(info.manifest.path) if info.manifest is not None else None
        # times from the scan, as the blocks engine reports them (a split's parts are scanned apart)
        times = position_times(info.index) if info.kind != "split" else None
        pieces = info.pieces()
        for piece in pieces:
            scanned = scans.get(piece.path)
            if scanned is not None and scanned.offsets is not None:
                piece.offsets = scanned.offsets
        return MDAnalysisFrames(pieces, topology, atom_indices, comm, info.n_atoms,
                                h5md_group=info.h5md_group, relative_to=relative, times=times)
    if info.kind == "split":
        return ManifestFrames(info.manifest, atom_indices, block_frames, info.h5md_group, scans)
    return TrajectoryFrames(info.index, atom_indices, block_frames, comm)


def frame_times(info):
    """Time (ps) of every frame of the input (rank 0; for -b/-e/--dt), from the scan.

    A split trajectory's parts are scanned one by one; parts that record no time count
    their own frames from 0 ps, as MDAnalysis reading the part does.
    """
    if info.kind != "split":
        return position_times(info.index)
    scans = checked_part_scans(info.manifest, np.arange(info.n_frames), info.h5md_group)
    return np.concatenate([position_times(TrajectoryIndex([scans[part.path]])) for part in info.manifest.parts])


def atom_count_error(topology, n_topology_atoms, info):
    """The error for a topology and a trajectory whose atom counts differ (raised on every rank)."""
    return mark_collective(InputError(f"{topology} has {n_topology_atoms} atoms but {info.path} has {info.n_atoms}"))
