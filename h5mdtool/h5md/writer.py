"""Writing the H5MD 1.1 layout of docs/convert.md ("The file written"), collectively under MPI.

Every rank calls the same functions with the same arguments in the same order (creation
and attribute writes are collective in parallel HDF5); only :meth:`TrajectoryWriter.write`
takes per-rank data, and every rank calls it the same number of times, a rank with nothing
to write passing an empty block.

String attributes of ``/h5md`` and ``boundary`` are fixed-length ASCII as H5MD 1.1 asks.
``unit`` attributes are variable-length ASCII strings: the units module asks fixed-length
ones, but MDAnalysis 2.11's H5MDReader reads those as bytes and refuses them
(``time unit 'b'ps'' is not recognized``), and every file h5mdtool writes must open in
MDAnalysis.
"""

import getpass
import json

import numpy as np

from ..parallel.mpi import RowWriter
from .layout import allocated_early
from .provenance import printable
from .units import ATOM_FIELDS, UNITS

H5MD_VERSION = (1, 1)
UNITS_MODULE_VERSION = (1, 0)
#: MDAnalysis's H5MDReader reads the first group under /particles; it must be this one.
PARTICLES = "particles/trajectory"
PROVENANCE = "parameters/h5mdtool"
#: FrameBlock field -> H5MD element name.
ELEMENT_NAMES = {"positions": "position", "velocities": "velocity", "forces": "force"}
#: HDF5 file-format bounds for new files. The 1.10 format indexes the chunks of fixed-size
#: datasets with a fixed array; the older v1 B-tree index breaks parallel HDF5 1.10.8 on
#: collective filtered writes of tens of thousands of chunks ("writev: Bad address" under
#: OMPIO, a crash under ROMIO; seen with 58800 one-frame chunks). Files need HDF5 >= 1.10.
LIBVER = ("v110", "latest")


def fixed_ascii(text):
    """*text* as a fixed-length ASCII string (an HDF5 ``H5T_C_S1`` of its length)."""
    return np.bytes_(str(text).encode("ascii", "replace"))


def fixed_ascii_array(texts):
    """A 1-D array of fixed-length ASCII strings."""
    return np.array([str(t).encode("ascii", "replace") for t in texts])


def set_unit(obj, unit):
    """Write the ``unit`` attribute of *obj* (variable-length ASCII, see the module docstring)."""
    import h5py

    obj.attrs.create("unit", str(unit), dtype=h5py.string_dtype("ascii"))


def write_h5md_metadata(h5file, creator_version, author=None):
    """Write the ``/h5md`` group: version, author, creator and the units module."""
    root = h5file.create_group("h5md")
    root.attrs["version"] = np.array(H5MD_VERSION, dtype=np.int32)
    root.create_group("author").attrs["name"] = fixed_ascii(author or default_author())
    creator = root.create_group("creator")
    creator.attrs["name"] = fixed_ascii("h5mdtool")
    creator.attrs["version"] = fixed_ascii(creator_version)
    units = root.create_group("modules/units")
    units.attrs["version"] = np.array(UNITS_MODULE_VERSION, dtype=np.int32)
    units.attrs["system"] = fixed_ascii("SI")


def default_author():
    """The user name, or ``unknown``."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not an error
        return "unknown"


def write_provenance(h5file, record):
    """Write ``/parameters/h5mdtool``: a few readable attributes and the full JSON record."""
    group = h5file.require_group(PROVENANCE)
    for key in ("command", "created", "h5mdtool_version"):
        if key in record:
            group.attrs[key] = printable(str(record[key]))
    if "n_ranks" in record:
        group.attrs["n_ranks"] = np.int32(record["n_ranks"])
    group.attrs["json"] = json.dumps(record, sort_keys=True, default=json_default)


def read_provenance(h5file):
    """Return the JSON provenance record of an h5mdtool file, or None."""
    try:
        text = h5file[PROVENANCE].attrs["json"]
    except (KeyError, TypeError):
        return None
    if isinstance(text, bytes):
        text = text.decode()
    return json.loads(text)


def json_default(value):
    """JSON for numpy values (and str() for anything else)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


