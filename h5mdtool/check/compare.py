"""Frame-by-frame comparison of an H5MD file (or split parts) with the trajectory it came from.

Used by ``validate --against``. Both sides are read block by block through
:class:`~h5mdtool.formats.TrajectoryReader`, in h5mdtool's units (nm, ps), so an H5MD file
is compared as stored when its units are h5mdtool's and converted otherwise. Frames are
divided among the ranks in balanced contiguous blocks; each rank reads only its frames and
the differing frames are gathered on every rank.

What "equal" means, per quantity (``tolerance`` replaces the first three with one absolute
bound):

* positions, velocities, forces: bit-exact when both sides hold float32 values in the same
  units (XTC, TRR and the H5MD h5mdtool writes from them). When a unit conversion is
  involved (a DCD source, float32 Angstrom, against a file in nm; an H5MD file in other
  units) each value may differ by the conversion's rounding, 2.5e-7 relative. Positions of a
  lossy file (attribute ``precision`` on ``position/value``, nm) may differ by half that
  precision plus the float32 rounding of the decoded value.
* box: bit-exact, as the other float32 values, when no unit conversion is involved (XTC
  and TRR store box vectors, and h5mdtool copies them); else within 1e-6 of the frame's
  largest edge entry (writers derive it from lengths and angles, which does not round-trip
  exactly).
* step: exact. time: within float32 resolution (2**-23 relative), as many writers store it
  in float32; not compared when the file stores no ``time`` (H5MD allows it).
* a NaN or an infinity on either side is always a difference, whatever the tolerance (even
  NaN against NaN: a file that holds non-finite values must never pass as a good copy).

The compared file's parts (a split trajectory) are scanned one by one and joined in the
order given, without the overlap rules of a source's segments: parts of a trajectory whose
steps are constant or restart are still one trajectory.
"""

import numpy as np

from ..formats import TrajectoryIndex, TrajectoryReader, scan, scan_segment
from ..formats.trajectory import chain_steps
from ..parallel.errors import H5mdToolError, InputError
from ..parallel.mpi import agree, balanced_slices, capture_errors, entry_point, resolve, root_call

FIELDS = ("positions", "velocities", "forces")
UNITS = {"positions": "nm", "velocities": "nm/ps", "forces": "kJ/(mol nm)", "edges": "nm"}
#: Relative rounding of one float32 unit conversion (Angstrom <-> nm), with margin.
CONVERSION_RELATIVE = 2.5e-7
#: float32 resolution: time stored as float32 by other writers.
TIME_RELATIVE = float(np.finfo(np.float32).eps)
BOX_RELATIVE = 1e-6
#: Memory for the two blocks (file and source) of one rank.
BLOCK_BYTES = 64 * 1024**2


def _precisions(segment):
    """Recorded ``precision`` of an H5MD segment's fields, in h5mdtool units: {field: value}."""
    import h5py

    found = {}
    try:
        with h5py.File(segment.path, "r") as handle:
            for field, element in segment.details["elements"].items():
                precision = handle[element["path"]].attrs.get("precision")
                if precision is not None and float(precision) > 0:
                    found[field] = float(precision) * float(element["factor"])
    except Exception:  # noqa: BLE001 - no usable attribute: compare exactly
        return {}
    return found


def _scan_copy(paths):
    """Scan the compared file(s) one by one, joined in order; find the tolerances they need (rank 0).

    Returns
    -------
    (TrajectoryIndex, dict, bool)
        The index, the lossy precision of each field in h5mdtool units, and whether every
        part records times.

    Raises
    ------
    InputError
        If a file cannot be read or the files hold different numbers of atoms.
    """
    segments = [scan_segment(path) for path in paths]
    chain_steps(segments)
    first = segments[0]
    for segment in segments[1:]:
        if segment.n_atoms != first.n_atoms:
            raise InputError(f"{segment.path} has {segment.n_atoms} atoms but {first.path} has {first.n_atoms}")
    precisions = {}
    for segment in segments:
        if segment.format == "H5MD":
            for field, value in _precisions(segment).items():
                precisions[field] = max(value, precisions.get(field, 0.0))
    return TrajectoryIndex(segments), precisions, all(s.time is not None for s in segments)


def _stored_ids(segment):
    """The ``id`` an H5MD *segment*'s particle group stores, one per atom (h5mdtool writes
    each atom's index in the source system there), or None."""
    if segment.format != "H5MD":
        return None
    import h5py

    try:
        with h5py.File(segment.path, "r") as handle:
            dataset = handle[segment.details["group"]].get("id")
            if not isinstance(dataset, h5py.Dataset) or dataset.shape != (segment.n_atoms,) \
                    or dataset.dtype.kind not in "iu":
                return None
            return np.asarray(dataset[()], np.int64)
    except (OSError, KeyError, ValueError, TypeError):
        return None


