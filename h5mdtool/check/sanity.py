"""Data sanity rules (``DATA001``-``DATA006``): what a trajectory's numbers must look like.

These rules need no source trajectory, so a plain ``validate`` catches a file that is
structurally perfect but holds garbage: frames of zeros (what HDF5 1.10.8's single-chunk
bug wrote), NaN or inf (in observables too), coordinates far outside the box, steps or times that run backwards,
boxes of zero volume, and frames the file declares but never stored.

Per-atom data is read in blocks of whole chunks of at most :data:`BLOCK_BYTES` into one
reused buffer, and each block is reduced at once to per-frame, per-axis minima and maxima
(numpy's minimum and maximum propagate NaN, so one pass finds non-finite values, frames of
zeros and the frame's bounding box). Memory is bounded by the block, whatever the file's
size; the cost is one read of the data (0.6 s for 2.2 GiB from the page cache) plus about
as much again for the reductions. Only what :func:`h5access.storage` says is stored is
read: nothing a file merely declares.
"""

import math

import numpy as np

from ..h5md.units import unit_of
from . import lint
from .h5access import heartbeat, reason, storage

#: Memory for one block of per-atom data (whole chunks; one chunk when a chunk is larger).
BLOCK_BYTES = 64 * 1024**2
#: Entries of a step, time or box series read at once.
SERIES_BLOCK = 1 << 20
#: A frame is "far outside" when its atoms all lie more than this many box lengths beyond
#: one face of the periodic box. Unwrapped trajectories drift: a protein diffuses about
#: 14 nm per microsecond, so reaching 100 lengths of a 7 nm box takes milliseconds of
#: unwrapped simulation, while garbage or mis-scaled values land there at once.
FAR_BOX_LENGTHS = 100
#: |det(edges)| below this fraction of the product of the edge lengths is zero volume.
FLAT_BOX = 1e-6
#: Frame numbers kept per finding (the count is always exact).
LISTED_FRAMES = 10
#: Length units h5mdtool can relate (to nm) when positions and box use different ones.
NM_PER_UNIT = {"nm": 1.0, "Angstrom": 0.1, "angstrom": 0.1, "Ang": 0.1, "A": 0.1, "pm": 1e-3, "fm": 1e-6,
               "um": 1e3, "m": 1e9}


class FrameList:
    """Frames found by one rule: an exact count and the first :data:`LISTED_FRAMES` numbers."""

    def __init__(self):
        self.count = 0
        self.first = []

    def add(self, frames):
        frames = np.asarray(frames, dtype=np.int64).ravel()
        if not frames.size:
            return
        self.count += int(frames.size)
        room = LISTED_FRAMES - len(self.first)
        if room > 0:
            self.first.extend(int(f) for f in frames[:room])

    def __bool__(self):
        return self.count > 0

    def text(self, total):
        """``frames 0-9, ... (98 of 98 frames)`` or ``frame 7 (1 of 98 frames)``."""
        return f"{frame_ranges(self.first, self.count)} ({self.count} of {total} frame{'s' if total != 1 else ''})"


def frame_ranges(frames, count=None):
    """``frame 3``, ``frames 0-4, 7``, ``frames 0-9, ...`` (``...`` when *count* says there are more)."""
    frames = sorted(set(int(f) for f in frames))
    pieces = []
    for frame in frames:
        if pieces and frame == pieces[-1][1] + 1:
            pieces[-1][1] = frame
        else:
            pieces.append([frame, frame])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in pieces)
    more = count is not None and count > len(frames)
    word = "frame" if len(frames) == 1 and not more else "frames"
    return f"{word} {text}{', ...' if more else ''}"


# -- reading -------------------------------------------------------------------------------


