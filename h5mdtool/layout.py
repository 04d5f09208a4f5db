"""The H5MD 1.1 layout h5mdtool writes: paths, attributes, units, dataset creation.

See DESIGN.md section 3. Everything here is collective under MPI: every rank calls the
same functions with the same arguments, in the same order.
"""

import getpass
import json
import re
from dataclasses import asdict, dataclass

import numpy as np

from .errors import UsageError

H5MD_VERSION = (1, 1)
UNITS_MODULE_VERSION = (1, 0)
#: MDAnalysis's H5MDReader reads the first group under /particles; it must be this one.
PARTICLES = "particles/trajectory"
PROVENANCE = "parameters/h5mdtool"

LENGTH_UNIT = "nm"
TIME_UNIT = "ps"
#: FrameBlock field -> (H5MD element name, unit).
ELEMENTS = {
    "positions": ("position", "nm"),
    "velocities": ("velocity", "nm ps-1"),
    "forces": ("force", "kJ mol-1 nm-1"),
}

COMPRESSIONS = ("none", "gzip", "lzf")

#: HDF5 file-format bounds for new files. The 1.10 format indexes the chunks of fixed-size
#: datasets with a fixed array; the older v1 B-tree index breaks parallel HDF5 1.10.8 on
#: collective filtered writes of tens of thousands of chunks ("writev: Bad address" under
#: OMPIO, a crash under ROMIO; seen with 58800 one-frame chunks). Files need HDF5 >= 1.10
#: (2016) to be read.
LIBVER = ("v110", "latest")
#: Lustre requires stripe sizes that are multiples of 64 KiB.
STRIPE_SIZE_UNIT = 64 * 1024

_SIZE_SUFFIXES = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text):
    """Parse a byte count such as ``1048576``, ``64K``, ``1M`` or ``4MiB`` (binary units).

    Raises
    ------
    UsageError
        If *text* is not a positive size.
    """
    if isinstance(text, (int, np.integer)):
        value = int(text)
    else:
        match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(i?B)?\s*", str(text), flags=re.IGNORECASE)
        if not match:
            raise UsageError(f"cannot read {text!r} as a size; use bytes or K, M, G (e.g. 1M)")
        value = int(match.group(1)) * _SIZE_SUFFIXES[match.group(2).upper()]
    if value <= 0:
        raise UsageError(f"size must be positive, got {text!r}")
    return value


@dataclass
class Layout:
    """How the per-atom datasets (position, velocity, force values) are stored.

    Parameters
    ----------
    chunk_frames : int
        Frames per chunk; chunks are ``(chunk_frames, n_atoms, 3)``, whole frames only.
    contiguous : bool
        Store without chunks (uncompressed only).
    compression : {"none", "gzip", "lzf"}
    compression_level : int, optional
        gzip level 0-9 (default 4 when gzip is used).
    shuffle : bool, optional
        Byte shuffle before compression; defaults to on when compressing.
    stripe_count, stripe_size : int, optional
        Lustre striping asked for the output file (stripe size in bytes).
    """

    chunk_frames: int = 1
    contiguous: bool = False
    compression: str = "none"
    compression_level: int = None
    shuffle: bool = None
    stripe_count: int = None
    stripe_size: int = None

    def __post_init__(self):
        if self.compression is None:
            self.compression = "none"
        if self.compression not in COMPRESSIONS:
            raise UsageError(
                f"unknown compression {self.compression!r}; choose one of {', '.join(COMPRESSIONS)}"
            )
        if not isinstance(self.chunk_frames, (int, np.integer)) or self.chunk_frames < 1:
            raise UsageError(f"--chunk-frames must be a whole number >= 1, got {self.chunk_frames!r}")
        compressed = self.compression != "none"
        if self.contiguous and compressed:
            raise UsageError("--contiguous stores data uncompressed; drop --compression or --contiguous")
        if self.compression_level is not None:
            if self.compression != "gzip":
                raise UsageError("--compression-level applies to gzip only")
            if not 0 <= self.compression_level <= 9:
                raise UsageError(f"gzip level must be 0-9, got {self.compression_level}")
        elif self.compression == "gzip":
            self.compression_level = 4
        if self.shuffle and not compressed:
            raise UsageError("--shuffle only applies together with --compression gzip or lzf")
        if self.shuffle is None:
            self.shuffle = compressed
        if self.stripe_size is not None:
            self.stripe_size = parse_size(self.stripe_size)
            if self.stripe_size % STRIPE_SIZE_UNIT:
                raise UsageError(
                    f"--stripe-size must be a multiple of 64K (Lustre's rule), got {self.stripe_size}"
                )
        if self.stripe_count is not None and (self.stripe_count == 0 or self.stripe_count < -1):
            raise UsageError(f"--stripe-count must be >= 1 or -1 (all targets), got {self.stripe_count}")

    def check_parallel(self, n_ranks):
        """Refuse layouts that parallel HDF5 cannot write correctly.

        h5py's lzf filter is optional: when a chunk does not shrink, HDF5 stores it raw and
        marks the filter skipped. Parallel HDF5's collective filtered writes lose that mark
        (seen with HDF5 1.10.8), so such chunks cannot be read back.

        Raises
        ------
        UsageError
            For lzf with more than one rank.
        """
        if n_ranks > 1 and self.compression == "lzf":
            raise UsageError(
                "lzf cannot be written in parallel (parallel HDF5 corrupts chunks that lzf "
                "leaves uncompressed); use --compression gzip, or run on one rank"
            )

    @property
    def filtered(self):
        """True when the value datasets go through an HDF5 filter (collective writes only)."""
        return self.compression != "none"

    def chunk_shape(self, n_frames, n_atoms):
        """Chunk shape of a ``(n_frames, n_atoms, 3)`` dataset, or None when contiguous."""
        if self.contiguous:
            return None
        return (max(1, min(self.chunk_frames, n_frames)), n_atoms, 3)

    def dataset_options(self, n_frames, n_atoms):
        """Keyword arguments for ``h5py.Group.create_dataset`` of a per-atom value dataset."""
        options = {"chunks": self.chunk_shape(n_frames, n_atoms), "fill_time": "never"}
        if self.filtered:
            options["compression"] = self.compression
            if self.compression == "gzip":
                options["compression_opts"] = self.compression_level
            options["shuffle"] = self.shuffle
        return options

    def mpi_hints(self):
        """MPI-IO hints for the stripe settings (ROMIO names)."""
        hints = {}
        if self.stripe_count is not None:
            hints["striping_factor"] = self.stripe_count
        if self.stripe_size is not None:
            hints["striping_unit"] = self.stripe_size
        return hints

    def describe(self):
        return asdict(self)