def source_atoms(copy_segments, source_segments, comm=None):
    """The source's atom for each atom of a copy holding fewer atoms, or None.

    A file converted from a selection of atoms (``convert -s``, ``-n``, ``--atom-indices``
    with ``--topology``) stores each atom's index in the source system as ``id``; the
    source's own atoms are ``0, 1, ...``, or its stored ``id`` when it is such a file
    itself. Each of the copy's atoms is matched with the source atom of the same id: None
    when the copy stores no ids, its parts store different ids, or an id is not the
    source's.

    Rank 0 reads the first part's and the source's ids; the other parts are checked by the
    ranks in turn, so the check does not grow with the number of parts on any one rank.
    Call it on every rank of *comm*; every rank gets the same answer.
    """
    comm = resolve(comm)
    ids, source_ids = root_call(
        comm, lambda: (_stored_ids(copy_segments[0]), _stored_ids(source_segments[0])))
    if ids is None:
        return None
    mine = copy_segments[1 + comm.rank::comm.size]
    same = all(np.array_equal(_stored_ids(segment), ids) for segment in mine)
    if not all(comm.allgather(same)):
        return None
    if source_ids is None:
        source_ids = np.arange(source_segments[0].n_atoms, dtype=np.int64)
    order = np.argsort(source_ids, kind="stable")
    position = np.searchsorted(source_ids, ids, sorter=order)
    inside = position < len(source_ids)
    if not inside.all() or not np.array_equal(source_ids[order[position]], ids):
        return None
    return order[position]


def _converted(index):
    """True when reading *index* converts units (DCD Angstrom, H5MD in other units than h5mdtool's)."""
    def converts(segment):
        if segment.format in ("XTC", "TRR"):
            return False
        if segment.format == "H5MD":
            return any(float(e["factor"]) != 1.0 for e in segment.details["elements"].values())
        return True  # DCD, NetCDF, LAMMPS, TRZ, GSD...: stored in other units than h5mdtool's

    return any(converts(segment) for segment in index.segments)


class Differences:
    """The differing frames one rank found: a count and the first *limit* with details."""

    def __init__(self, limit):
        self.limit = limit
        self.count = 0
        self.first = []

    def add(self, frame, reasons):
        self.count += 1
        if len(self.first) < self.limit:
            self.first.append({"frame": int(frame), "differs": sorted(reasons), "reason": "; ".join(reasons[k] for k in sorted(reasons))})


def _beyond(mine, theirs, absolute, relative, per_frame=None):
    """Boolean array: where ``|mine - theirs|`` exceeds the tolerance, or either side is not finite."""
    if absolute == 0 and relative == 0 and per_frame is None:
        bad = mine != theirs
    else:
        a, b = mine.astype(np.float64), theirs.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            limit = absolute + relative * np.abs(b)
            if per_frame is not None:
                limit = limit + per_frame.reshape((-1,) + (1,) * (b.ndim - 1))
            bad = np.abs(a - b) > limit
    if mine.dtype.kind == "f" or theirs.dtype.kind == "f":
        bad |= ~np.isfinite(mine)
        bad |= ~np.isfinite(theirs)
    return bad


def _values_text(mine, theirs, unit):
    unit = f" {unit}" if unit else ""
    return f"{mine:g} instead of {theirs:g}{unit}"


