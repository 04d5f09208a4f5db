"""How h5mdtool stores per-atom data: chunks, filters, stripe hints and value encodings.

A :class:`Layout` holds the user's choices (``--chunk-frames``, ``--compression``,
``--precision``, stripe settings...), checks them, plans the chunk shape once the atom
count is known, and gives the keyword arguments for creating each dataset. An
:class:`Encoding` says how one field's values are stored: as floats, or, for lossy
``--precision``, as integers on a grid in a unit every H5MD reader applies.
"""

import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from ..parallel.errors import InputError, UsageError
from .codecs import CODECS, codec

#: Compression choices of ``--compression``; ``auto`` is none when lossless, else the
#: default lossy codec.
COMPRESSIONS = ("auto",) + tuple(CODECS)
#: Codec of ``--compression auto`` with a lossy precision: byte shuffle + Zstandard (level
#: 3), from the compression study (docs/layouts.md): int32 positions on the 0.001 nm grid in
#: 1 MiB chunks come to 0.96x the XTC (gzip 4: 1.04x) and are written several times faster.
#: Zstandard is an HDF5 plugin filter (hdf5plugin; netCDF-C 4.9 ships it too).
LOSSY_DEFAULT = "zstd"
#: Target chunk size of ``--chunk-frames auto`` without a stripe size: h5py's default
#: chunk cache (1 MiB), so a reader of one chunk keeps it cached.
AUTO_CHUNK_BYTES = 1024**2
#: ``--split-xyz`` left to h5mdtool (a lossy layout without the option) is taken when
#: chunking x, y and z apart stores a sample of the first frames at least this much
#: smaller: it costs readers a little (three chunks a frame: ``bench rmsd`` took 9-15%
#: longer on AdK 600x and the solvated system), so a gain of a few per cent does not pay
#: (AdK in vacuum: 0.2% larger apart; solvated AdK: 16% smaller).
SPLIT_XYZ_MIN_GAIN = 0.05
#: At most this many bytes of frames are compressed both ways to choose ``--split-xyz``.
SPLIT_XYZ_SAMPLE_BYTES = 4 * 1024**2
#: Lustre requires stripe sizes that are multiples of 64 KiB.
STRIPE_SIZE_UNIT = 64 * 1024
#: Finest ``--precision`` (nm): below it float32 cannot resolve typical coordinates.
FINEST_PRECISION = 1e-6

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


@dataclass(frozen=True)
class Encoding:
    """How the values of one per-atom field are stored.

    Lossless fields are floats in h5mdtool's unit. Lossy positions are stored as integers:
    each value is rounded to the nearest multiple of ``step`` (h5mdtool units), and stored
    as that multiple expressed in ``unit``, of which one is ``per_unit`` h5mdtool units.
    Readers that apply the ``unit`` attribute (MDAnalysis does) get the rounded values back.
    Lossy velocities and forces stay float32 in h5mdtool's unit, rounded to a multiple of a
    power of two (``binary``): exact float32 values whose low mantissa bits are zero, which
    a shuffle filter then compresses, and which every reader reads unchanged. Either way the
    error is at most ``step / 2`` plus the rounding of the value read to float32.

    Attributes
    ----------
    dtype : str
    unit : str
    step : float or None
    per_unit : float
    binary : bool
    """

    dtype: str
    unit: str
    step: float = None
    per_unit: float = 1.0
    binary: bool = False

    @property
    def lossy(self):
        return self.step is not None

    def encode(self, values):
        """The stored form of *values* (h5mdtool units): a new array when lossy.

        Raises
        ------
        InputError
            If a rounded value does not fit the integer type.
        """
        if not self.lossy:
            return values
        grid = np.rint(np.asarray(values, np.float64) / self.step)
        if self.binary:
            return (grid * self.step).astype(self.dtype)
        multiple = round(self.step / self.per_unit)
        limit = np.iinfo(self.dtype).max // multiple
        if grid.size and np.abs(grid).max() > limit:
            raise InputError(
                f"a value of {np.abs(values).max():.6g} does not fit {self.dtype} in {self.unit} "
                f"at --precision {self.step:g}; use a coarser precision"
            )
        return (grid * multiple).astype(self.dtype)

    def annotate(self, dataset):
        """Record the grid on *dataset*: attribute ``precision`` (grid step, in *unit*)."""
        if self.lossy:
            dataset.attrs["precision"] = np.float64(self.step / self.per_unit)

    def describe(self):
        """JSON-friendly record, with the error bound in h5mdtool units."""
        record = {"dtype": self.dtype, "unit": self.unit}
        if self.lossy:
            record.update(grid_step=self.step, max_error=self.step / 2,
                          representation="float32 on a power-of-two grid" if self.binary else "integers")
        return record


