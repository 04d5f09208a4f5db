"""H5MD files, read with h5py (serially, or with MPI-IO on several ranks).

H5MD lets every time-dependent element carry its own ``step`` and ``time``: explicit 1-D
datasets, or scalar ones holding the increment with an optional ``offset`` attribute (fixed
interval), and ``time`` may be absent. The scan reads the particle group MDAnalysis reads
(the first one listed under ``/particles``) unless another is named, and makes the frames of
the trajectory the union of the steps of ``position``, ``velocity`` and ``force``; each
element is present at the frames whose step it samples. The box may be absent, fixed
(``box/edges`` a dataset of shape (3,) or (3, 3)) or time-dependent (``box/edges/value``
(n, 3) or (n, 3, 3), with its own steps), periodic in some dimensions only; edges without a
``unit`` attribute are in the positions' unit, as MDAnalysis reads them.

Units are converted to h5mdtool's (nm, ps, nm/ps, kJ/(mol nm)) from the ``unit`` strings of
the H5MD units module, which may start with a numeric factor (``10 pm``). Per-atom values
are read as a span of atoms (first to last selected) into a reused buffer and picked in
memory: h5py's point selection along the atom axis was about 4x slower (docs/benchmark.md).
Compressed datasets chunked by whole frames are decompressed in threads
(:class:`~h5mdtool.h5md.chunkcodec.ChunkReader`).
"""


import numpy as np

from ..h5md.units import text, unit_factor
from ..parallel.errors import InputError
from .base import Format, Segment, file_stat, hdf5_open_error

#: H5MD element -> (h5mdtool field, unit kind).
ELEMENTS = {"position": ("positions", "length"), "velocity": ("velocities", "speed"), "force": ("forces", "force")}
FIELD_ELEMENT = {field: element for element, (field, _) in ELEMENTS.items()}

#: Filters HDF5 and h5py provide themselves: deflate, shuffle, Fletcher32, szip, N-bit,
#: scale-offset, LZF. Any other is a plugin's (hdf5plugin).
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})


def needs_plugin(dataset):
    """True when *dataset*'s filter pipeline holds a filter HDF5 and h5py lack (an hdf5plugin one)."""
    plist = dataset.id.get_create_plist()
    return any(plist.get_filter(i)[0] not in BUILTIN_FILTERS for i in range(plist.get_nfilters()))


def _factor(dataset, kind, where, default=1.0):
    unit = dataset.attrs.get("unit")
    return default if unit is None else unit_factor(unit, kind, where)


def series(group, name, length, where):
    """An element's ``step`` or ``time``: explicit 1-D, fixed (scalar increment + offset), or None.

    Raises
    ------
    InputError
        If it is not 1-D of *length* entries nor a scalar.
    """
    dataset = group.get(name)
    if dataset is None:
        return None
    if not hasattr(dataset, "shape"):
        raise InputError(f"{where}/{name} is not a dataset")
    if dataset.shape == ():
        offset = dataset.attrs.get("offset", 0)
        return np.asarray(offset, np.float64) + np.asarray(dataset[()], np.float64) * np.arange(length)
    if dataset.shape != (length,):
        raise InputError(f"{where}/{name} has shape {dataset.shape}; the element has {length} entries")
    return dataset[()]


def _particle_group(path, handle, group):
    particles = handle.get("particles")
    if particles is None or not hasattr(particles, "keys"):
        raise InputError(f"{path}: no /particles group: not an H5MD trajectory")
    names = list(particles)
    if not names:
        raise InputError(f"{path}: /particles holds no particle group")
    if group is None:
        # MDAnalysis's H5MDReader reads the first group listed
        return names[0]
    if group not in names:
        raise InputError(f"{path}: no particle group {group!r}; the file has {', '.join(names)}")
    return group