def readable_rows(report, dataset, path, what):
    """Rows of *dataset*'s first axis that may be read; reports DATA006 (or LINK001) first.

    Returns 0 for data kept in other files (virtual datasets, external storage: never read),
    for data encoded with a filter that is not available (FILE006) and for data whose
    storage has holes that are not a written prefix.
    """
    try:
        facts = storage(dataset)
    except Exception as error:  # noqa: BLE001
        report.add("FILE003", path, f"cannot read the storage of the {what}: {reason(error)}")
        return 0
    shape = dataset.shape
    try:
        missing = lint.unavailable_filters(dataset)
    except Exception as error:  # noqa: BLE001
        report.add("FILE003", path, f"cannot read the filters of the {what}: {reason(error)}")
        return 0
    if missing:
        report.add("FILE006", path, f"{what} not checked: {', '.join(missing)} is not available here")
        return 0
    if facts["external"]:
        report.add("LINK001", path, "a virtual dataset, or raw data kept in external files: not read")
        return 0
    if facts["complete"]:
        return shape[0]
    rows = facts["stored_rows"]
    if rows is not None:
        if rows:
            missing = f"rows {rows}-{shape[0] - 1} were" if shape[0] - rows > 1 else f"row {rows} was"
            report.add("DATA006", path, f"{what}: {shape[0]} rows declared, only rows 0-{rows - 1} stored; {missing} never written (readers get the fill value)")
        else:
            report.add("DATA006", path, f"{what}: {shape[0]} rows declared, none stored (readers get the fill value)")
        return rows
    if facts["stored_chunks"] is not None:
        stored = f"only {facts['stored_chunks']} of {facts['declared_chunks']} chunks stored"
    else:
        stored = (f"chunks stored among its {facts['declared_chunks']} with unwritten ones between them "
                  "(found by looking some up: too many to count)")
    report.add("DATA006", path, f"{what}: {shape[0]} rows declared, {stored}, "
               "not a written prefix: the rows without storage read as the fill value; not checked")
    return 0


