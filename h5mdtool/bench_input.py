"""What ``bench rmsd`` reads: one description of the input, made once on rank 0.

:func:`inspect_input` looks at the input on rank 0 (an H5MD file, one or several
XTC/TRR/DCD segments, or a split manifest or its directory) and returns an
:class:`InputInfo` that is broadcast to every rank: frame and atom counts, XTC/TRR offsets,
the parts of a split trajectory, the H5MD particle group and layout, and each file's size
and modification time for the report. :func:`open_source` then opens, on every rank, the
frame source of the chosen engine (:mod:`h5mdtool.frames`).
"""

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError, UsageError, mark_collective
from .frames import (H5MDFrames, ManifestFrames, MDAnalysisFrames, Piece, TrajectoryFrames, checked_manifest,
                     h5md_group)
from .manifest import MANIFEST_NAME, is_manifest
from .sources import detect_format, scan


@dataclass
class InputInfo:
    """The input of one benchmark run, as rank 0 found it (picklable, broadcast).

    Attributes
    ----------
    kind : {"H5MD", "split", "shared"}
        One H5MD file, a split trajectory, or XTC/TRR/DCD file(s) read by every rank.
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
    index : TrajectoryIndex or None
        XTC/TRR/DCD segments with rank 0's offsets.
    manifest : Manifest or None
    h5md : dict or None
        Dataset facts for the bytes-read estimate (itemsize, compressed, stored bytes).
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

    def part_edges(self):
        """First frame of each part and the frame count (split inputs), else None."""
        if self.manifest is None:
            return None
        return [part.start for part in self.manifest.parts] + [self.n_frames]

    def pieces(self):
        """The files as :class:`~h5mdtool.frames.Piece` objects (frames engine, reference reads)."""
        if self.manifest is not None:
            return [Piece(part.path, self.manifest.format, part.start, part.stop) for part in self.manifest.parts]
        if self.index is not None:
            return [Piece(segment.path, segment.format, int(start), int(stop), segment.skip, segment.offsets)
                    for segment, start, stop in zip(self.index.segments, self.index.starts[:-1], self.index.starts[1:])]
        return [Piece(self.path, "H5MD", 0, self.n_frames)]

    def bytes_read(self, frames, first_atom, last_atom, whole_frames=False):
        """Bytes of the input that reading *frames* takes (see docs/benchmark.md).

        Exact for XTC/TRR (frame offsets) and DCD (fixed frame size); for H5MD the atom span
        ``[first_atom, last_atom)`` of each frame, or the stored bytes of the chunks
        touched when the dataset is compressed; for parts, the part's size times the
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
            if facts["compressed"]:
                chunks = len(np.unique(frames // self.chunk_frames))
                return int(round(chunks * facts["stored_bytes"] / max(facts["n_chunks"], 1)))
            return int(len(frames) * (last_atom - first_atom) * 3 * facts["itemsize"])
        total = 0
        for piece, segment in zip(self.pieces(), self.index.segments):
            mine = frames[(frames >= piece.start) & (frames < piece.stop)] - piece.start + piece.skip
            if len(mine) == 0:
                continue
            if segment.offsets is not None:
                ends = np.append(segment.offsets[1:], segment.size)
                total += int((ends[mine] - segment.offsets[mine]).sum())
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


def inspect_input(paths, group=None):
    """Describe the input (rank 0): an H5MD file, XTC/TRR/DCD segments, or a split manifest.

    Parameters
    ----------
    paths : sequence of str
        One H5MD file, a manifest (or its directory), or XTC/TRR/DCD segments in order.
    group : str, optional
        H5MD particle group (default: the first listed, as MDAnalysis reads).

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
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise UsageError("give the trajectory to read (INPUT)")
    manifests = [manifest_path(p) for p in paths]
    if any(manifests) and len(paths) > 1:
        raise UsageError("a split manifest is a whole trajectory: give it alone")
    if len(paths) == 1 and manifests[0]:
        return _inspect_manifest(manifests[0], group)
    for path in paths:
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory without {MANIFEST_NAME} (not a split trajectory)")
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
    formats = [detect_format(p) for p in paths]
    if len(paths) == 1 and formats[0] == "H5MD":
        return _inspect_h5md(paths[0], group)
    if group is not None:
        raise UsageError("--group chooses the particle group of one H5MD file; this input is " + ", ".join(formats))
    index = scan(paths)
    layout = {"layout": "single shared file" if len(paths) == 1 else f"{len(paths)} segments",
              "offsets": "scanned by rank 0 and broadcast"}
    return InputInfo(kind="shared", path=os.path.abspath(paths[0]), format=",".join(index.formats),
                     n_frames=index.n_frames, n_atoms=index.n_atoms, files=[_stat(p) for p in paths],
                     layout=layout, index=index)


def _inspect_manifest(path, group):
    manifest = checked_manifest(path)
    if group is not None and manifest.format != "H5MD":
        raise UsageError(f"--group chooses an H5MD particle group; the parts of {path} are {manifest.format}")
    layout = {"layout": "split", "parts": len(manifest.parts), "manifest": manifest.path}
    return InputInfo(kind="split", path=manifest.path, format=manifest.format, n_frames=manifest.n_frames,
                     n_atoms=manifest.n_atoms, files=[_stat(part.path) for part in manifest.parts],
                     layout=layout, h5md_group=group, manifest=manifest)


def _inspect_h5md(path, group):
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            name = h5md_group(path, handle, group)
            value = handle["particles"][name]["position"]["value"]
            if value.ndim != 3 or value.shape[2] != 3:
                raise InputError(f"{path}: {value.name} has shape {value.shape}, not (frames, atoms, 3)")
            chunks = value.chunks
            n_frames = int(value.shape[0])
            layout = {
                "layout": "chunked" if chunks else "contiguous", "chunks": list(chunks) if chunks else None,
                "compression": value.compression, "compression_opts": value.compression_opts,
                "shuffle": bool(value.shuffle), "scaleoffset": value.scaleoffset, "dtype": str(value.dtype),
                "particles_group": name,
            }
            chunk_frames = chunks[0] if chunks else 1
            facts = {"itemsize": value.dtype.itemsize, "compressed": bool(value.compression or value.scaleoffset),
                     "stored_bytes": int(value.id.get_storage_size()),
                     "n_chunks": -(-n_frames // chunk_frames) if n_frames else 0}
            n_atoms = int(value.shape[1])
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise InputError(f"{path}: not a readable H5MD file ({str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
    if n_frames < 1:
        raise InputError(f"{path}: position/value holds no frames")
    return InputInfo(kind="H5MD", path=os.path.abspath(path), format="H5MD", n_frames=n_frames, n_atoms=n_atoms,
                     files=[_stat(path)], layout=layout, chunk_frames=chunk_frames, h5md_group=name, h5md=facts)


def open_source(info, atom_indices, block_frames, comm, engine, topology):
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
    """
    if engine == "frames":
        relative = os.path.dirname(info.manifest.path) if info.manifest is not None else None
        return MDAnalysisFrames(info.pieces(), topology, atom_indices, comm, info.n_atoms,
                                h5md_group=info.h5md_group, relative_to=relative)
    if info.kind == "H5MD":
        return H5MDFrames(info.path, atom_indices, comm, block_frames, group=info.h5md_group)
    if info.kind == "split":
        return ManifestFrames(info.manifest, atom_indices, block_frames)
    return TrajectoryFrames(info.index, atom_indices, block_frames)


def frame_times(info):
    """Time (ps) of every frame of the input (rank 0; for -b/-e/--dt)."""
    from .frametimes import h5md_times, segment_times
    from .sources import scan_segment

    if info.kind == "H5MD":
        return h5md_times(info.path, info.h5md_group)
    if info.kind == "split":
        times = []
        for part in info.manifest.parts:
            if info.manifest.format == "H5MD":
                import h5py

                with h5py.File(part.path, "r") as handle:
                    name = h5md_group(part.path, handle, info.h5md_group)
                times.append(h5md_times(part.path, name))
            else:
                times.append(segment_times(scan_segment(part.path)))
        return np.concatenate(times)
    times = []
    for segment in info.index.segments:
        if segment.format == "H5MD":
            times.append(h5md_times(segment.path, segment.h5md["group"].split("/", 1)[1])[segment.skip:])
        else:
            times.append(segment_times(segment)[segment.skip:])
    return np.concatenate(times)


def atom_count_error(topology, n_topology_atoms, info):
    """The error for a topology and a trajectory whose atom counts differ (raised on every rank)."""
    return mark_collective(InputError(f"{topology} has {n_topology_atoms} atoms but {info.path} has {info.n_atoms}"))
