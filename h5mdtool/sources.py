"""Trajectory inputs read through MDAnalysis's own low-level format libraries.

Two phases, following the MPI rules of the project:

* :func:`scan` runs on rank 0 only. It opens each segment once, counts frames, computes the
  XTC/TRR byte offsets, reads first and last steps and resolves overlaps between segments.
  The result, a :class:`TrajectoryIndex`, is small and picklable and is broadcast to every
  rank. Nothing is ever written beside the inputs (no offset files, no locks).
* :class:`TrajectoryReader` runs on every rank. It opens only the segments holding the
  frames it is asked for and fills a reusable :class:`FrameBlock` in h5mdtool's units
  (nm, ps, nm/ps, kJ/(mol nm)), a block of frames at a time.

XTC and TRR frames are decoded by ``MDAnalysis.lib.formats.libmdaxdr`` straight into the
block's buffers; DCD blocks are read with ``libdcd.DCDFile.readframes``.
"""

import importlib
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError, OverlapError, UsageError

#: File extensions h5mdtool reads as trajectories, mapped to format names.
FORMATS = {".xtc": "XTC", ".trr": "TRR", ".dcd": "DCD", ".h5md": "H5MD", ".h5": "H5MD"}

#: H5MD element -> (FrameBlock field, MDAnalysis unit kind, h5mdtool unit).
H5MD_ELEMENTS = {
    "position": ("positions", "length", "nm"),
    "velocity": ("velocities", "speed", "nm/ps"),
    "force": ("forces", "force", "kJ/(mol*nm)"),
}

#: How segment overlaps are handled: refuse them, or keep the first copy of each step.
OVERLAP_POLICIES = ("error", "drop")

ANGSTROM_PER_NM = 10.0


def detect_format(path):
    """Return the trajectory format of *path* from its extension.

    Raises
    ------
    InputError
        If the extension is not one of :data:`FORMATS`.
    """
    extension = os.path.splitext(str(path))[1].lower()
    try:
        return FORMATS[extension]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise InputError(
            f"{path}: unknown trajectory extension {extension or '(none)'!r}; "
            f"h5mdtool reads {known}"
        ) from None


def load_decoders(paths):
    """Import the MDAnalysis modules that decode *paths* (chosen by extension); never raise.

    Ranks other than 0 call this while rank 0 scans the inputs. Importing MDAnalysis takes
    about 0.35 s; done here it overlaps the scan, instead of delaying each rank's first block
    while rank 0, which imported it for the scan, waits at the first collective write
    (measured: 0.3 s of a 5.6 s two-rank gzip conversion). Unknown extensions and failed
    imports are left for rank 0 to report.
    """
    formats = set()
    for path in paths:
        try:
            formats.add(detect_format(path))
        except InputError:
            pass
    modules = {"XTC": "MDAnalysis.lib.formats.libmdaxdr", "TRR": "MDAnalysis.lib.formats.libmdaxdr",
               "DCD": "MDAnalysis.lib.formats.libdcd"}
    for name in sorted({modules[f] for f in formats if f in modules}):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - rank 0 reports a broken installation
            pass


@dataclass
class SegmentInfo:
    """What rank 0 learned about one input file."""

    path: str
    format: str
    n_atoms: int
    n_frames: int
    first_step: int
    last_step: int
    size: int
    mtime: float
    periodic: bool
    has_positions: bool = True
    has_velocities: bool = False
    has_forces: bool = False
    offsets: np.ndarray = None
    skip: int = 0
    dcd_header: dict = None
    h5md: dict = None

    @property
    def kept(self):
        """Number of frames of this file that belong to the trajectory."""
        return self.n_frames - self.skip

    def describe(self):
        """JSON-friendly summary (for provenance)."""
        return {
            "path": os.path.abspath(self.path),
            "format": self.format,
            "size": self.size,
            "mtime": self.mtime,
            "n_frames": self.n_frames,
            "frames_dropped_as_overlap": self.skip,
            "first_step": self.first_step,
            "last_step": self.last_step,
        }


