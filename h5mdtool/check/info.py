"""``h5mdtool info``: what an H5MD file holds and how it is laid out, with layout advice.

Frames, atoms, step and time ranges and intervals, the box, every dataset's storage (shape,
dtype, chunks, filters, stored and raw bytes) and what reading one frame costs, the
provenance h5mdtool recorded, and the findings of ``validate --profile all`` with the
``h5mdtool convert`` command that fixes the layout ones. The file is read with the same
guarded access as ``validate``: any content gives a description, never a traceback.
"""

import json
import math
import os
from dataclasses import asdict

import numpy as np

from ..h5md.codecs import PLUGIN_HINT
from ..parallel.errors import InputError
from ..parallel.mpi import entry_point, root_call
from . import lint
from .findings import ERROR, NOTE, WARNING, FileReport
from .h5access import (
    Access, heartbeat, is_dataset, is_group, isolated, open_hdf5, storage, text_of, walkable
)
from .validate import validate_file

#: Entries of step/time read in full; longer series are summarised from their ends.
SERIES_LIMIT = 10_000_000
#: Datasets described at most.
MAX_DATASETS = 1000
#: Chunks whose file address is looked up for the stripe alignment share. HDF5 1.10 walks
#: the chunk index for every lookup (by index or by coordinate: 0.9 ms each at 58,800
#: chunks), so looking at every chunk was quadratic (3 minutes); an even sample is not.
ALIGNMENT_SAMPLE = 256
#: A series is regular when its intervals agree within this many units in the last place
#: at its largest value, in float32 or its own dtype if coarser: many writers keep time in
#: float32 (XTC, TRR, MDAnalysis's H5MDWriter), and h5mdtool stores those values as float64.
REGULAR_ULPS = 4


def missing_filters_note(dataset):
    """``not shown because ...`` when *dataset* needs a filter this HDF5 lacks, else None."""
    try:
        missing = lint.unavailable_filters(dataset)
    except Exception as error:  # noqa: BLE001
        return f"not shown because its filters cannot be read ({type(error).__name__})"
    if not missing:
        return None
    return f"not shown because {', '.join(missing)} is not available (pip install hdf5plugin; import hdf5plugin)"


def _number(value, integer):
    return int(value) if integer else float(value)


def _regular(values, dtype):
    """True when the intervals of *values* agree within the resolution of *dtype*."""
    diffs = np.diff(values)
    if diffs.size == 0:
        return True
    if dtype.kind in "iu":
        return bool(np.all(diffs == diffs[0]))
    scale = float(np.max(np.abs(values)))
    coarsest = np.float32 if dtype.itemsize >= 4 else dtype.type
    resolution = float(np.spacing(coarsest(scale))) if np.isfinite(scale) else np.inf
    return bool(np.all(np.abs(diffs - np.median(diffs)) <= REGULAR_ULPS * resolution))