@dataclass(frozen=True)
class BoxEncoding:
    """How box edges are stored: floats of *dtype* in *unit*, *scale* of them per nm."""

    dtype: str
    unit: str
    scale: int = 1

    def encode(self, edges):
        """The stored form of *edges* (nm)."""
        return edges if self.scale == 1 else np.asarray(edges, np.float64) * self.scale


#: Integer units for lossy positions: (unit, h5mdtool units per unit), coarsest first; each
#: is in MDAnalysis's H5MD unit table.
GRID_UNITS = {"positions": (("pm", 1e-3), ("fm", 1e-6))}
FLOAT_UNITS = {"positions": "nm", "velocities": "nm ps-1", "forces": "kJ mol-1 nm-1"}


def grid_step(precision):
    """The decimal grid step (a power of ten, at most *precision*) lossy values are rounded to."""
    return 10.0 ** -max(0, math.ceil(-math.log10(precision) - 1e-9))


def grid_encoding(field, precision):
    """The lossy :class:`Encoding` of *field* for *precision* (h5mdtool units).

    Positions: integers on the decimal grid (:func:`grid_step`). Velocities and forces:
    float32 on the power-of-two grid ``2**floor(log2(precision))``.

    Raises
    ------
    UsageError
        If *field* has no integer unit fine enough.
    """
    if field not in GRID_UNITS:
        return Encoding("float32", FLOAT_UNITS[field], 2.0 ** math.floor(math.log2(precision)), binary=True)
    step = grid_step(precision)
    for unit, per_unit in GRID_UNITS[field]:
        if step >= per_unit * (1 - 1e-9):
            return Encoding("int32", unit, step, per_unit)
    raise UsageError(f"a precision of {precision:g} is finer than h5mdtool stores {field} lossily")


def check_precision(value, option):
    """*value* if it is a finite number >= :data:`FINEST_PRECISION` (or None).

    Raises
    ------
    UsageError
        Otherwise, naming *option*.
    """
    if value is None:
        return None
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value >= FINEST_PRECISION):
        raise UsageError(f"{option} must be a finite number >= {FINEST_PRECISION:g} (finer is below "
                         f"float32's resolution for typical values), got {value}")
    return float(value)


def allocated_early():
    """``create_dataset`` options for HDF5's early space allocation, without filling.

    An uncompressed chunked dataset that a serial HDF5 created with its default (chunks
    allocated when first written) cannot be grown by parallel HDF5 1.10.8: the collective
    write into the new chunks fails (``MPI_File_set_view failed: MPI_ERR_TYPE: invalid
    datatype``), so a file converted by one process could not be appended to under mpirun.
    Parallel HDF5 allocates early anyway; asking for it in serial files too makes every file
    growable by any number of ranks. Compressed datasets are not concerned. Early chunks
    are never filled: HDF5's default would write every chunk twice, zeros then data (a 2.4 GB
    dataset of 58800 chunks took 1.3 s to create, 0.03 s without filling).
    """
    import h5py

    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return {"dcpl": dcpl, "fill_time": "never"}