@dataclass
class TrajectoryIndex:
    """The shared metadata of a trajectory made of one or more segments."""

    segments: list
    n_atoms: int
    periodic: bool
    has_velocities: bool
    has_forces: bool
    starts: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        kept = [segment.kept for segment in self.segments]
        self.starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)

    @property
    def n_frames(self):
        """Frames in the whole trajectory, after overlaps were dropped."""
        return int(self.starts[-1])

    @property
    def formats(self):
        return sorted({segment.format for segment in self.segments})

    def locate(self, frames):
        """Map trajectory frame numbers to ``(segment numbers, frame numbers in the file)``."""
        frames = np.asarray(frames, dtype=np.int64)
        seg = np.searchsorted(self.starts, frames, side="right") - 1
        skips = np.array([s.skip for s in self.segments], dtype=np.int64)
        return seg, frames - self.starts[seg] + skips[seg]


def _file_stat(path):
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a trajectory file")
    stat = os.stat(path)
    if stat.st_size == 0:
        raise InputError(f"{path}: file is empty")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    return stat


def _scan_xdr(path, fmt, stat):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    opener = XTCFile if fmt == "XTC" else TRRFile
    try:
        with opener(path) as handle:
            offsets = np.asarray(handle.offsets, dtype=np.int64).copy()
            if len(offsets) == 0:
                raise InputError(f"{path}: no complete {fmt} frame found")
            first = handle.read()
            handle.seek(len(offsets) - 1)
            last = handle.read()
            n_atoms = handle.n_atoms
    except InputError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, StopIteration) as error:
        raise InputError(
            f"{path}: not a readable {fmt} file, truncated or corrupt ({_reason(error)})"
        ) from None
    info = SegmentInfo(
        path=path,
        format=fmt,
        n_atoms=int(n_atoms),
        n_frames=len(offsets),
        first_step=int(first.step),
        last_step=int(last.step),
        size=stat.st_size,
        mtime=stat.st_mtime,
        periodic=bool(np.any(first.box)),
        offsets=offsets,
    )
    if fmt == "TRR":
        info.has_positions = bool(first.hasx)
        info.has_velocities = bool(first.hasv)
        info.has_forces = bool(first.hasf)
    return info


def _scan_dcd(path, stat):
    from MDAnalysis.lib.formats.libdcd import DCDFile

    try:
        with DCDFile(path) as handle:
            header = dict(handle.header)
            n_frames = int(handle.n_frames)
            periodic = bool(handle.is_periodic)
            if n_frames < 1:
                raise InputError(f"{path}: DCD file holds no frames")
            if handle.ndims != 3:
                raise InputError(f"{path}: DCD files with {handle.ndims} dimensions are not supported")
            expected = handle._header_size + handle._firstframesize + (n_frames - 1) * handle._framesize
            if stat.st_size != expected:
                raise InputError(
                    f"{path}: DCD file is truncated or has trailing data: {stat.st_size} bytes "
                    f"where {n_frames} whole frames take {expected}"
                )
            handle.seek(n_frames - 1)
            handle.read()
    except InputError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, TypeError) as error:
        raise InputError(f"{path}: not a readable DCD file ({_reason(error)})") from None
    nsavc = int(header["nsavc"]) or 1
    istart = int(header["istart"])
    return SegmentInfo(
        path=path,
        format="DCD",
        n_atoms=int(header["natoms"]),
        n_frames=n_frames,
        first_step=istart,
        last_step=istart + (n_frames - 1) * nsavc,
        size=stat.st_size,
        mtime=stat.st_mtime,
        periodic=periodic,
        dcd_header={"istart": istart, "nsavc": nsavc, "dt_ps": _dcd_frame_interval(header)},
    )