def _series(a, dataset, path, n_frames):
    """Summary of a step or time dataset: mode, first, last, interval, regular, unit, dtype.

    Integers stay integers (steps are printed exactly); regularity is judged within the
    dtype's resolution. Only the entries that belong to frames and are stored are read; a
    series that cannot be summarised gets a ``note`` saying why.
    """
    if dataset is None or not is_dataset(dataset):
        return None
    shape = a.shape(dataset, path)
    dtype = dataset.dtype
    record = {"mode": None, "first": None, "last": None, "interval": None, "regular": None,
              "unit": text_of(a.attr(dataset, "unit", path)), "dtype": str(dtype)}
    if dtype.kind not in "iuf":
        return dict(record, note=f"not shown because it holds {dtype}, not numbers")
    record["mode"] = "fixed" if shape == () else "explicit"
    note = missing_filters_note(dataset)
    if note:
        return dict(record, note=note)
    integer = dtype.kind in "iu"
    if shape == ():
        increment = a.read(dataset, path)
        offset = a.attr(dataset, "offset", path)
        offset = 0 if offset is None else offset
        try:
            first, interval = _number(np.asarray(offset).item(), integer), _number(np.asarray(increment).item(), integer)
        except (TypeError, ValueError, AttributeError):
            return dict(record, mode="fixed", note="not shown because the increment or its offset is not a number")
        return dict(record, mode="fixed", first=first, last=first + interval * max(0, n_frames - 1),
                    interval=interval, regular=True)
    record["mode"] = "explicit"
    if not shape or len(shape) != 1 or shape[0] == 0:
        return dict(record, note=f"not shown because it has shape {shape}")
    count = shape[0] if n_frames is None else min(shape[0], n_frames)
    try:
        facts = storage(dataset)
    except Exception as error:  # noqa: BLE001
        return dict(record, note=f"not shown because its storage cannot be read ({type(error).__name__})")
    if facts["external"]:
        return dict(record, note="not shown because its data live in other files (not read)")
    stored = shape[0] if facts["complete"] else (facts["stored_rows"] or 0)
    if stored < count:
        return dict(record, note=f"not shown because only {stored} of its {shape[0]} entries are stored")
    if count > SERIES_LIMIT:
        ends = [a.read(dataset, path, np.s_[0:1]), a.read(dataset, path, np.s_[count - 1:count])]
        if any(e is None for e in ends):
            return dict(record, note="not shown because it cannot be read")
        first, last = _number(ends[0][0], integer), _number(ends[1][0], integer)
        return dict(record, first=first, last=last, interval=(last - first) / (count - 1))
    values = a.read(dataset, path, np.s_[0:count])
    if values is None:
        return dict(record, note="not shown because it cannot be read")
    values = np.asarray(values)
    diffs = np.diff(values.astype(np.float64) if not integer else values)
    interval = None
    if diffs.size:
        median = np.median(diffs)
        interval = int(median) if integer and float(median).is_integer() else float(median)
    finite = bool(np.all(np.isfinite(values))) if not integer else True
    if not integer and dtype != np.float32 and finite and np.array_equal(values, values.astype(np.float32)):
        record["printed_as"] = "float32"  # float32 values kept as float64: print them as float32
    return dict(record, first=_number(values[0], integer), last=_number(values[-1], integer), interval=interval,
                regular=_regular(values, dtype) if finite else False)


def _box(a, group, path):
    box = a.child(group, "box", f"{path}/box")
    if box is None or not is_group(box):
        return None
    boundary = a.attr(box, "boundary", f"{path}/box")
    texts = [text_of(b) for b in np.atleast_1d(boundary)] if boundary is not None else []
    dimension = a.attr(box, "dimension", f"{path}/box")
    record = {"dimension": int(dimension) if np.ndim(dimension) == 0 and np.asarray(dimension).dtype.kind in "iu" else None,
              "boundary": texts, "time_dependent": None, "kind": None, "first_edges": None}
    edges = a.child(box, "edges", f"{path}/box/edges")
    if edges is None:
        record["kind"] = "open (no edges)" if all(t == "none" for t in texts) else "no edges"
        return record
    record["time_dependent"] = is_group(edges)
    value = a.child(edges, "value", f"{path}/box/edges/value") if is_group(edges) else edges
    if value is None or not is_dataset(value):
        return record
    shape = a.shape(value, f"{path}/box/edges")
    if not shape:
        return record
    note = missing_filters_note(value)
    if note:
        record["note"] = f"edges {note}"
        return record
    data_shape = shape[1:] if record["time_dependent"] else shape
    if record["time_dependent"] and shape[0] == 0:
        return record
    first = a.read(value, f"{path}/box/edges", np.s_[0] if record["time_dependent"] else ())
    if first is not None and np.asarray(first).dtype.kind in "iuf" and len(data_shape) in (1, 2):
        first = np.asarray(first, dtype=np.float64)
        record["first_edges"] = first.tolist()
        if len(data_shape) == 2:
            off_diagonal = first - np.diag(np.diag(first)) if first.shape[0] == first.shape[-1] else first
            record["kind"] = "orthorhombic (stored as a matrix)" if not np.any(off_diagonal) else "triclinic"
        else:
            record["kind"] = "cuboid"
    if all(t == "none" for t in texts) and texts:
        record["kind"] = f"open ({record['kind']} edges as placeholders)" if record["kind"] else "open"
    return record


