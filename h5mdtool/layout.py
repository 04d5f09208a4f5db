"""The H5MD 1.1 layout h5mdtool writes: paths, attributes, units, dataset creation.

See DESIGN.md section 3. Everything here is collective under MPI: every rank calls the
same functions with the same arguments, in the same order.
"""

import getpass
import json
import math
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
#: Target chunk size of ``--chunk-frames auto`` without a stripe size: h5py's default
#: chunk cache (1 MiB), so a reader of one chunk keeps it cached.
AUTO_CHUNK_BYTES = 1024**2

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
    chunk_frames : int or "auto"
        Frames per chunk; chunks are ``(chunk_frames, n_atoms, 3)``, whole frames only.
        ``"auto"`` picks the count with :meth:`plan_chunks` once the atom count is known.
    contiguous : bool
        Store without chunks (uncompressed only).
    compression : {"none", "gzip", "lzf"}
    compression_level : int, optional
        gzip level 0-9 (default 4 when gzip is used).
    shuffle : bool, optional
        Byte shuffle before compression; defaults to on when compressing.
    stripe_count, stripe_size : int, optional
        Lustre striping asked for the output file (stripe size in bytes).
    precision : float, optional
        Lossy positions: absolute error at most ``precision / 2`` nm per coordinate (plus the
        float32 rounding of the decoded value), with HDF5's built-in scale-offset filter.
    """

    chunk_frames: int = 1
    contiguous: bool = False
    compression: str = "none"
    compression_level: int = None
    shuffle: bool = None
    stripe_count: int = None
    stripe_size: int = None
    precision: float = None
    chunk_reason: str = None
    alignment: int = None
    alignment_reason: str = None

    def __post_init__(self):
        if self.compression is None:
            self.compression = "none"
        if self.compression not in COMPRESSIONS:
            raise UsageError(
                f"unknown compression {self.compression!r}; choose one of {', '.join(COMPRESSIONS)}"
            )
        if self.chunk_frames != "auto" and (
            not isinstance(self.chunk_frames, (int, np.integer)) or self.chunk_frames < 1
        ):
            raise UsageError(f"--chunk-frames must be a whole number >= 1 or 'auto', got {self.chunk_frames!r}")
        if self.precision is not None:
            if not 1e-6 <= self.precision:
                raise UsageError(
                    f"--precision must be at least 1e-6 nm (finer is below float32's resolution "
                    f"for typical coordinates), got {self.precision}"
                )
            if self.contiguous:
                raise UsageError("--precision needs chunked storage; drop --contiguous")
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
        return self.compression != "none" or self.precision is not None

    @property
    def scaleoffset_digits(self):
        """Decimal digits kept for :attr:`precision` (nm): the grid step ``10**-digits <= precision``."""
        if self.precision is None:
            return None
        return max(0, math.ceil(-math.log10(self.precision) - 1e-9))

    @property
    def stored_precision(self):
        """The grid step positions are rounded to (nm); errors are at most half of it."""
        digits = self.scaleoffset_digits
        return None if digits is None else 10.0 ** -digits

    def quantize(self, positions):
        """Round *positions* (nm, float32, in place) to the nearest multiple of the grid step.

        HDF5's scale-offset filter alone does not round to the nearest step: measured here,
        it erred by up to a whole step (0.000998 nm with 3 digits). Values already on the
        grid pass through it unchanged (to float32 rounding), so rounding them first makes
        the error bound ``step / 2`` hold while the filter packs them as small integers.
        """
        step = self.stored_precision
        np.multiply(np.rint(positions / np.float64(step)), step, out=positions, casting="unsafe")
        return positions

    def plan_chunks(self, n_frames, n_atoms):
        """Resolve ``chunk_frames="auto"`` and the stripe alignment for *n_atoms* atoms.

        Auto chunks hold as many whole frames as fit in the target size: the stripe size
        when given, else :data:`AUTO_CHUNK_BYTES` (h5py's default chunk cache, so a reader
        keeps a whole chunk cached); one frame when a frame alone is larger. With a stripe
        size, chunk addresses are aligned to stripes when a chunk fills at least half a
        stripe (smaller chunks would waste most of each stripe) and the data are not
        compressed (compressed chunks vary in size).
        """
        frame_bytes = n_atoms * 3 * 4
        if self.chunk_frames == "auto":
            target = self.stripe_size or AUTO_CHUNK_BYTES
            frames = max(1, min(target // frame_bytes, max(1, n_frames)))
            basis = f"stripe size {target} B" if self.stripe_size else f"target {target} B (HDF5's default chunk cache)"
            if frame_bytes > target:
                self.chunk_reason = f"auto: one frame ({frame_bytes} B) is larger than the {basis}; 1 frame per chunk"
            else:
                self.chunk_reason = (
                    f"auto: {frames} frames of {frame_bytes} B = {frames * frame_bytes} B per chunk, "
                    f"the most whole frames within the {basis}"
                )
            self.chunk_frames = int(frames)
        elif self.chunk_reason is None:
            self.chunk_reason = f"asked: {self.chunk_frames} frame(s) per chunk"
        if self.contiguous:
            self.chunk_reason = "contiguous storage (no chunks)"
        chunk_bytes = self.chunk_frames * frame_bytes
        if self.stripe_size is None:
            self.alignment_reason = "no stripe size given"
        elif self.contiguous or self.filtered:
            self.alignment_reason = "not aligned: only uncompressed chunked data are aligned to stripes"
        elif chunk_bytes * 2 < self.stripe_size:
            self.alignment_reason = (
                f"not aligned: chunks of {chunk_bytes} B fill less than half a {self.stripe_size} B "
                "stripe (use --chunk-frames auto)"
            )
        else:
            self.alignment = self.stripe_size
            self.alignment_reason = f"chunks aligned to {self.stripe_size} B stripes"
        return self

    def file_options(self):
        """Keyword arguments for ``h5py.File`` when creating the file (alignment)."""
        if not self.alignment:
            return {}
        return {"alignment_threshold": self.alignment // 2, "alignment_interval": self.alignment}

    def chunk_shape(self, n_frames, n_atoms):
        """Chunk shape of a ``(n_frames, n_atoms, 3)`` dataset, or None when contiguous."""
        if self.contiguous:
            return None
        return (max(1, min(self.chunk_frames, n_frames)), n_atoms, 3)

    def dataset_options(self, n_frames, n_atoms):
        """Keyword arguments for ``h5py.Group.create_dataset`` of a per-atom value dataset."""
        options = {"chunks": self.chunk_shape(n_frames, n_atoms), "fill_time": "never"}
        if self.compression != "none":
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
    # Creation order: MDAnalysis reads the first group listed under /particles, which must
    # stay `trajectory` even when other particle groups are added later (relayout).
    group = h5file.create_group("particles", track_order=True).create_group("trajectory")
    box = group.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = _string_array(["periodic" if periodic else "none"] * 3)

    small = {"fill_time": "never"}
    datasets = {}
    owner = None
    for name in fields:
        element, unit = ELEMENTS[name]
        options = layout.dataset_options(n_frames, n_atoms)
        if name == "positions" and layout.precision is not None:
            options["scaleoffset"] = layout.scaleoffset_digits
        value = group.create_dataset(
            f"{element}/value", shape=(n_frames, n_atoms, 3), dtype=np.float32, **options
        )
        value.attrs["unit"] = unit
        if "scaleoffset" in options:
            # absolute error bound of the stored values is precision / 2 (in `unit`)
            value.attrs["precision"] = np.float64(layout.stored_precision)
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