class TrajectoryWriter:
    """Creates ``/particles/trajectory`` and writes blocks of frames into it (collective).

    Parameters
    ----------
    h5file : h5py.File
    groups : list of (tuple of str, int)
        Element groups: the fields sampled at the same frames, and their frame count. The
        first field of a group owns ``step`` and ``time``; the others, and ``box/edges`` in
        the positions' group, hard-link them.
    n_atoms : int
    boundary : list of str
        Per dimension, ``periodic`` or ``none``.
    layout : h5mdtool.h5md.layout.Layout
        Chunks, filters and the encodings of per-atom values.
    dtype : str
        Floating-point type of lossless per-atom values.
    times : bool
        Whether the trajectory records time (else no ``time`` datasets are written).
    comm : communicator
    """

    def __init__(self, h5file, groups, n_atoms, boundary, layout, dtype, times, comm):
        self.comm = comm
        self.rows = RowWriter(comm)
        self.datasets = []
        # creation order: MDAnalysis reads the first group listed under /particles, which must
        # stay `trajectory` even when relayout adds other particle groups
        group = h5file.create_group("particles", track_order=True).create_group("trajectory")
        box = group.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = fixed_ascii_array(boundary)
        # chunks allocated at creation and never filled, as the per-atom values: growable by
        # any number of ranks, written once (layout.allocated_early)
        for fields, n_frames in groups:
            datasets, owner = {}, None
            for name in fields:
                if name == "box":
                    continue
                element = ELEMENT_NAMES[name]
                encoding = layout.encoding(name, dtype)
                options = layout.dataset_options(n_frames, n_atoms, encoding, parallel=comm.size > 1)
                growable = {"maxshape": (None, n_atoms, 3)} if options["chunks"] else {}
                value = group.create_dataset(f"{element}/value", shape=(n_frames, n_atoms, 3),
                                             dtype=encoding.dtype, **growable, **options)
                set_unit(value, encoding.unit)
                encoding.annotate(value)
                datasets[name] = value
                if owner is None:
                    owner = element
                    datasets["step"] = group.create_dataset(f"{element}/step", dtype=np.int64,
                                                            **series_options((n_frames,)), **allocated_early())
                    if times:
                        datasets["time"] = group.create_dataset(f"{element}/time", dtype=np.float64,
                                                                **series_options((n_frames,)), **allocated_early())
                        set_unit(datasets["time"], UNITS["time"])
                else:
                    link_step_time(group[element], group[owner])
            if "box" in fields:
                box_encoding = layout.box_encoding(dtype)
                edges = box.create_dataset("edges/value", dtype=box_encoding.dtype, **series_options((n_frames, 3, 3)),
                                           **allocated_early())
                set_unit(edges, box_encoding.unit)
                datasets["edges"] = edges
                link_step_time(box["edges"], group[owner])
            self.datasets.append((fields, datasets))

    @classmethod
    def extend(cls, h5file, groups, sizes, comm):
        """The writer of an existing h5mdtool file whose element groups grow to *sizes* rows (collective).

        Parameters
        ----------
        h5file : h5py.File
        groups : list of (tuple of str, dict)
            Each group's fields and the paths of its datasets by field (``edges`` for the box).
        sizes : list of int
            New row count of each group.
        comm : communicator
        """
        writer = cls.__new__(cls)
        writer.comm = comm
        writer.rows = RowWriter(comm)
        writer.datasets = []
        for (fields, paths), size in zip(groups, sizes):
            datasets = {name: h5file[path] for name, path in paths.items()}
            element = h5file[paths[fields[0]]].parent
            datasets["step"] = element["step"]
            if "time" in element:
                datasets["time"] = element["time"]
            for dataset in datasets.values():
                if dataset.shape[0] != size:
                    dataset.resize((size,) + dataset.shape[1:])
            writer.datasets.append((fields, datasets))
        return writer

    def chunk_frames(self, number):
        """Frames per chunk of group *number*'s per-atom data (1 when contiguous)."""
        fields, datasets = self.datasets[number]
        chunks = datasets[fields[0]].chunks
        return chunks[0] if chunks else 1

    @staticmethod
    def rank_weights(n_ranks):
        """Shares of the frames by rank: None, equal ones (every rank writes its own)."""
        return None

    def prepare(self, number, start, arrays):
        """What :meth:`write` takes for these rows (the rows themselves; see :class:`~h5mdtool.h5md.chunkwriter.DirectChunkWriter`)."""
        return arrays

    def close(self):
        """Nothing to release (the file is closed by its owner)."""

    def write_series(self, number, step, time, start=0):
        """Write group *number*'s ``step`` and ``time`` from row *start* (rank 0 writes, others take part)."""
        _, datasets = self.datasets[number]
        mine = self.comm.rank == 0
        self.rows.write(datasets["step"], start, step if mine else step[:0])
        if "time" in datasets:
            self.rows.write(datasets["time"], start, time if mine else time[:0])

    def write(self, number, start, arrays):
        """Write rows from *start* of group *number*: *arrays* maps field (and ``edges``) to rows.

        Collective: every rank calls it for every round, with empty arrays when it has
        nothing to write.
        """
        _, datasets = self.datasets[number]
        for name, dataset in datasets.items():
            if name in ("step", "time"):
                continue
            self.rows.write(dataset, start, arrays[name])


#: Rows per chunk of step, time and box datasets: at most 512 KiB of int64 steps, at least
#: 1024 rows (chunks may be larger than the data, as the datasets can grow), so a small file
#: that is appended to does not keep tiny chunks.
SERIES_CHUNK_ROWS = 65536
SERIES_MIN_CHUNK_ROWS = 1024


def series_options(shape):
    """Shape, chunks and unlimited first axis of a step, time or box dataset (``--append`` grows them)."""
    rows = max(SERIES_MIN_CHUNK_ROWS, min(shape[0], SERIES_CHUNK_ROWS))
    return {"shape": shape, "chunks": (rows,) + shape[1:], "maxshape": (None,) + shape[1:]}


def link_step_time(target, source):
    """Hard-link ``step`` (and ``time`` when present) of element *target* to those of *source*."""
    target["step"] = source["step"]
    if "time" in source:
        target["time"] = source["time"]


__all__ = ["ATOM_FIELDS", "H5MD_VERSION", "LIBVER", "PARTICLES", "PROVENANCE", "TrajectoryWriter",
           "read_provenance", "write_h5md_metadata", "write_provenance"]