def describe_dataset(dataset, path=None):
    """Shape, dtype, chunks, filters, stored and raw bytes, and one-frame read cost of *dataset*."""
    shape = dataset.shape
    dtype = dataset.dtype
    filters = lint.dataset_filters(dataset)
    record = {
        "shape": None if shape is None else [int(s) for s in shape],
        "dtype": str(dtype),
        "chunks": list(dataset.chunks) if dataset.chunks else None,
        "filters": [name for _, name in filters],
        "plugin_filters": [name for code, name in filters if code in lint.HDF5PLUGIN_FILTERS],
        "raw_bytes": 0 if shape is None else math.prod(int(s) for s in shape) * dtype.itemsize,
        "stored_bytes": int(dataset.id.get_storage_size()) if walkable(dataset) else None,
    }
    if record["filters"] and "gzip" in record["filters"]:
        record["compression_level"] = dataset.compression_opts
    note = missing_filters_note(dataset)
    if note:
        record["note"] = note
    if shape is not None and len(shape) == 3:
        record["one_frame_read"] = lint.one_frame_read(shape, dataset.chunks, dtype.itemsize)
    precision = dataset.attrs.get("precision") if "precision" in dataset.attrs else None
    if precision is not None:
        record["precision"] = float(precision)
    return record


def aligned_share(dataset, interval):
    """Share of *dataset*'s chunks whose file address is a multiple of *interval* bytes.

    At most :data:`ALIGNMENT_SAMPLE` chunks, spread evenly over the chunk grid, are looked
    up by coordinate; chunks never written are skipped. None when the chunk index is too
    large to walk (:data:`h5mdtool.check.h5access.WALKED_CHUNKS`: HDF5 1.10.8 walks it for each).
    """
    if not walkable(dataset):
        return None
    count = dataset.id.get_num_chunks()
    chunks = dataset.chunks
    grid = [-(-int(n) // int(c)) for n, c in zip(dataset.shape, chunks)]
    declared = math.prod(grid)
    picks = np.unique(np.linspace(0, declared - 1, min(declared, ALIGNMENT_SAMPLE)).astype(np.int64)) if declared else []
    inspected = aligned = 0
    for flat in picks:
        corner = tuple(int(i) * int(c) for i, c in zip(np.unravel_index(int(flat), grid), chunks))
        address = dataset.id.get_chunk_info_by_coord(corner).byte_offset
        heartbeat()
        if address is None:
            continue
        inspected += 1
        aligned += address % interval == 0
    return {"stripe_size": interval, "chunks": count, "inspected": inspected, "aligned": aligned,
            "share": aligned / inspected if inspected else None}


def _datasets(a, handle):
    """Every dataset reachable by hard links, described (failures described as errors)."""
    found = {}
    for _, _, path, _, obj in a.walk(handle):
        if obj is not None and is_dataset(obj):
            try:
                found[path] = describe_dataset(obj, path)
            except Exception as error:  # noqa: BLE001
                found[path] = {"error": f"{type(error).__name__}: {error}"}
            if len(found) >= MAX_DATASETS:
                break
    return found


#: Particle groups described at most.
MAX_GROUPS = 100
#: What :func:`_describe_group` fills in, per particle group (the first is also at the top level).
GROUP_KEYS = ("n_frames", "n_atoms", "elements", "step", "time", "box")


def _describe_group(a, group, group_path):
    """Frames, atoms, elements, step, time and box of one particle group."""
    record = {"path": group_path, "n_frames": None, "n_atoms": None, "elements": [], "step": None, "time": None, "box": None}
    for element_name in ("position", "velocity", "force"):
        element = a.child(group, element_name, f"{group_path}/{element_name}")
        value = a.child(element, "value", f"{group_path}/{element_name}/value") if element is not None and is_group(element) else None
        shape = a.shape(value, element_name) if value is not None and is_dataset(value) else None
        if not shape or len(shape) != 3:
            continue
        record["elements"].append(element_name)
        if record["n_frames"] is None:
            record["n_frames"], record["n_atoms"] = shape[0], shape[1]
            for series in ("step", "time"):
                dataset = a.child(element, series, f"{group_path}/{element_name}/{series}")
                record[series] = _series(a, dataset, series, shape[0])
    record["box"] = _box(a, group, group_path)
    return record


def _describe_trajectory(a, handle, result):
    """Every particle group; the one MDAnalysis reads (``trajectory``, else the first) also at the top level."""
    particles = a.child(handle, "particles", "/particles")
    names = a.names(particles, "/particles") if particles is not None and is_group(particles) else []
    groups = []
    for name in names[:MAX_GROUPS]:
        group = a.child(particles, name, f"/particles/{name}")
        if group is not None and is_group(group):
            groups.append(_describe_group(a, group, f"/particles/{name}"))
    result["particle_groups"] = groups
    if not groups:
        return
    primary = next((g for g in groups if g["path"] == "/particles/trajectory"), groups[0])
    result["particle_group"] = primary["path"]
    result.update({key: primary[key] for key in GROUP_KEYS})


def _describe_datasets(a, handle, result):
    result["datasets"] = _datasets(a, handle)


def _describe_provenance(a, handle, result):
    """The JSON record h5mdtool wrote, and the stripe alignment of positions it asked for."""
    record = a.child(a.child(handle, "parameters", "/parameters"), "h5mdtool", "/parameters/h5mdtool")
    text = text_of(a.attr(record, "json", "/parameters/h5mdtool")) if record is not None else None
    provenance = json.loads(text) if text else None
    result["provenance"] = provenance
    layout = provenance.get("layout") if isinstance(provenance, dict) else None
    stripe = layout.get("stripe_size") if isinstance(layout, dict) else None
    group_path = result["particle_group"]
    value = a.child(handle, "particles", "") if stripe and group_path else None
    for name in (group_path.rsplit("/", 1)[-1] if group_path else None, "position", "value"):
        value = a.child(value, name, "") if value is not None and is_group(value) else None
    if value is not None and is_dataset(value) and value.chunks:
        result["stripe_alignment"] = aligned_share(value, int(stripe))


def _describe_topology(a, handle, result):
    """What the topology the file carries holds (``convert --topology``), or None."""
    from ..h5md.topology import PARTICLES, VMD, read_stored_topology

    if f"{VMD}/name" not in handle or f"{PARTICLES}/species" not in handle:
        return
    record = read_stored_topology(result["file"], handle)
    result["topology"] = {
        "atoms": len(record["names"]), "residues": len(record["resnames"]), "segments": len(record["segids"]),
        "kinds": len(set(zip(record["names"], record["types"]))),
        "bonds": len(record["bonds"]) if "bonds" in record else 0,
        "attributes": [name for name, present in (
            ("names", True), ("types", True), ("elements", "elements" in record or "atomic_numbers" in record),
            ("chains", "chains" in record), ("masses", "masses" in record), ("charges", "charges" in record))
            if present],
        "source": record["source"],
    }


def describe_file(path):
    """The ``info`` record of *path* (serial; see :func:`info`).

    Raises
    ------
    UnreadableError
        If the file cannot be opened as HDF5.
    """
    report = validate_file(path, profile="all")
    result = {"file": path, "readable": True, "bytes": os.path.getsize(path), "particle_group": None, "n_frames": None,
              "n_atoms": None, "elements": [], "step": None, "time": None, "box": None, "particle_groups": [],
              "datasets": {}, "provenance": None, "topology": None, "problems": []}
    with open_hdf5(path) as handle:
        a = Access(handle, FileReport(path))  # problems were reported by validate already
        for what, section in (("the trajectory", _describe_trajectory), ("the datasets", _describe_datasets),
                              ("the provenance", _describe_provenance), ("the topology", _describe_topology)):
            try:
                section(a, handle, result)
            except Exception as error:  # noqa: BLE001 - damaged content: describe what can be
                result["problems"].append(f"cannot describe {what}: {type(error).__name__}: {error}")
    result["findings"] = [asdict(f) for f in report.findings]
    result["errors"], result["warnings"], result["notes"] = (report.count(s) for s in (ERROR, WARNING, NOTE))
    # one command fixes every layout finding (each relayouts the whole file); the longest
    # keeps the most (compression, level, precision)
    fixes = {f.fix for f in report.findings if f.rule.startswith("LINT") and f.fix and f.fix.startswith("h5mdtool ")}
    result["fix_command"] = max(sorted(fixes), key=len) if fixes else None
    plugins = {name for d in result["datasets"].values() for name in d.get("plugin_filters", ())}
    result["plugin_filters"] = sorted(plugins)
    result["plugin_hint"] = PLUGIN_HINT if plugins else None
    return result


@entry_point
def info(path, *, comm=None):
    """Describe an H5MD file: frames, atoms, time, box, datasets, provenance, findings.

    Parameters
    ----------
    path : str

    Returns
    -------
    dict
        See docs/validation.md; the same on every rank (rank 0 reads the file).

    Raises
    ------
    UnreadableError
        If the file cannot be opened as HDF5 (exit status 1).
    InputError
        If libhdf5 crashes reading the file (damaged metadata; serial runs only).
    """
    return root_call(comm, _describe_isolated, os.fspath(path))


class HDF5ReadFailure(InputError):
    """libhdf5 crashed (``FILE004``) or made no progress (``FILE005``) reading the file."""

    def __init__(self, message, rule):
        super().__init__(message)
        self.rule = rule

    def __reduce__(self):
        return type(self), (str(self), self.rule)


def _describe_isolated(path):
    import MDAnalysis.coordinates.H5MD  # noqa: F401 - imported once, before the forked reader

    outcome = isolated(describe_file, path)
    if outcome[0] == "crash":
        raise HDF5ReadFailure(f"{path}: libhdf5 crashed (signal {outcome[1]}) while reading the file: its "
                              "metadata is damaged", "FILE004")
    if outcome[0] == "timeout":
        raise HDF5ReadFailure(f"{path}: reading the file made no progress for {outcome[1]:g} s (libhdf5 loops on "
                              "damaged metadata?); stopped (H5MDTOOL_READ_TIMEOUT sets the limit)", "FILE005")
    if outcome[0] == "error":
        raise outcome[1]
    return outcome[1]


def unreadable_record(path, error):
    """The ``info`` record of a file that could not be read: its one finding, nothing described.

    Parameters
    ----------
    path : str
    error : InputError
        What :func:`info` raised: :class:`~h5mdtool.parallel.errors.UnreadableError` (rule ``FILE001``)
        or libhdf5's crash or stall (``FILE004``, ``FILE005``).

    Returns
    -------
    dict
        The keys of a described file, empty, with ``readable`` false and ``findings``
        holding the one finding.
    """
    report = FileReport(os.fspath(path))
    report.add(getattr(error, "rule", "FILE001"), "/", str(error))
    return {"file": report.file, "readable": False, "bytes": None, "particle_group": None, "n_frames": None,
            "n_atoms": None, "elements": [], "step": None, "time": None, "box": None, "particle_groups": [],
            "datasets": {}, "provenance": None, "problems": [], "findings": [asdict(f) for f in report.findings],
            "errors": 1, "warnings": 0, "notes": 0, "fix_command": None, "plugin_filters": [], "plugin_hint": None}