def _group_names(path):
    """Names of the particle groups of an H5MD file, or [] when it cannot tell."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            return list(handle["particles"])
    except Exception:  # noqa: BLE001 - only used to word a message
        return []


def _steps(values, where):
    steps = np.asarray(values)
    if steps.dtype.kind == "f":
        if not np.all(np.isfinite(steps)) or np.any(steps != np.round(steps)):
            raise InputError(f"{where}/step holds values that are not whole numbers")
    steps = steps.astype(np.int64)
    bad = np.flatnonzero(np.diff(steps) <= 0)
    if len(bad):
        raise InputError(
            f"{where}/step: entry {bad[0] + 1} is step {steps[bad[0] + 1]} after step {steps[bad[0]]}; "
            "steps must increase"
        )
    return steps


def _element(path, group, name):
    """Shape, steps, times (ps or None), unit factor and dtype of one particle element."""
    where = f"{path}: {group.name}/{name}"
    element = group[name]
    value = element.get("value") if hasattr(element, "get") else None
    if value is None or not hasattr(value, "shape"):
        raise InputError(f"{where} has no value dataset")
    if value.ndim != 3 or value.shape[2] != 3 or value.shape[0] < 1:
        raise InputError(f"{where}/value has shape {value.shape}; h5mdtool reads (frames, atoms, 3)")
    if value.dtype.kind not in "fiu":
        raise InputError(f"{where}/value holds {value.dtype}, not numbers")
    n = value.shape[0]
    steps = series(element, "step", n, where)
    if steps is None:
        raise InputError(f"{where} has no step dataset")
    times = series(element, "time", n, where)
    time_factor = 1.0 if times is None else _factor(element["time"], "time", f"{where}/time")
    kind = ELEMENTS[name][1]
    return {
        "path": value.name, "n_atoms": value.shape[1], "steps": _steps(steps, where),
        "times": None if times is None else np.asarray(times, np.float64) * time_factor,
        "factor": _factor(value, kind, f"{where}/value"), "dtype": value.dtype.str,
        "chunks": value.chunks, "compression": value.compression, "compression_opts": value.compression_opts,
        "plugin": needs_plugin(value), "filters": value.id.get_create_plist().get_nfilters(),
    }


def _box(path, group, position_factor):
    """Boundary and edges of the particle group's box."""
    where = f"{path}: {group.name}/box"
    box = group.get("box")
    if box is None or not hasattr(box, "attrs"):
        return ["none"] * 3, None
    dimension = box.attrs.get("dimension", 3)
    if int(np.asarray(dimension).reshape(-1)[0]) != 3:
        raise InputError(f"{where} has dimension {dimension}; h5mdtool reads 3-dimensional systems")
    boundary = [text(b) for b in np.atleast_1d(box.attrs.get("boundary", ["periodic"] * 3))]
    if len(boundary) == 1:
        boundary *= 3
    if len(boundary) != 3 or any(b not in ("periodic", "none") for b in boundary):
        raise InputError(f"{where}: boundary {boundary} is not three of 'periodic' or 'none'")
    edges = box.get("edges")
    if edges is None:
        return boundary, None
    if hasattr(edges, "shape"):  # fixed in time
        values = np.asarray(edges[()], np.float64) * _factor(edges, "length", f"{where}/edges", position_factor)
        return boundary, {"kind": "fixed", "value": _edges_matrix(values[None], f"{where}/edges")[0]}
    value = edges.get("value")
    if value is None or not hasattr(value, "shape") or value.ndim not in (2, 3) or value.shape[1:] not in ((3,), (3, 3)):
        shape = None if value is None else getattr(value, "shape", None)
        raise InputError(f"{where}/edges/value has shape {shape}; H5MD boxes are (n, 3) or (n, 3, 3)")
    n = value.shape[0]
    steps = series(edges, "step", n, f"{where}/edges")
    if steps is None:
        raise InputError(f"{where}/edges has no step dataset")
    return boundary, {"kind": "series", "path": value.name, "steps": _steps(steps, f"{where}/edges"),
                      "factor": _factor(value, "length", f"{where}/edges/value", position_factor)}