def compare_block(mine, theirs, frames, tolerances, fields, box, found, compare_time=True):
    """Compare two filled FrameBlocks row by row; record differing *frames* (one per row) in *found*.

    A NaN or an infinity on either side is a difference whatever the tolerance. Time is
    compared only when *compare_time* (the file stores times).
    """
    n = theirs.n
    reasons = {}

    def note(frames, key, text):
        for row in frames:
            reasons.setdefault(int(row), {})[key] = text(int(row))

    step_bad = np.flatnonzero(mine.step[:n] != theirs.step[:n])
    note(step_bad, "step", lambda r: f"step {int(mine.step[r])} instead of {int(theirs.step[r])}")
    if compare_time:
        a, b = mine.time[:n], theirs.time[:n]
        with np.errstate(invalid="ignore", over="ignore"):
            time_bad = np.abs(a - b) > TIME_RELATIVE * np.abs(b) + 1e-12
        time_bad |= ~np.isfinite(a) | ~np.isfinite(b)
        note(np.flatnonzero(time_bad), "time", lambda r: f"time {_values_text(a[r], b[r], 'ps')}")
    for field in fields:
        a, b = getattr(mine, field)[:n], getattr(theirs, field)[:n]
        absolute, relative, scaled = tolerances[field]
        if absolute == 0 and relative == 0 and np.array_equal(a, b) and np.isfinite(b).all():
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            per_frame = scaled * np.abs(b).reshape(n, -1).max(axis=1) if scaled and b.size else None
        bad = _beyond(a, b, absolute, relative, per_frame)
        rows = np.flatnonzero(bad.reshape(n, -1).any(axis=1))

        def describe(row, field=field, a=a, b=b, bad=bad):
            atoms = int(bad[row].any(axis=1).sum())
            mine_row, theirs_row = a[row].astype(np.float64), b[row].astype(np.float64)
            nonfinite = bad[row] & ~(np.isfinite(mine_row) & np.isfinite(theirs_row))
            if nonfinite.any():
                atom, axis = (int(i) for i in np.argwhere(nonfinite)[0])
                return (f"{field} differ at {atoms} atom(s), {_values_text(mine_row[atom, axis], theirs_row[atom, axis], UNITS[field])} "
                        f"(atom {atom}; not finite)")
            deviation = np.abs(mine_row - theirs_row)
            deviation[~bad[row]] = 0.0
            atom = int(np.unravel_index(int(np.argmax(deviation)), deviation.shape)[0])
            return f"{field} differ at {atoms} atom(s), the most by {deviation.max():.3g} {UNITS[field]} (atom {atom})"

        note(rows, field, describe)
    if box:
        a, b = mine.edges[:n], theirs.edges[:n]
        absolute, scaled = tolerances["edges"]
        with np.errstate(invalid="ignore", over="ignore"):
            per_frame = scaled * np.abs(b).reshape(n, -1).max(axis=1) if scaled else None
        bad = _beyond(a, b, absolute, 0.0, per_frame)
        rows = np.flatnonzero(bad.reshape(n, -1).any(axis=1))

        def describe_box(row):
            mine_row, theirs_row = a[row].astype(np.float64), b[row].astype(np.float64)
            nonfinite = bad[row] & ~(np.isfinite(mine_row) & np.isfinite(theirs_row))
            if nonfinite.any():
                index = tuple(int(i) for i in np.argwhere(nonfinite)[0])
                return f"box {_values_text(mine_row[index], theirs_row[index], 'nm')} (not finite)"
            return f"box differs by {np.abs(mine_row - theirs_row).max():.3g} nm"

        note(rows, "box", describe_box)
    for row in sorted(reasons):
        found.add(int(frames[row]), reasons[row])