@dataclass
class Layout:
    """How the per-atom datasets (position, velocity, force values) are stored.

    Parameters
    ----------
    chunk_frames : int or "auto", optional
        Frames per chunk; chunks are ``(chunk_frames, n_atoms, 3)``, whole frames only.
        ``"auto"`` picks the count with :meth:`plan_chunks` once the atom count is known.
        Default: ``"auto"`` when the data are compressed (codecs gain from several frames
        per chunk), else 1.
    contiguous : bool
        Store without chunks (uncompressed, lossless only).
    compression : str
        A name of :data:`h5mdtool.h5md.codecs.CODECS`, or ``auto`` (default): none when lossless,
        else :data:`LOSSY_DEFAULT`.
    compression_level : int, optional
        The codec's level (gzip 0-9, default 4; zstd 1-22, default 3; blosc2 0-9, default 5).
    shuffle : bool, optional
        Byte shuffle before compression; defaults to on when compressing.
    split_xyz : bool, optional
        Store x, y and z in separate chunks, ``(chunk_frames, n_atoms, 1)``, instead of
        ``(chunk_frames, n_atoms, 3)``. Compressed only. A chunk then holds one coordinate of
        consecutive atoms side by side, whose high bytes agree when the atoms are near each
        other (bonded atoms, a water's hydrogens and oxygen): integers on a grid compress
        better so (docs/layouts.md: solvated AdK at 0.001 nm, 1.18x the XTC against 1.40x).
        Reading a frame touches three chunks of a third of the size. Default: off when
        lossless; with a lossy precision None, settled by :meth:`choose_split_xyz` on the
        first frames.
    stripe_count, stripe_size : int, optional
        Lustre striping asked for the output file (stripe size in bytes).
    precision : float, optional
        Lossy positions: rounded to a decimal grid step of at most *precision* nm (error at
        most ``precision / 2``), stored as integers (see :class:`Encoding`).
    """

    chunk_frames: int = None
    contiguous: bool = False
    compression: str = "auto"
    compression_level: int = None
    shuffle: bool = None
    split_xyz: bool = None
    stripe_count: int = None
    stripe_size: int = None
    precision: float = None
    velocity_precision: float = None
    force_precision: float = None
    precision_source: str = None
    chunk_reason: str = None
    alignment: int = None
    alignment_reason: str = None

    def __post_init__(self):
        if self.compression is None:
            self.compression = "auto"
        if self.compression not in COMPRESSIONS:
            raise UsageError(
                f"unknown compression {self.compression!r}; choose one of {', '.join(COMPRESSIONS)}"
            )
        if self.chunk_frames is not None and self.chunk_frames != "auto" and (
            isinstance(self.chunk_frames, bool)
            or not isinstance(self.chunk_frames, (int, np.integer)) or self.chunk_frames < 1
        ):
            raise UsageError(f"--chunk-frames must be a whole number >= 1 or 'auto', got {self.chunk_frames!r}")
        if self.precision != "xtc":
            self.precision = check_precision(self.precision, "--precision (nm)")
        self.velocity_precision = check_precision(self.velocity_precision, "--velocity-precision (nm/ps)")
        self.force_precision = check_precision(self.force_precision, "--force-precision (kJ/(mol nm))")
        if self.contiguous and any(p is not None for p in (self.precision, self.velocity_precision,
                                                           self.force_precision)):
            raise UsageError("lossy storage pays only with compression, which needs chunks; drop --contiguous")
        if self.compression == "auto":
            lossy = any(p is not None for p in (self.precision, self.velocity_precision, self.force_precision))
            self.compression = LOSSY_DEFAULT if lossy else "none"
        chosen = codec(self.compression)
        compressed = self.compression != "none"
        if self.chunk_frames is None:
            self.chunk_frames = "auto" if compressed and not self.contiguous else 1
            if self.chunk_frames == 1:
                self.chunk_reason = "1 frame per chunk, the default without compression"
        if self.contiguous and compressed:
            raise UsageError("--contiguous stores data uncompressed; drop --compression or --contiguous")
        self.compression_level = chosen.check_level(self.compression_level)
        if self.shuffle and not compressed:
            raise UsageError("--shuffle only applies together with --compression")
        if self.shuffle is None:
            self.shuffle = compressed and chosen.byte_shuffle
        if self.split_xyz and not compressed:
            raise UsageError("--split-xyz only pays with compression; drop it or give --compression or --precision")
        lossy = any(p is not None for p in (self.precision, self.velocity_precision, self.force_precision))
        if self.split_xyz is None and not (compressed and lossy):
            self.split_xyz = False
        if self.split_xyz is not None:
            self.split_xyz = bool(self.split_xyz)
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
        if n_ranks > 1 and not codec(self.compression).parallel:
            raise UsageError(
                f"{self.compression} cannot be written in parallel (parallel HDF5 corrupts chunks that "
                f"{self.compression} leaves uncompressed); use --compression gzip or zstd, or run on one rank"
            )

    @property
    def filtered(self):
        """True when the value datasets go through an HDF5 filter (collective writes only)."""
        return self.compression != "none"

    def resolve_precision(self, index):
        """Turn ``precision="xtc"`` into the XTC inputs' own grid step (nm), checked exact.

        Raises
        ------
        InputError
            If an input is not an XTC with compressed coordinates, the inputs' precisions
            differ, or their grid is not a whole number of the stored integer unit.
        """
        if self.precision != "xtc":
            return self
        precisions = set()
        for segment in index.segments:
            values = segment.details.get("precision") if segment.format == "XTC" else None
            if values is None:
                raise InputError(f"--precision xtc keeps an XTC's own grid, but {segment.path} is not an XTC "
                                 "with compressed coordinates; give --precision in nm")
            precisions.update(np.unique(values[segment.kept_frames]).tolist())
        if len(precisions) != 1:
            raise InputError(f"--precision xtc: the inputs were written at several precisions "
                             f"({', '.join(f'{p:g}' for p in sorted(precisions))}); give --precision in nm")
        per_nm = precisions.pop()
        step = 1.0 / per_nm
        ratio = step / grid_step(step)
        if abs(ratio - round(ratio)) > 1e-6:
            raise InputError(f"--precision xtc: the XTC grid of 1/{per_nm:g} nm is not a whole number of "
                             "the integer unit h5mdtool stores; give --precision in nm")
        self.precision = step
        self.precision_source = f"xtc (precision {per_nm:g} per nm: the XTC's integers kept exactly)"
        return self

    @property
    def stored_precision(self):
        """The grid step lossy positions are rounded to (nm), or None when lossless."""
        return None if self.precision is None else grid_step(self.precision)

    def encoding(self, field, dtype="float32"):
        """The :class:`Encoding` of per-atom *field*; lossless floats are of *dtype*."""
        precision = {"positions": self.precision, "velocities": self.velocity_precision,
                     "forces": self.force_precision}[field]
        if precision is not None:
            return grid_encoding(field, precision)
        return Encoding(str(np.dtype(dtype)), FLOAT_UNITS[field])

    def box_encoding(self, dtype="float32"):
        """The :class:`BoxEncoding` of box edges next to positions stored as :meth:`encoding` says.

        MDAnalysis's H5MDReader converts the box with the positions' unit, so when positions
        are integers in pm or fm the edges are stored in that unit too, as float64: a float32
        edge in nm times 1000 or 10**6 is exact there, so the edges are not rounded.
        """
        position = self.encoding("positions", dtype)
        if position.lossy and not position.binary:
            return BoxEncoding("float64", position.unit, round(1 / position.per_unit))
        return BoxEncoding(str(np.dtype(dtype)), FLOAT_UNITS["positions"], 1)

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
                    if frames > 1 else f"auto: 1 frame of {frame_bytes} B per chunk, "
                ) + f"the most whole frames within the {basis}"
            self.chunk_frames = int(frames)
        elif self.chunk_reason is None:
            self.chunk_reason = f"asked: {self.chunk_frames} frame{'s' if self.chunk_frames != 1 else ''} per chunk"
        if self.split_xyz:
            self.chunk_reason += "; x, y and z in separate chunks (--split-xyz)"
        if self.contiguous:
            self.chunk_reason = "contiguous storage (no chunks)"
        chunk_bytes = self.chunk_frames * frame_bytes
        if self.stripe_size is None:
            self.alignment_reason = "no stripe size given"
        elif self.contiguous or self.filtered:
            self.alignment_reason = "chunks not aligned to stripes (only uncompressed chunks are)"
        elif chunk_bytes * 2 < self.stripe_size:
            self.alignment_reason = (
                f"chunks not aligned to stripes: chunks of {chunk_bytes} B fill less than half a "
                f"{self.stripe_size} B stripe (use --chunk-frames auto)"
            )
        else:
            self.alignment = self.stripe_size
            self.alignment_reason = f"chunks aligned to {self.stripe_size} B stripes"
        return self

    def choose_split_xyz(self, sample, dtype="float32"):
        """Settle ``split_xyz=None`` on *sample*, positions (nm) of the first frames to write.

        The sample is stored both ways in memory, with this layout's encoding, chunks and
        filters; x, y and z go apart when that is at least :data:`SPLIT_XYZ_MIN_GAIN`
        smaller. The outcome and its figures join :attr:`chunk_reason`. A choice the user
        made is kept.

        Raises
        ------
        InputError
            If the sample does not fit the integer type of the precision.
        """
        if self.split_xyz is not None:
            return self
        if not len(sample) or self.contiguous:
            self.split_xyz = False
            return self
        encoding = self.encoding("positions", dtype)
        values = encoding.encode(np.asarray(sample))
        together, apart = (self._stored_bytes(values, encoding, split) for split in (False, True))
        gain = 1 - apart / together if together else 0.0
        self.split_xyz = gain >= SPLIT_XYZ_MIN_GAIN
        frames = "the first frame" if len(sample) == 1 else f"the first {len(sample)} frames"
        measured = (f"{apart / together:.2f}x the bytes of one chunk for {frames} "
                    f"({1 - SPLIT_XYZ_MIN_GAIN:.2f}x or less pays)")
        if self.split_xyz:
            self.chunk_reason += f"; x, y and z in separate chunks: {measured}"
        else:
            self.chunk_reason += f"; x, y and z in one chunk: separate chunks (--split-xyz) took {measured}"
        return self

    def _stored_bytes(self, values, encoding, split):
        """Bytes HDF5 stores for *values* in this layout, x, y and z apart or not (in memory)."""
        import h5py

        options = self.dataset_options(values.shape[0], values.shape[1], encoding, split_xyz=split)
        with h5py.File(f"h5mdtool-split-xyz-{id(values)}", "w", driver="core", backing_store=False) as memory:
            dataset = memory.create_dataset("value", shape=values.shape, dtype=values.dtype, **options)
            dataset[...] = values
            return dataset.id.get_storage_size()

    def sample_frames(self, n_frames, n_atoms):
        """How many of the first frames :meth:`choose_split_xyz` compresses: one chunk's
        worth, at most :data:`SPLIT_XYZ_SAMPLE_BYTES` (one frame at least)."""
        return max(1, min(self.chunk_frames, n_frames, SPLIT_XYZ_SAMPLE_BYTES // max(1, n_atoms * 12)))

    def file_options(self):
        """Keyword arguments for ``h5py.File`` when creating the file (alignment)."""
        if not self.alignment:
            return {}
        return {"alignment_threshold": self.alignment // 2, "alignment_interval": self.alignment}

    def chunk_shape(self, n_frames, n_atoms, split_xyz=None):
        """Chunk shape of a ``(n_frames, n_atoms, 3)`` dataset, or None when contiguous
        (x, y and z apart as *split_xyz* says, by default as this layout does)."""
        if self.contiguous:
            return None
        split_xyz = self.split_xyz if split_xyz is None else split_xyz
        if split_xyz is None:
            raise ValueError("Layout.choose_split_xyz must settle split_xyz before chunks are planned")
        return (max(1, min(self.chunk_frames, n_frames)), n_atoms, 1 if split_xyz else 3)

    def dataset_options(self, n_frames, n_atoms, encoding=None, parallel=False, split_xyz=None):
        """Keyword arguments for ``h5py.Group.create_dataset`` of a per-atom value dataset.

        Parameters
        ----------
        n_frames, n_atoms : int
        encoding : Encoding, optional
        split_xyz : bool, optional
            Chunk x, y and z apart or not, whatever the layout says (for comparing both).
        parallel : bool
            Written with MPI-IO: chunks are never filled at creation (HDF5 < 1.13 would
            write each twice). Compressed datasets of serial files keep HDF5's default fill
            time: ``never`` there loses the data of a one-chunk dataset larger than the chunk
            cache (HDF5 1.10.8).

        Uncompressed chunks are allocated when the dataset is created or grown, also in a
        serial file, and never filled (see :func:`allocated_early`; with early allocation
        the one-chunk trap does not occur, tested over one chunk, many chunks and one frame).
        """
        options = {"chunks": self.chunk_shape(n_frames, n_atoms, split_xyz)}
        if parallel:
            options["fill_time"] = "never"
        if self.compression == "none" and options["chunks"]:
            options.update(allocated_early())
        if self.compression != "none":
            import h5py

            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            codec(self.compression).set_on(dcpl, self.compression_level, self.shuffle)
            options["dcpl"] = dcpl
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
        """JSON-friendly record of every layout choice, with the encodings of lossy fields."""
        record = asdict(self)
        if self.precision is not None and self.precision != "xtc":
            encoding = self.encoding("positions")
            record["positions_encoding"] = {"dtype": encoding.dtype, "unit": encoding.unit,
                                            "grid_step_nm": encoding.step, "max_error_nm": encoding.step / 2}
        for field in ("velocities", "forces"):
            encoding = self.encoding(field)
            if encoding.lossy:
                record[f"{field}_encoding"] = encoding.describe()
        return record