def _set_box_rows(group, box, block=1 << 16):
    """Rows of a box series whose edges are not all 0 (read in blocks), or None for a fixed box."""
    if box is None or box["kind"] != "series":
        return None
    value = group.file[box["path"]]
    rows = np.zeros(value.shape[0], bool)
    for first in range(0, len(rows), block):
        data = np.asarray(value[first:first + block])
        rows[first:first + len(data)] = data.reshape(len(data), -1).any(axis=1)
    return rows


def _edges_matrix(values, where):
    """(k, 3) edge lengths or (k, 3, 3) edge vectors as (k, 3, 3) matrices."""
    if values.ndim == 2 and values.shape[1] == 3:
        return np.stack([np.diag(row) for row in values])
    if values.ndim == 3 and values.shape[1:] == (3, 3):
        return values
    raise InputError(f"{where} has shape {values.shape[1:]} per frame; H5MD boxes are (3,) or (3, 3)")


def _rows(element_steps, steps):
    """Row of each frame in an element sampling *element_steps* (-1 where it has none), or None if all."""
    if len(element_steps) == len(steps) and np.array_equal(element_steps, steps):
        return None
    rows = np.searchsorted(element_steps, steps)
    rows[rows >= len(element_steps)] = len(element_steps) - 1
    return np.where(element_steps[rows] == steps, rows, -1).astype(np.int64)