def _string_array(values):
    import h5py

    return np.array(values, dtype=h5py.string_dtype())


def write_h5md_metadata(h5file, creator_version, author=None):
    """Write the ``/h5md`` group: version, author, creator and the units module."""
    root = h5file.create_group("h5md")
    root.attrs["version"] = np.array(H5MD_VERSION, dtype=np.int32)
    author_group = root.create_group("author")
    author_group.attrs["name"] = author or _default_author()
    creator = root.create_group("creator")
    creator.attrs["name"] = "h5mdtool"
    creator.attrs["version"] = creator_version
    units = root.create_group("modules/units")
    units.attrs["version"] = np.array(UNITS_MODULE_VERSION, dtype=np.int32)
    units.attrs["system"] = "SI"


def _default_author():
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not an error
        return "unknown"


def create_trajectory(h5file, n_frames, n_atoms, fields, periodic, layout):
    """Create ``/particles/trajectory`` for *n_frames* frames of *n_atoms* atoms.

    Parameters
    ----------
    h5file : h5py.File
    n_frames, n_atoms : int
    fields : sequence of str
        FrameBlock fields to store (``positions`` first, then velocities, forces).
    periodic : bool
        Write ``box/edges`` and periodic boundaries; else boundaries ``none``.
    layout : Layout

    Returns
    -------
    dict
        Datasets by FrameBlock name: the fields, ``step``, ``time`` and ``edges`` if periodic.
    """
    group = h5file.create_group(PARTICLES)
    box = group.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = _string_array(["periodic" if periodic else "none"] * 3)

    small = {"fill_time": "never"}
    datasets = {}
    owner = None
    for name in fields:
        element, unit = ELEMENTS[name]
        value = group.create_dataset(
            f"{element}/value",
            shape=(n_frames, n_atoms, 3),
            dtype=np.float32,
            **layout.dataset_options(n_frames, n_atoms),
        )
        value.attrs["unit"] = unit
        datasets[name] = value
        if owner is None:
            owner = element
            datasets["step"] = group.create_dataset(f"{element}/step", shape=(n_frames,), dtype=np.int64, **small)
            datasets["time"] = group.create_dataset(f"{element}/time", shape=(n_frames,), dtype=np.float64, **small)
            datasets["time"].attrs["unit"] = TIME_UNIT
        else:
            _link_step_time(group[element], group[owner])
    if periodic:
        edges = box.create_dataset("edges/value", shape=(n_frames, 3, 3), dtype=np.float32, **small)
        edges.attrs["unit"] = LENGTH_UNIT
        datasets["edges"] = edges
        _link_step_time(box["edges"], group[owner])
    return datasets


def _link_step_time(target, source):
    """Hard-link ``step`` and ``time`` of element group *target* to those of *source*."""
    target["step"] = source["step"]
    target["time"] = source["time"]


def write_provenance(h5file, record):
    """Write ``/parameters/h5mdtool``: a few readable attributes and the full JSON record."""
    group = h5file.require_group(PROVENANCE)
    for key in ("command", "created", "h5mdtool_version"):
        if key in record:
            group.attrs[key] = str(record[key])
    if "n_ranks" in record:
        group.attrs["n_ranks"] = np.int32(record["n_ranks"])
    group.attrs["json"] = json.dumps(record, sort_keys=True, default=_json_default)


def read_provenance(h5file):
    """Return the JSON provenance record of an h5mdtool file, or None."""
    try:
        text = h5file[PROVENANCE].attrs["json"]
    except (KeyError, TypeError):
        return None
    if isinstance(text, bytes):
        text = text.decode()
    return json.loads(text)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