@entry_point
def compare_with_source(paths, sources, *, comm=None, tolerance=None, limit=10, progress=None, block_bytes=BLOCK_BYTES):
    """Compare an H5MD file (or split parts, in order) with its source trajectory.

    Parameters
    ----------
    paths : sequence of str
        The H5MD file, or the parts of a split trajectory in order (any format h5mdtool reads).
    sources : sequence of str or TrajectoryIndex
        The source trajectory's segments, or their index from :func:`h5mdtool.formats.scan`.
    tolerance : float, optional
        Absolute tolerance replacing the defaults for positions and box (nm), velocities
        (nm/ps) and forces (kJ/(mol nm)). Step is always exact.
    limit : int
        How many differing frames to describe.
    progress : bool, optional
        Progress bar on rank 0.
    block_bytes : int
        Memory for the blocks of one rank.

    Returns
    -------
    dict
        ``n_frames``, ``n_atoms`` and ``source_n_frames``, ``source_n_atoms``;
        ``atoms_by_id`` (True when the copy holds fewer atoms, compared with the source's
        atoms of its stored ids: :func:`source_atoms`);
        ``compared_frames`` (the common prefix), ``n_differing``, ``differing`` (the first
        frames, each with ``frame``, ``differs`` and a ``reason``), ``fields``,
        ``box_compared``, ``box_mismatch`` (a message or None), ``time_compared`` (False
        when the file stores no time), ``tolerances``.
        The same on every rank.

    Raises
    ------
    InputError
        If either side cannot be read (raised on every rank).
    """
    from ..parallel.progress import progress_bar

    source_index = sources if isinstance(sources, TrajectoryIndex) else scan(list(sources), comm=comm)
    copy_index, precisions, compare_time = root_call(comm, _scan_copy, list(paths))
    precision = precisions.get("positions")
    converted = _converted(copy_index) or _converted(source_index)
    result = {
        "n_frames": copy_index.n_frames, "n_atoms": copy_index.n_atoms,
        "source_n_frames": source_index.n_frames, "source_n_atoms": source_index.n_atoms,
        "compared_frames": 0, "n_differing": 0, "differing": [], "fields": [],
        "box_compared": False, "box_mismatch": None, "time_compared": compare_time, "n_ranks": comm.size,
        "atoms_by_id": False,
    }
    atoms = None
    if copy_index.n_atoms < source_index.n_atoms:
        atoms = source_atoms(copy_index.segments, source_index.segments, comm)
    if copy_index.n_atoms != source_index.n_atoms and atoms is None:
        return result
    result["atoms_by_id"] = atoms is not None
    fields = ["positions"] + [f for f in ("velocities", "forces") if copy_index.has(f) and source_index.has(f)]
    box = bool(copy_index.has("box") and source_index.has("box"))
    if copy_index.has("box") != source_index.has("box"):
        result["box_mismatch"] = (
            f"the file {'has' if copy_index.has('box') else 'has no'} box but the source "
            f"{'has one' if source_index.has('box') else 'has none'}; boxes not compared"
        )
    relative = CONVERSION_RELATIVE if converted else 0.0
    tolerances = {field: (0.0, relative, 0.0) for field in fields}
    for field, value in precisions.items():
        if field in tolerances:
            tolerances[field] = (value / 2, relative, 4 * TIME_RELATIVE)
    tolerances["edges"] = (0.0, BOX_RELATIVE if converted else 0.0)
    if tolerance is not None:
        tolerances = {field: (float(tolerance), 0.0, 0.0) for field in fields}
        tolerances["edges"] = (float(tolerance), 0.0)
    n = min(copy_index.n_frames, source_index.n_frames)
    result.update(
        compared_frames=n, fields=fields, box_compared=box,
        tolerances={
            "positions_absolute_nm": tolerances["positions"][0],
            "relative": tolerances["positions"][1],
            "lossy_precision_nm": precision,
            "lossy_precisions": precisions,
            "box": (f"{tolerance} nm" if tolerance is not None else
                    f"{BOX_RELATIVE} of the largest edge" if converted else "exact"),
            "time_relative": TIME_RELATIVE,
        },
    )
    start, stop = balanced_slices(n, comm.size)[comm.rank]
    frame_bytes = max(1, copy_index.n_atoms * 12 * len(fields) * 2)
    capacity = int(max(1, min(1024, block_bytes // frame_bytes, max(1, stop - start))))
    found = Differences(limit)
    with capture_errors() as failure:
        try:
            _compare_range(copy_index, source_index, fields, box, tolerances, start, stop, capacity, found,
                           progress_bar(n, "comparing", comm, enabled=progress), comm.size, compare_time, atoms)
        except H5mdToolError:
            raise
        except Exception as error:  # noqa: BLE001 - a damaged file must end every rank cleanly
            raise InputError(f"cannot read frames {start}-{stop}: {type(error).__name__}: {error}") from None
    agree(comm, failure[0])
    gathered = comm.allgather((found.count, found.first))
    first = sorted((d for _, part in gathered for d in part), key=lambda d: d["frame"])
    result["n_differing"] = sum(count for count, _ in gathered)
    result["differing"] = first[:limit]
    return result


def _compare_range(copy_index, source_index, fields, box, tolerances, start, stop, capacity, found, bar, n_ranks,
                   compare_time, atoms=None):
    """Compare frames ``[start, stop)``, element group by element group (fields sampled alike);
    the source's *atoms* (:func:`source_atoms`) with the copy's, all when None."""
    frames = np.arange(start, stop, dtype=np.int64)
    wanted = list(fields) + (["box"] if box else [])
    for name in fields:
        held = copy_index.fields[name][frames], source_index.fields[name][frames]
        for frame in frames[held[0] != held[1]]:
            where = "the file" if held[1][frame - start] else "the source"
            found.add(frame, {name: f"{name} present in {where} only"})
    with TrajectoryReader(copy_index, finite=False) as copy, \
            TrajectoryReader(source_index, atom_indices=atoms, finite=False) as source, bar:
        for group_fields, group_frames in source_index.element_groups(frames, wanted):
            atom_fields = [name for name in group_fields if name != "box"]
            group_frames = group_frames[copy_index.fields[atom_fields[0]][group_frames]]
            mine, theirs = copy.new_block(capacity, group_fields), source.new_block(capacity, group_fields)
            for first in range(0, len(group_frames), capacity):
                block_frames = group_frames[first:first + capacity]
                copy.read(block_frames, mine, group_fields)
                source.read(block_frames, theirs, group_fields)
                compare_block(mine, theirs, block_frames, tolerances, atom_fields, "box" in group_fields, found,
                              compare_time)
        bar.update(len(frames) * n_ranks)