class H5MDFormat(Format):
    """H5MD 1.0/1.1 files: positions, velocities, forces and box of one particle group."""

    name = "H5MD"
    extensions = (".h5md", ".h5")
    # h5py's import (40 ms) delayed the first block read ahead, and so rank 0, on ranks
    # that had not opened the file yet (rank 0 inspects it for them)
    decoders = ("h5py",)

    @classmethod
    def scan(cls, path, on_truncated="error", group=None, handle=None):
        """See :meth:`Format.scan`; *handle*: the file already open (an ``h5py.File``), read
        and left open."""
        import contextlib

        import h5py

        from ..h5md.codecs import register_plugins

        register_plugins()  # files compressed with hdf5plugin's filters
        stat = file_stat(path)
        try:
            with (contextlib.nullcontext(handle) if handle is not None else h5py.File(path, "r")) as handle:
                name = _particle_group(path, handle, group)
                particles = handle["particles"][name]
                found = {element: _element(path, particles, element) for element in ELEMENTS if element in particles}
                if "position" not in found:
                    raise InputError(f"{path}: particle group {name!r} has no position element")
                boundary, box = _box(path, particles, found["position"]["factor"])
                set_rows = _set_box_rows(particles, box)
                box_plugin = box is not None and box["kind"] == "series" and needs_plugin(handle[box["path"]])
                others = [other for other in handle["particles"] if other != name]
        except InputError as error:
            if group is None and len(_group_names(path)) > 1:
                raise InputError(f"{error} (h5mdtool reads the first particle group listed, as MDAnalysis "
                                 "does; name another with --group)") from None
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as error:
            raise hdf5_open_error(path, error) from None
        n_atoms = found["position"]["n_atoms"]
        for element, facts in found.items():
            if facts["n_atoms"] != n_atoms:
                raise InputError(f"{path}: {element} has {facts['n_atoms']} atoms but position has {n_atoms}")
        steps = _union([facts["steps"] for facts in found.values()])
        fields, elements = {}, {}
        for element, facts in found.items():
            rows = _rows(facts["steps"], steps)
            field = ELEMENTS[element][0]
            fields[field] = np.ones(len(steps), bool) if rows is None else rows >= 0
            elements[field] = {key: facts[key] for key in ("path", "factor", "dtype", "chunks", "compression",
                                                            "compression_opts", "plugin", "filters")}
            elements[field]["rows"] = rows
        time = _times(path, found, steps)
        if box is not None:  # edges all 0 are no box, as in XTC and TRR (MDAnalysis reads None)
            if box["kind"] == "fixed":
                fields["box"] = fields["positions"] & bool(box["value"].any())
            else:
                box["rows"] = _rows(box.pop("steps"), steps)
                rows = np.arange(len(steps)) if box["rows"] is None else box["rows"]
                fields["box"] = (rows >= 0) & set_rows[np.maximum(rows, 0)]
        return Segment(
            path=path, format=cls.name, n_atoms=int(n_atoms), n_frames=len(steps), size=stat.st_size,
            mtime=stat.st_mtime, step=steps, time=time, fields=fields,
            dtype="float64" if any(np.dtype(e["dtype"]) == np.float64 for e in elements.values()) else "float32",
            boundary=boundary,
            details={"group": f"particles/{name}", "elements": elements, "box": box, "other_groups": others,
                     "plugins": any(element["plugin"] for element in elements.values()) or box_plugin},
        )

    def __init__(self, segment, atom_indices=None, comm=None):
        super().__init__(segment, atom_indices)
        from ..h5md.chunkcodec import ChunkReader
        from ..h5md.codecs import register_plugins
        from ..parallel.mpi import SerialComm, open_h5, threads_per_rank

        if segment.details.get("plugins", True):  # importing hdf5plugin takes 0.1 s
            register_plugins()
        comm = comm or SerialComm()
        self.comm_size = comm.size
        # HDF5 reads an unfiltered chunk that fits its chunk cache (a one-frame chunk does)
        # into the cache, then copies the values out; without a cache, straight into the
        # block: 0.5 s against 0.6 s for h5py to read 58,800 AdK frames in blocks of 209,
        # and on 2 ranks a copy fewer through the memory bandwidth they share. Frames are
        # read once; filtered chunks HDF5 decompresses keep the cache (read in parts, each
        # part would decompress the whole chunk again).
        filtered = any(element.get("filters", 1) for element in segment.details["elements"].values())
        try:
            self.handle = open_h5(segment.path, "r", comm, **({} if filtered else {"rdcc_nbytes": 0}))
        except OSError as error:
            raise hdf5_open_error(segment.path, error) from None
        indices = self.atom_indices
        self.span = (0, segment.n_atoms) if indices is None else (int(indices.min()), int(indices.max()) + 1)
        pick = None if indices is None else indices - self.span[0]
        if pick is not None and np.array_equal(pick, np.arange(self.span[1] - self.span[0])):
            pick = None  # the selection is the whole span: no copy
        self.pick = pick
        self.buffers = {}
        self.datasets = {}  # path -> h5py Dataset, opened once (an open costs a lookup in the file)
        # even one decoding thread beats HDF5's filters, whose byte unshuffle is a plain loop
        # (docs/performance.md, bench rmsd on one core)
        self.chunks = ChunkReader(threads_per_rank(comm))

    def _dataset(self, path):
        """The h5py Dataset at *path*, opened on first use."""
        dataset = self.datasets.get(path)
        if dataset is None:
            dataset = self.datasets[path] = self.handle[path]
        return dataset

    def _buffer(self, dtype, count):
        """A reused (count, span, 3) array of *dtype*, grown as needed."""
        width = self.span[1] - self.span[0]
        buffer = self.buffers.get(dtype)
        if buffer is None or len(buffer) < count:
            buffer = self.buffers[dtype] = np.empty((count, width, 3), dtype)
        return buffer[:count]

    def _values(self, dataset, rows):
        """The selected atoms of element *rows* (increasing), in the dataset's type."""
        first, last = self.span
        if len(rows) == 1 or np.all(np.diff(rows) == 1):
            values = self._buffer(dataset.dtype, len(rows))
            self._read(dataset, int(rows[0]), int(rows[-1]) + 1, (first, last), values)
        else:
            values = dataset[rows.tolist(), first:last]
        return values if self.pick is None else np.take(values, self.pick, axis=1)

    def read_frames(self, frames, block, row, fields):
        details = self.segment.details
        count = len(frames)
        rows = slice(row, row + count)
        element_rows = None
        try:
            for name in fields:
                element = details["elements"][name]
                element_rows = frames if element["rows"] is None else element["rows"][frames]
                dataset = self._dataset(element["path"])
                target = getattr(block, name)[rows]
                contiguous = count == 1 or np.all(np.diff(element_rows) == 1)
                if (contiguous and self.pick is None and element["factor"] == 1.0
                        and dataset.dtype == target.dtype and self.span == (0, self.segment.n_atoms)):
                    self._read(dataset, int(element_rows[0]), int(element_rows[-1]) + 1, self.span, target)
                    continue
                values = self._values(dataset, element_rows)
                if element["factor"] == 1.0:
                    target[...] = values
                else:  # in float64, rounded once to the block's type
                    np.multiply(values, element["factor"], out=target, dtype=np.float64, casting="unsafe")
            block.edges[rows] = self._edges(frames)
        except InputError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise self.error(self._first_unreadable(frames, block, row, fields, element_rows, error), error) from None
        return row + count

    def _first_unreadable(self, frames, block, row, fields, element_rows, error):
        """The first of *frames* that cannot be read (a damaged chunk), for the message.

        h5mdtool's chunk reader names the first row it asked of the chunk it could not
        decode; otherwise a serial reader reads each frame on its own.
        """
        from ..h5md.chunkcodec import DamagedChunk

        if isinstance(error, DamagedChunk) and element_rows is not None:
            where = int(np.searchsorted(element_rows, error.row))
            if where < len(frames):
                return frames[where]
        if len(frames) > 1 and self.comm_size == 1:
            for frame in frames:
                try:
                    self.read_frames(np.array([frame]), block, row, fields)
                except InputError:
                    return frame
        return frames[0]

    def _edges(self, frames):
        box = self.segment.details["box"]
        present = self.segment.fields.get("box")
        edges = np.zeros((len(frames), 3, 3), np.float64)
        if box is None:
            return edges
        mask = present[frames]
        if box["kind"] == "fixed":
            edges[mask] = box["value"]
            return edges
        rows = frames if box["rows"] is None else box["rows"][frames]
        wanted = rows[mask]
        if len(wanted):
            values = self._dataset(box["path"])[wanted.tolist()]
            edges[mask] = _edges_matrix(np.asarray(values, np.float64) * box["factor"], box["path"])
        return edges

    def _read(self, dataset, start, stop, span, out):
        """``out[...] = dataset[start:stop, span[0]:span[1]]``, filtered chunks decompressed in h5mdtool's threads."""
        self.chunks.read(dataset, start, stop, span, out)

    def close(self):
        self.chunks.close()
        self.datasets.clear()
        self.handle.close()