def block_plan(shape, chunks, itemsize, rows, budget=BLOCK_BYTES):
    """Blocks ``(first row, stop row, first atom, stop atom)`` of whole chunks covering *rows* rows.

    A block spans all atoms when a row of chunks fits in *budget*, else slabs of whole atom
    chunks; it never holds less than one chunk.
    """
    n_atoms, width = int(shape[1]), math.prod(int(s) for s in shape[2:])
    chunk_frames, chunk_atoms = (int(chunks[0]), int(chunks[1])) if chunks else (1, n_atoms)
    frame_bytes = max(1, n_atoms * width * itemsize)
    if chunk_frames * frame_bytes <= budget:
        frames = max(chunk_frames, budget // frame_bytes // chunk_frames * chunk_frames)
        atoms = n_atoms
    else:
        frames = chunk_frames
        per_atom_chunk = chunk_frames * chunk_atoms * width * itemsize
        atoms = max(chunk_atoms, budget // max(1, per_atom_chunk) * chunk_atoms)
    for first in range(0, rows, frames):
        stop = min(rows, first + frames)
        for atom in range(0, n_atoms, atoms):
            yield first, stop, atom, min(n_atoms, atom + atoms)


class Extremes:
    """Per-frame, per-axis minima and maxima of a ``[n][N][D]`` dataset, block by block."""

    def __init__(self, dataset, rows, budget=BLOCK_BYTES):
        self.dataset = dataset
        self.rows = rows
        self.budget = budget
        self.dtype = dataset.dtype.newbyteorder("=")
        self.buffer = np.empty(0, self.dtype)  # grows to the largest block (at most the budget or one chunk)

    def blocks(self):
        """Yield ``(first, mins, maxs)``: float64 arrays ``(k, D)`` for frames ``first...first + k``."""
        dataset, shape = self.dataset, self.dataset.shape
        mins = maxs = None
        current = None
        for first, stop, atom, atom_stop in block_plan(shape, dataset.chunks, self.dtype.itemsize, self.rows, self.budget):
            if current is not None and current != (first, stop):
                yield current[0], mins, maxs
                mins = maxs = None
            current = (first, stop)
            count = (stop - first) * (atom_stop - atom) * shape[2]
            if count > self.buffer.size:
                self.buffer = np.empty(count, self.dtype)
            block = self.buffer[:count].reshape(stop - first, atom_stop - atom, shape[2])
            if block.size:
                dataset.read_direct(block, np.s_[first:stop, atom:atom_stop])
            low = np.stack([block[:, :, d].min(axis=1) for d in range(shape[2])], axis=1).astype(np.float64)
            high = np.stack([block[:, :, d].max(axis=1) for d in range(shape[2])], axis=1).astype(np.float64)
            if mins is None:
                mins, maxs = low, high
            else:  # another slab of atoms of the same frames (minimum and maximum keep NaN)
                mins, maxs = np.minimum(mins, low), np.maximum(maxs, high)
            heartbeat()
        if current is not None:
            yield current[0], mins, maxs


def box_matrices(values, dimension):
    """Box edges of shape ``(k, D)`` (diagonal) or ``(k, D, D)`` as ``(k, D, D)`` float64 matrices."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 2:
        matrices = np.zeros((values.shape[0], dimension, dimension))
        matrices[:, np.arange(dimension), np.arange(dimension)] = values
        return matrices
    return values


# -- the rules -----------------------------------------------------------------------------


class Box:
    """The periodic box of a particle group, as far as the data checks need it."""

    def __init__(self, edges, periodic, dimension, frames_match, unit):
        self.edges = edges  # Element (time-dependent or fixed) or None
        self.periodic = periodic  # booleans per dimension
        self.dimension = dimension
        self.frames_match = frames_match  # rows of edges are the rows of position
        self.unit = unit

    def matrices(self, first, stop):
        """``(stop - first, D, D)`` matrices for position frames ``[first, stop)``, or None."""
        value = self.edges.value
        try:
            if self.edges.time_dependent:
                data = value[first:stop]
            else:
                data = np.broadcast_to(np.asarray(value[()]), (stop - first,) + tuple(value.shape))
        except Exception:  # noqa: BLE001 - reported by the box's own checks
            return None
        return box_matrices(data, self.dimension)


def check_box_series(report, box, total_rows):
    """DATA002 (non-finite edges) and DATA005 (zero volume) over the box's own frames.

    A frame whose edges are all 0 has no box (how XTC, TRR and h5mdtool store a frame without
    one; MDAnalysis reads it as no box) and is not flagged.
    """
    element = box.edges
    path = f"{element.path}/value" if element.time_dependent else element.path
    value = element.value
    if value.dtype.kind not in "iuf":
        return
    rows = total_rows if element.time_dependent else 1
    nonfinite, flat = FrameList(), FrameList()
    periodic = np.asarray(box.periodic, dtype=bool)
    for first in range(0, rows, SERIES_BLOCK):
        stop = min(rows, first + SERIES_BLOCK)
        data = value[first:stop] if element.time_dependent else np.asarray(value[()])[None]
        matrices = box_matrices(data, box.dimension)
        finite = np.isfinite(matrices).reshape(len(matrices), -1).all(axis=1)
        nonfinite.add(first + np.flatnonzero(~finite))
        lengths = np.linalg.norm(matrices, axis=2)  # (k, D) edge vector lengths
        zero = (lengths[:, periodic] == 0).any(axis=1) if periodic.any() else np.zeros(len(matrices), bool)
        if periodic.all():
            with np.errstate(all="ignore"):
                volume = np.abs(np.linalg.det(np.where(finite[:, None, None], matrices, 1.0)))
            zero |= volume <= FLAT_BOX * np.prod(lengths, axis=1)
        # all edges 0: the frame has no box (the XTC/TRR convention, MDAnalysis reads it as None)
        zero &= (matrices != 0).reshape(len(matrices), -1).any(axis=1)
        flat.add(first + np.flatnonzero(zero & finite))
        heartbeat()
    label = "frames" if element.time_dependent else "the fixed box"
    if nonfinite:
        where = nonfinite.text(rows) if element.time_dependent else label
        report.add("DATA002", path, f"box edges are NaN or inf at {where}")
    if flat:
        where = flat.text(rows) if element.time_dependent else label
        report.add("DATA005", path, f"the periodic box has zero volume at {where}")


def check_values(report, element, name, box, n_rows):
    """DATA001, DATA002, DATA003 over the per-frame extremes of one ``[n][N][D]`` element."""
    path = f"{element.path}/value"
    value = element.value
    shape = element.shape
    if value.dtype.kind not in "iuf" or len(shape) != 3 or shape[1] == 0 or shape[2] == 0:
        return
    total = shape[0]
    zero, nonfinite, far = FrameList(), FrameList(), FrameList()
    far_check = name == "position" and box is not None and box.frames_match and any(box.periodic) \
        and box.dimension == shape[2] and shape[2] <= 4
    factor = None
    if far_check:
        position_unit = unit_of(value)
        if position_unit == box.unit:
            factor = 1.0
        elif position_unit in NM_PER_UNIT and box.unit in NM_PER_UNIT:
            factor = NM_PER_UNIT[position_unit] / NM_PER_UNIT[box.unit]
    for first, mins, maxs in Extremes(value, n_rows).blocks():
        frames = first + np.arange(len(mins))
        finite = np.isfinite(mins).all(axis=1) & np.isfinite(maxs).all(axis=1)
        nonfinite.add(frames[~finite])
        if name == "position" and shape[1] > 1:
            zero.add(frames[(mins == 0).all(axis=1) & (maxs == 0).all(axis=1)])
        if factor is not None:
            matrices = box.matrices(first, first + len(mins))
            if matrices is not None:
                far.add(frames[_far_outside(mins * factor, maxs * factor, matrices, box.periodic) & finite])
    if zero:
        report.add("DATA001", path, f"every position is 0.0 at {zero.text(total)}: data never written or lost")
    if nonfinite:
        report.add("DATA002", path, f"{name} values are NaN or inf at {nonfinite.text(total)}")
    if far:
        report.add("DATA003", path, f"all atoms lie more than {FAR_BOX_LENGTHS} box lengths outside the box at {far.text(total)}")


def check_finite(report, dataset, path, what, rows, per_frame=True):
    """DATA002 over the first *rows* rows of a float dataset of any shape (an observable).

    Read in blocks of whole chunks of at most :data:`BLOCK_BYTES` (at least one row).
    *per_frame*: the first axis counts frames (a time-dependent element's ``value``).
    """
    if dataset.dtype.kind != "f":
        return
    shape = dataset.shape
    if not shape:
        if not np.isfinite(np.asarray(dataset[()])).all():
            report.add("DATA002", path, f"{what} is NaN or inf")
        return
    row_bytes = max(1, math.prod(int(n) for n in shape[1:]) * dataset.dtype.itemsize)
    block = max(1, BLOCK_BYTES // row_bytes)
    if dataset.chunks:
        block = max(int(dataset.chunks[0]), block // int(dataset.chunks[0]) * int(dataset.chunks[0]))
    nonfinite = FrameList()
    for first in range(0, rows, block):
        values = np.asarray(dataset[first:min(rows, first + block)])
        nonfinite.add(first + np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1)))
        heartbeat()
    if nonfinite and per_frame:
        report.add("DATA002", path, f"{what} values are NaN or inf at {nonfinite.text(shape[0])}")
    elif nonfinite:
        report.add("DATA002", path, f"{what} is NaN or inf")


def _far_outside(mins, maxs, matrices, periodic):
    """Frames whose bounding box lies more than FAR_BOX_LENGTHS beyond one periodic face.

    The corners of the frame's bounding box are turned into fractional coordinates; when all
    of them lie beyond a face, every atom does (exact for a cuboid box, a sufficient
    condition for a triclinic one). With open directions only cuboid boxes are judged.
    """
    dimension = mins.shape[1]
    corners = np.array(np.meshgrid(*[[0, 1]] * dimension, indexing="ij")).reshape(dimension, -1).T  # (2^D, D)
    points = np.where(corners[None, :, :] == 0, mins[:, None, :], maxs[:, None, :])  # (k, 2^D, D)
    periodic = np.asarray(periodic, dtype=bool)
    with np.errstate(all="ignore"):
        usable = np.isfinite(matrices).all(axis=(1, 2)) & (np.abs(np.linalg.det(np.where(np.isfinite(matrices), matrices, 0.0))) > 0)
        if not periodic.all():  # only a cuboid box separates periodic from open directions
            usable &= ~(matrices - matrices * np.eye(dimension)).any(axis=(1, 2))
        inverse = np.linalg.inv(np.where(usable[:, None, None], matrices, np.eye(dimension)))
        fractional = np.einsum("kcd,kde->kce", points, inverse)  # r = s H  =>  s = r H^-1
    beyond = (fractional.min(axis=1) > 1 + FAR_BOX_LENGTHS) | (fractional.max(axis=1) < -FAR_BOX_LENGTHS)
    return usable & beyond[:, periodic].any(axis=1)


def series_problems(dataset, length, block=SERIES_BLOCK):
    """Read a 1-D step or time series in blocks: frames where it goes backwards, repeats, is non-finite.

    Returns
    -------
    (FrameList, FrameList, FrameList)
        Backwards (the frame whose value is below its predecessor's), repeated (equal to
        its predecessor), non-finite (floats only; such entries are not compared).
    """
    backwards, repeated, nonfinite = FrameList(), FrameList(), FrameList()
    previous = None
    for first in range(0, length, block):
        values = np.asarray(dataset[first:min(length, first + block)])
        if values.dtype.kind not in "iuf" or values.size == 0:
            break
        frames = first + np.arange(values.size)
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values)
            nonfinite.add(frames[bad])
            if bad.any():  # compare each finite value with the last finite one before it
                keep = ~bad
                frames, values = frames[keep], values[keep]
                if not values.size:
                    continue
        joined = values if previous is None else np.concatenate([[previous], values])
        steps = np.diff(joined)
        offset = frames if previous is not None else frames[1:]
        backwards.add(offset[steps < 0])
        repeated.add(offset[steps == 0])
        previous = values[-1]
        heartbeat()
    return backwards, repeated, nonfinite