def _dcd_frame_interval(header):
    from MDAnalysis import units

    return float(units.convert(header["delta"], "AKMA", "ps")) * (int(header["nsavc"]) or 1)


def _reason(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def scan_segment(path):
    """Open one trajectory file and return its :class:`SegmentInfo`.

    Raises
    ------
    InputError
        If the file is missing, empty, of an unknown format, truncated or corrupt.
    """
    path = os.fspath(path)
    fmt = detect_format(path)
    stat = _file_stat(path)
    if fmt == "DCD":
        return _scan_dcd(path, stat)
    if fmt == "H5MD":
        return _scan_h5md(path, stat)
    return _scan_xdr(path, fmt, stat)


def _h5md_factor(path, dataset, kind, target):
    """Factor turning values of *dataset* (unit attribute, H5MD notation) into *target*."""
    from MDAnalysis import units
    from MDAnalysis.coordinates.H5MD import H5MDReader

    unit = dataset.attrs.get("unit")
    if unit is None:
        return 1.0
    if isinstance(unit, bytes):
        unit = unit.decode()
    table = "velocity" if kind == "speed" else kind
    try:
        translated = H5MDReader._unit_translation[table][str(unit)]
        return float(units.get_conversion_factor(kind, translated, target))
    except (KeyError, ValueError, TypeError):
        raise InputError(f"{path}: {dataset.name} has unit {unit!r}, which h5mdtool cannot convert") from None


def _h5md_particles(path, handle):
    """The particle group holding positions: ``trajectory`` if present, else the first."""
    particles = handle.get("particles")
    if particles is None:
        raise InputError(f"{path}: no /particles group: not an H5MD trajectory")
    names = sorted(particles)
    names = (["trajectory"] if "trajectory" in names else []) + [n for n in names if n != "trajectory"]
    for name in names:
        group = particles[name]
        if "position" in group and "value" in group["position"]:
            return name
    raise InputError(f"{path}: no /particles/<group>/position/value dataset")


def _h5md_series(group, name, n_frames):
    """Step or time of an H5MD element: explicit (1-D) or fixed (scalar, with offset)."""
    dataset = group.get(name)
    if dataset is None:
        return None
    if dataset.shape == ():
        offset = dataset.attrs.get("offset", 0)
        return float(offset) + float(dataset[()]) * np.arange(n_frames)
    return dataset[:]


def _scan_h5md(path, stat):
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            name = _h5md_particles(path, handle)
            group = handle["particles"][name]
            value = group["position/value"]
            if value.ndim != 3 or value.shape[2] != 3:
                raise InputError(f"{path}: position/value has shape {value.shape}, expected (n, N, 3)")
            n_frames, n_atoms = int(value.shape[0]), int(value.shape[1])
            if n_frames < 1:
                raise InputError(f"{path}: position/value holds no frames")
            steps = _h5md_series(group["position"], "step", n_frames)
            if steps is None or len(steps) != n_frames:
                raise InputError(f"{path}: position/step is missing or does not match position/value")
            factors = {"positions": _h5md_factor(path, value, "length", "nm")}
            present = {"positions": True}
            for element, (field, kind, target) in H5MD_ELEMENTS.items():
                if element != "position":
                    present[field] = element in group and "value" in group[element] and group[f"{element}/value"].shape == value.shape
                    if present[field]:
                        factors[field] = _h5md_factor(path, group[f"{element}/value"], kind, target)
            time = group["position"].get("time")
            factors["time"] = 1.0 if time is None else _h5md_factor(path, time, "time", "ps")
            box = group.get("box")
            boundary = [] if box is None else [b.decode() if isinstance(b, bytes) else str(b) for b in np.atleast_1d(box.attrs.get("boundary", []))]
            periodic = bool(box is not None and "edges" in box and boundary and all(b == "periodic" for b in boundary))
            if periodic:
                edges = box["edges"]["value"] if isinstance(box["edges"], h5py.Group) else box["edges"]
                factors["edges"] = _h5md_factor(path, edges, "length", "nm")
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as error:
        raise InputError(f"{path}: not a readable H5MD file ({_reason(error)})") from None
    return SegmentInfo(
        path=path,
        format="H5MD",
        n_atoms=n_atoms,
        n_frames=n_frames,
        first_step=int(steps[0]),
        last_step=int(steps[-1]),
        size=stat.st_size,
        mtime=stat.st_mtime,
        periodic=periodic,
        has_velocities=present["velocities"],
        has_forces=present["forces"],
        h5md={"group": f"particles/{name}", "factors": factors},
    )


def _leading_overlap(segment, last_step):
    """Count the first frames of *segment* whose step is not after *last_step*."""
    if segment.first_step > last_step:
        return 0
    if segment.last_step <= last_step:
        return segment.n_frames
    if segment.format == "DCD":
        header = segment.dcd_header
        return int((last_step - header["istart"]) // header["nsavc"] + 1)
    if segment.format == "H5MD":
        import h5py

        with h5py.File(segment.path, "r") as handle:
            steps = _h5md_series(handle[segment.h5md["group"]]["position"], "step", segment.n_frames)
        return int(np.searchsorted(np.asarray(steps), last_step, side="right"))
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    opener = XTCFile if segment.format == "XTC" else TRRFile
    with opener(segment.path) as handle:
        handle.set_offsets(segment.offsets)
        count = 0
        for frame in handle:
            if frame.step > last_step:
                break
            count += 1
    return count


def scan(paths, on_overlap="error"):
    """Scan the segments of one trajectory (rank 0 only) and return a :class:`TrajectoryIndex`.

    Parameters
    ----------
    paths : sequence of str
        Segment files in trajectory order.
    on_overlap : {"error", "drop"}
        What to do when a segment starts at or before the last step of the previous one:
        refuse, or drop the repeated frames and keep the first copy.

    Raises
    ------
    InputError
        For unreadable inputs or segments whose atom counts differ.
    OverlapError
        For overlapping segments with ``on_overlap="error"``.
    """
    if on_overlap not in OVERLAP_POLICIES:
        raise UsageError(f"on_overlap must be one of {OVERLAP_POLICIES}, got {on_overlap!r}")
    if not paths:
        raise UsageError("no input trajectory given")
    segments = [scan_segment(path) for path in paths]
    first = segments[0]
    for segment in segments[1:]:
        if segment.n_atoms != first.n_atoms:
            raise InputError(
                f"{segment.path} has {segment.n_atoms} atoms but {first.path} has "
                f"{first.n_atoms}: segments must hold the same atoms"
            )
    last_step = first.last_step
    last_path = first.path
    for segment in segments[1:]:
        if segment.first_step <= last_step:
            if on_overlap == "error":
                raise OverlapError(
                    f"{segment.path} starts at step {segment.first_step} but {last_path} "
                    f"already reached step {last_step}: segments overlap "
                    "(use --on-overlap drop to keep the first copy of each step)"
                )
            segment.skip = _leading_overlap(segment, last_step)
        if segment.kept:
            last_step = segment.last_step
            last_path = segment.path
    return TrajectoryIndex(
        segments=segments,
        n_atoms=first.n_atoms,
        periodic=first.periodic,
        has_velocities=all(s.has_velocities for s in segments),
        has_forces=all(s.has_forces for s in segments),
    )


def select_frames(n_frames, start=None, stop=None, step=None):
    """Frame numbers picked by Python slice semantics ``[start:stop:step]``, as a range.

    Raises
    ------
    UsageError
        If *step* is not positive or no frame is selected.
    """
    if step is not None and step < 1:
        raise UsageError(f"--step must be a positive number of frames, got {step}")
    frames = range(n_frames)[slice(start, stop, step)]
    if len(frames) == 0:
        raise UsageError(
            f"the frame selection start={start} stop={stop} step={step} picks none of the "
            f"{n_frames} frames"
        )
    return frames


class FrameBlock:
    """Reusable buffers for up to *capacity* frames of one trajectory.

    Attributes hold ``positions``, ``velocities``, ``forces`` (``(capacity, n_atoms, 3)``
    float32 or None when not read), ``edges`` (``(capacity, 3, 3)`` float32 box vectors as
    rows, nm), ``step`` (int64) and ``time`` (float64, ps). Only the first ``n`` rows are
    valid after a read.
    """

    def __init__(self, capacity, n_atoms, fields):
        self.capacity = int(capacity)
        self.n_atoms = int(n_atoms)
        self.fields = tuple(fields)
        shape = (self.capacity, self.n_atoms, 3)
        for name in ("positions", "velocities", "forces"):
            setattr(self, name, np.empty(shape, np.float32) if name in self.fields else None)
        self.edges = np.zeros((self.capacity, 3, 3), np.float32)
        self.step = np.zeros(self.capacity, np.int64)
        self.time = np.zeros(self.capacity, np.float64)
        self.n = 0

    def view(self, name):
        """The valid rows of array *name*."""
        array = getattr(self, name)
        return None if array is None else array[: self.n]


class SegmentReader:
    """Reads frames of one segment file into a :class:`FrameBlock` (base class)."""

    def __init__(self, info, atom_indices=None):
        self.info = info
        self.atom_indices = atom_indices

    def read(self, local_frames, block, row):
        """Read *local_frames* (increasing) into rows ``row...`` of *block*."""
        raise NotImplementedError

    def close(self):
        pass

    def error(self, frame, error):
        return InputError(
            f"{self.info.path}: cannot read {self.info.format} frame {frame} ({_reason(error)})"
        )


class XDRSegmentReader(SegmentReader):
    """XTC or TRR segment, decoded by libmdaxdr with the offsets rank 0 computed."""

    def __init__(self, info, atom_indices=None):
        super().__init__(info, atom_indices)
        from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

        opener = XTCFile if info.format == "XTC" else TRRFile
        try:
            self.handle = opener(info.path)
        except (OSError, RuntimeError, ValueError) as error:
            raise self.error(0, error) from None
        self.handle.set_offsets(info.offsets)
        n = info.n_atoms
        self.scratch = np.empty((n, 3), np.float32)
        if info.format == "TRR":
            self.scratch_v = np.empty((n, 3), np.float32)
            self.scratch_f = np.empty((n, 3), np.float32)
        self.position = -1

    def _targets(self, block, row):
        """Arrays the decoder writes into: block rows when all atoms are kept, else scratch."""
        direct = self.atom_indices is None

        def target(name, scratch):
            array = getattr(block, name)
            return array[row] if (direct and array is not None) else scratch

        if self.info.format == "XTC":
            return (target("positions", self.scratch),)
        return (
            target("positions", self.scratch),
            target("velocities", self.scratch_v),
            target("forces", self.scratch_f),
        )

    def read(self, local_frames, block, row):
        handle = self.handle
        trr = self.info.format == "TRR"
        for frame in local_frames:
            frame = int(frame)
            try:
                if frame != self.position + 1:
                    handle.seek(frame)
                targets = self._targets(block, row)
                if trr:
                    record = handle.read_direct_xvf(*targets)
                else:
                    record = handle.read_direct_x(*targets)
            except (OSError, EOFError, RuntimeError, ValueError, StopIteration) as error:
                raise self.error(frame, error) from None
            self.position = frame
            if trr:
                self._check_trr_fields(record, block, frame)
            if self.atom_indices is not None:
                for name, source in zip(("positions", "velocities", "forces"), targets):
                    array = getattr(block, name)
                    if array is not None:
                        np.take(source, self.atom_indices, axis=0, out=array[row])
            block.edges[row] = record.box
            block.step[row] = record.step
            block.time[row] = record.time
            row += 1
        return row

    def _check_trr_fields(self, record, block, frame):
        wanted = (
            ("positions", record.hasx, "positions"),
            ("velocities", record.hasv, "velocities (use --no-velocities to skip them)"),
            ("forces", record.hasf, "forces (use --no-forces to skip them)"),
        )
        for name, present, what in wanted:
            if getattr(block, name) is not None and not present:
                raise InputError(f"{self.info.path}: TRR frame {frame} has no {what}")

    def close(self):
        self.handle.close()


class DCDSegmentReader(SegmentReader):
    """CHARMM/NAMD DCD segment, read a block at a time with ``DCDFile.readframes``."""

    def __init__(self, info, atom_indices=None):
        super().__init__(info, atom_indices)
        from MDAnalysis.lib.formats.libdcd import DCDFile

        try:
            self.handle = DCDFile(info.path)
        except (OSError, RuntimeError, ValueError) as error:
            raise self.error(0, error) from None

    def read(self, local_frames, block, row):
        local_frames = np.asarray(local_frames, dtype=np.int64)
        first, last = int(local_frames[0]), int(local_frames[-1])
        stride = int(local_frames[1] - local_frames[0]) if len(local_frames) > 1 else 1
        if not np.array_equal(local_frames, np.arange(first, last + 1, stride)):
            for frame in local_frames:
                row = self.read([frame], block, row)
            return row
        indices = None if self.atom_indices is None else np.asarray(self.atom_indices)
        try:
            self.handle.seek(0)
            record = self.handle.readframes(first, last + 1, stride, order="fac", indices=indices)
        except (OSError, EOFError, RuntimeError, ValueError) as error:
            raise self.error(first, error) from None
        count = len(local_frames)
        rows = slice(row, row + count)
        block.positions[rows] = angstrom_to_nm(record.xyz)
        header = self.info.dcd_header
        block.step[rows] = header["istart"] + local_frames * header["nsavc"]
        block.time[rows] = (local_frames + header["istart"] / header["nsavc"]) * header["dt_ps"]
        if self.info.periodic:
            block.edges[rows] = dcd_unitcell_to_edges(record.unitcell) / ANGSTROM_PER_NM
        else:
            block.edges[rows] = 0.0
        return row + count

    def close(self):
        self.handle.close()


class H5MDSegmentReader(SegmentReader):
    """H5MD file (relayout): blocks of frames read with h5py, converted to h5mdtool's units."""

    def __init__(self, info, atom_indices=None):
        super().__init__(info, atom_indices)
        import h5py

        try:
            self.handle = h5py.File(info.path, "r")
        except OSError as error:
            raise self.error(0, error) from None
        self.group = self.handle[info.h5md["group"]]
        self.factors = info.h5md["factors"]
        n = info.n_frames
        self.steps = _h5md_series(self.group["position"], "step", n).astype(np.int64)
        times = _h5md_series(self.group["position"], "time", n)
        self.times = (self.steps.astype(np.float64) if times is None else np.asarray(times, np.float64)) * self.factors["time"]
        self.edges = None
        if info.periodic:
            edges = self.group["box/edges"]
            edges = edges["value"] if "value" in edges else edges
            self.edges = edges

    def _box(self, selection, count):
        edges = self.edges
        if edges.ndim in (1, 2):  # fixed in time: (3,) diagonal or (3, 3)
            data = np.broadcast_to(edges[()], (count,) + edges.shape)
        else:
            data = edges[selection]
        data = np.asarray(data, dtype=np.float64) * self.factors["edges"]
        return np.stack([np.diag(row) for row in data]) if data.ndim == 2 else data

    def read(self, local_frames, block, row):
        local_frames = np.asarray(local_frames, dtype=np.int64)
        count = len(local_frames)
        first, last = int(local_frames[0]), int(local_frames[-1])
        contiguous = last - first + 1 == count
        selection = np.s_[first:last + 1] if contiguous else local_frames
        rows = slice(row, row + count)
        try:
            for element, (field, _, _) in H5MD_ELEMENTS.items():
                target = getattr(block, field)
                if target is None:
                    continue
                data = self.group[f"{element}/value"][selection]
                if self.atom_indices is not None:
                    data = np.take(data, self.atom_indices, axis=1)
                np.multiply(data, self.factors[field], out=target[rows], casting="unsafe")
            block.edges[rows] = 0.0 if self.edges is None else self._box(selection, count)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise self.error(first, error) from None
        block.step[rows] = self.steps[local_frames]
        block.time[rows] = self.times[local_frames]
        return row + count

    def close(self):
        self.handle.close()


def angstrom_to_nm(values):
    """Angstrom to nm, correctly rounded to float32 (within half a unit in the last place).

    DCD stores float32 Angstroms, so nm values cannot all be exact: reading them back as
    Angstroms (times 10 in float32) agrees with the source to about 1.2e-7 relative.
    """
    return (np.asarray(values, dtype=np.float64) / ANGSTROM_PER_NM).astype(np.float32)


def dcd_unitcell_to_edges(unitcells):
    """Box vectors (rows, Angstrom) from DCD unit-cell records, as MDAnalysis interprets them.

    The record is ``[A, gamma, B, beta, alpha, C]`` with angle cosines (CHARMM, NAMD > 2.5)
    or degrees (NAMD 2.5), or the six box-matrix entries (new CHARMM).
    """
    from MDAnalysis.lib.mdamath import triclinic_box, triclinic_vectors

    edges = np.zeros((len(unitcells), 3, 3), np.float64)
    for i, cell in enumerate(np.asarray(unitcells, dtype=np.float64)):
        dims = cell[[0, 2, 5, 4, 3, 1]]
        if np.all(np.abs(dims[3:]) <= 1.0):
            dims[3:] = 90.0 - np.degrees(np.arcsin(dims[3:]))
        elif np.any(dims < 0.0) or np.any(dims[3:] > 180.0):
            dims = triclinic_box(cell[[0, 1, 3]], cell[[1, 2, 4]], cell[[3, 4, 5]])
        edges[i] = triclinic_vectors(dims)
    return edges


READERS = {"XTC": XDRSegmentReader, "TRR": XDRSegmentReader, "DCD": DCDSegmentReader, "H5MD": H5MDSegmentReader}


class TrajectoryReader:
    """Reads arbitrary frames of a scanned trajectory, opening segments only when needed.

    Parameters
    ----------
    index : TrajectoryIndex
        From :func:`scan` (broadcast by rank 0).
    atom_indices : array of int, optional
        Atoms to keep, in order; all atoms when None.
    fields : sequence of str
        Which of ``positions``, ``velocities``, ``forces`` to read.
    """

    def __init__(self, index, atom_indices=None, fields=("positions",)):
        self.index = index
        self.atom_indices = None if atom_indices is None else np.asarray(atom_indices, np.int64)
        self.fields = tuple(fields)
        self.n_atoms = index.n_atoms if atom_indices is None else len(self.atom_indices)
        self._open = {}

    def new_block(self, capacity):
        """A :class:`FrameBlock` sized for this reader."""
        return FrameBlock(capacity, self.n_atoms, self.fields)

    def _segment(self, number):
        reader = self._open.get(number)
        if reader is None:
            info = self.index.segments[number]
            reader = READERS[info.format](info, self.atom_indices)
            self._open[number] = reader
        return reader

    def read(self, frames, block):
        """Fill *block* with trajectory *frames* (increasing numbers); returns *block*."""
        segments, local = self.index.locate(frames)
        row = 0
        for number in np.unique(segments):
            mask = segments == number
            row = self._segment(int(number)).read(local[mask], block, row)
        block.n = row
        return block

    def close(self):
        for reader in self._open.values():
            reader.close()
        self._open.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