def _union(step_arrays):
    """The sorted union of increasing step arrays (``np.unique`` of numpy 2 hashes: 0.04 s
    for 58,800 steps, where sorting what is nearly sorted takes a millisecond)."""
    if len(step_arrays) == 1:
        return step_arrays[0]
    steps = np.sort(np.concatenate(step_arrays), kind="stable")
    return steps[np.concatenate([[True], np.diff(steps) != 0])]


def _times(path, found, steps):
    """Time of every frame in ps, from the elements that record time; None if none does."""
    recorded = [facts for facts in found.values() if facts["times"] is not None]
    if not recorded:
        return None
    time = np.zeros(len(steps))
    known = np.zeros(len(steps), bool)
    for facts in recorded:
        index = np.searchsorted(steps, facts["steps"])
        both = known[index]
        same = (time[index][both] == facts["times"][both]) | (np.isnan(time[index][both]) & np.isnan(facts["times"][both]))
        if not same.all():
            raise InputError(f"{path}: elements record different times for the same step")
        time[index] = facts["times"]
        known[index] = True
    if not known.all():
        frame = int(np.flatnonzero(~known)[0])
        raise InputError(
            f"{path}: step {steps[frame]} has no time, but other steps do: every element sampled "
            "there must record time, or none"
        )
    return time  # non-finite values are refused when frames are read
