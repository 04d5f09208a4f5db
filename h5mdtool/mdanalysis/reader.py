"""The ``H5MDTOOL`` MDAnalysis reader: H5MD frames served from blocks of whole chunks.

MDAnalysis's ``H5MDReader`` makes a few h5py calls per frame, and HDF5 decompresses a whole
chunk for every frame it reads from it: iterating a file with 26-frame compressed chunks
decompresses every chunk 26 times. This reader reads runs of whole chunk rows (a *block*:
up to ``block_bytes`` of stored frames, at least one chunk row) through h5mdtool's chunk
reader (:class:`h5mdtool.h5md.chunkcodec.ChunkReader`: the stored bytes read by HDF5, decoded in
threads with the dataset's own filters, integer and float64 values converted to
MDAnalysis's units by the thread that decoded them) and fills each frame's
:class:`~MDAnalysis.coordinates.timestep.Timestep` from the block (float32 values
multiplied by the unit factor as they are copied):

- iterating forward (``for ts in u.trajectory``, ``u.trajectory[a:b]``, an analysis'
  ``run()``) reads blocks of ``block_bytes``, the next one in the background while the
  frames of the current one are served;
- any other jump (``u.trajectory[i]``, fancy indexing, large strides) reads the one chunk
  row holding the frame; the compressed chunk rows so read stay decoded, up to
  ``cache_bytes`` of them (a compressed chunk is decoded whole even for one of its
  frames: byte shuffling spreads every frame's bytes over the whole chunk);
- :meth:`H5MDToolReader.timeseries` reads the atoms asked for, block by block, straight
  into its result.

Frames are those of h5mdtool's scan of the particle group (:mod:`h5mdtool.formats.h5md`):
the steps sampled by ``position``, ``velocity`` or ``force``. An element sampled at other
steps than the positions (a TRR converted with ``nstvout != nstxout``) is present at its own
steps only: ``ts.has_velocities`` says per frame whether the frame holds velocities, as
MDAnalysis's TRR reader says it for the TRR the file was converted from. When every element
samples the same steps (every file MDAnalysis's ``H5MDWriter`` writes, and h5mdtool's
unless asked otherwise), the frames are MDAnalysis's ``H5MDReader``'s, and so are the
values: stored values are cast to float32 and multiplied by MDAnalysis's unit factor in
float32, as that reader does, box edges turned into ``dimensions`` by
:func:`MDAnalysis.lib.mdamath.triclinic_box`.
"""

import collections
import contextlib
import os
import time
import warnings
import weakref

import numpy as np
from MDAnalysis import units as mda_units
from MDAnalysis.coordinates import base
from MDAnalysis.coordinates.H5MD import H5MDReader, H5MDWriter
from MDAnalysis.exceptions import NoDataError
from MDAnalysis.lib.mdamath import triclinic_box
from MDAnalysis.lib.util import store_init_arguments

from ..formats.h5md import ELEMENTS, H5MDFormat, text
from ..parallel.errors import InputError

#: Default memory of the blocks read when iterating forward (two live: the one served and
#: the next). Smaller blocks than 64 MiB iterated faster here (AdK, 1-frame chunks: 0.23
#: against 0.31 s for 9800 frames), larger gain nothing once the look-ahead keeps up.
BLOCK_BYTES = 16 * 1024**2
#: Default memory of the chunk rows kept for random access (their float32 values).
CACHE_BYTES = 64 * 1024**2
#: Share of its time a loop over frames waits for the blocks read ahead from which every
#: decoding thread decodes them (below it, one: :meth:`H5MDToolReader._pace_decoding`).
WAITING_FOR_ALL_DECODERS = 0.25
#: MDAnalysis's name of each field's unit kind, its base unit, and the factor from
#: h5mdtool's internal unit (nm, nm/ps, kJ/(mol nm)) to that base unit.
_KINDS = {
    "positions": ("length", "length", "Angstrom", 10.0),
    "velocities": ("velocity", "speed", "Angstrom/ps", 10.0),
    "forces": ("force", "force", "kJ/(mol*Angstrom)", 0.1),
}
#: Timestep attribute holding each field's array, and the one saying whether a frame has it.
_FIELDS = ("positions", "velocities", "forces")
_HAS = {field: f"has_{field}" for field in _FIELDS}

#: Forks of this process so far, and every reader alive in it (:func:`_leave_inherited_files`).
_forks = 0
_readers = weakref.WeakSet()


def _count_fork():
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)


def _leave_inherited_files():
    """In a process forked after readers opened their files: close those readers' handles,
    which it shares with its parent and its siblings.

    A forked child (MDAnalysis's ``multiprocessing`` backend, a ``multiprocessing.Pool``
    using a Universe of the parent) inherits its parent's HDF5 handles, and HDF5 gives a new
    open of a file already open (by the same driver) the handle it holds. The ``stdio``
    driver reads at the file offset of its descriptor, which the child's copy of the
    descriptor shares with the parent and every other child: processes reading at once
    moved each other's offset, and read each other's bytes (``rms.RMSD`` with the
    ``multiprocessing`` backend gave wrong values for about half the frames). Closing the
    child's copies first (closing a read-only stream does not move the offset) makes the
    next open the child's own. The readers so closed reopen the file when next used
    (:meth:`H5MDToolReader._ensure_open`); the threads of their parent (reading ahead,
    decoding) did not come along and are dropped unjoined.
    """
    for reader in list(_readers):
        if reader._opened_in not in (_forks, None):
            reader._drop_inherited()


def _open_file(path, driver=None, comm=None):
    """Open *path* read-only with h5py, taking no HDF5 file lock; returns (h5py File, the
    Python file object it reads through, or None).

    Without a *driver*, HDF5 reads the file by name with its ``stdio`` driver and file
    locking off. No lock is taken (unless ``HDF5_USE_FILE_LOCKING=TRUE`` in the environment
    asks HDF5 to lock every file), so a writer in another process is not refused and file
    systems without lock support need no ``HDF5_USE_FILE_LOCKING=FALSE``. HDF5 tells files
    apart by driver before it compares locking modes, so this handle also stays apart from
    other handles on the same file in this process (MDAnalysis's H5MD reader,
    ``h5py.File(path)``), which may lock it or not: HDF5 refuses to open one file twice in
    a process with two locking modes ("file locking flag values don't match"), as
    ``h5py.File(path, locking=False)`` with the default driver would make it. ``stdio``
    reads in C, as the default driver does: ``rms.RMSD`` on 58800 uncompressed AdK frames
    of 1-frame chunks took 1.57 s so, 2.27 s through a Python file object.

    HDF5 older than 1.10.7 cannot turn locking off for one file; there the file is read
    through a Python file object (h5py's ``fileobj`` driver), which takes no lock either but
    calls into Python for every read. With *driver* (``"mpio"`` and *comm*), h5py opens the
    file by name with that driver.

    HDF5's chunk cache is off: the reader reads whole rows of chunks (h5mdtool decodes
    compressed ones itself, past the cache), so a chunk that fits the cache (a one-frame
    chunk does) was read into it and copied out for nothing. Iterating 58,800 uncompressed
    AdK frames took 0.72-0.82 s without it, 0.78-1.04 s with it.
    """
    import h5py

    def open_read_only(name, **kwargs):
        return h5py.File(name, "r", rdcc_nbytes=0, **kwargs)

    if driver is not None:
        return open_read_only(path, driver=driver, **({} if comm is None else {"comm": comm})), None
    _leave_inherited_files()
    if _hdf5_turns_locking_off():
        return open_read_only(path, driver="stdio", locking=False), None
    raw = open(path, "rb", buffering=0)
    try:
        return open_read_only(raw), raw
    except BaseException:
        raw.close()
        raise


def _hdf5_turns_locking_off():
    """Whether h5py's HDF5 takes ``locking=False`` for one file (HDF5 1.10.7 or >= 1.12.1)."""
    import h5py

    version = h5py.version.hdf5_version_tuple
    return version >= (1, 12, 1) or ((1, 10, 7) <= version < (1, 11))


@contextlib.contextmanager
def opened(path):
    """``with opened(path) as handle``: :func:`_open_file`, both closed at the end.

    Raises
    ------
    h5mdtool.parallel.errors.InputError
        If *path* is missing or not an HDF5 file h5py opens.
    """
    from ..formats.base import hdf5_open_error

    try:
        handle, raw = _open_file(path)
    except (OSError, ValueError) as error:
        raise hdf5_open_error(path, error) from None
    try:
        yield handle
    finally:
        handle.close()
        if raw is not None:
            raw.close()


def mdanalysis_factor(unit, field, internal_factor):
    """Factor from the stored values of *field* in *unit* to MDAnalysis's base unit, and
    MDAnalysis's name of *unit* (None when its tables lack it).

    Units in MDAnalysis's H5MD table get MDAnalysis's own factor (bit-equal values to its
    ``H5MDReader``); others (``10 pm``, ``um``...) h5mdtool's, *internal_factor* being the
    factor to h5mdtool's unit that the scan found.
    """
    table_kind, conversion_kind, target, internal_to_target = _KINDS[field]
    if unit is not None:
        name = H5MDReader._unit_translation[table_kind].get(text(unit).strip())
        if name is not None:
            return float(mda_units.get_conversion_factor(conversion_kind, name, target)), name
    return internal_factor * internal_to_target, None


def _threads(comm):
    from ..parallel.mpi import resolve, threads_per_rank

    try:
        return threads_per_rank(resolve(comm))
    except Exception:  # noqa: BLE001 - a broken MPI setup must not stop a serial read
        return max(1, os.cpu_count() or 1)


def _read_hyperslab(dataset, first, span, out):
    """``out[...] = dataset[first:first + len(out), span[0]:span[1]]`` through h5py's low-level API."""
    from h5py import h5s

    file_space = dataset.id.get_space()
    file_space.select_hyperslab((first, span[0], 0), out.shape)
    dataset.id.read(h5s.create_simple(out.shape), file_space, out)


class _Block:
    """Frames ``[start, stop)`` read from the file: stored values of each field, boxes,
    times, steps and observables, and the row in the stored values of each frame."""

    __slots__ = ("start", "stop", "slot", "values", "index", "present", "dimensions", "observables", "nbytes")

    def __init__(self, start, stop, slot):
        self.start, self.stop, self.slot = start, stop, slot
        self.nbytes = 0
        self.values, self.index, self.present = {}, {}, {}
        self.dimensions = None
        self.observables = {}

    def __contains__(self, frame):
        return self.start <= frame < self.stop


class H5MDToolReader(base.ReaderBase):
    """MDAnalysis reader of H5MD files, reading whole chunks in blocks (format ``H5MDTOOL``).

    Every H5MD file MDAnalysis's ``H5MDReader`` reads (h5mdtool's layouts: 1-frame or
    multi-frame chunks, gzip, Zstandard, LZ4, Blosc2, ``--precision`` integer grids,
    ``--split-xyz``, contiguous; MDAnalysis's ``H5MDWriter``, pyh5md) and files it cannot
    (steps given as a fixed interval, elements sampled at their own steps, a box fixed in
    time). Values are converted to MDAnalysis's units (Angstrom, ps, Angstrom/ps,
    kJ/(mol Angstrom)) from any unit the file declares; edges without a unit are in the
    positions' unit, values without one in h5mdtool's (nm, ps, nm/ps, kJ/(mol nm)), as
    h5mdtool reads them.

    The file is opened read-only with HDF5's file locking off for this handle: HDF5 takes no
    file lock (see :func:`_open_file`), and other handles on the file in this process
    (MDAnalysis's own H5MD reader, ``h5py.File``) open it as they like. The reader pickles (MDAnalysis's
    multiprocessing and dask backends copy it): the copy reopens the file by name and
    stands at the same frame. Under ``mpirun`` each rank opens its own reader; a reader
    opened with ``driver="mpio"`` is reopened without MPI-IO when unpickled.

    Parameters
    ----------
    filename : str
        The H5MD file.
    convert_units : bool
        Convert positions, velocities, forces and box to MDAnalysis's units (default); time
        is in ps either way.
    driver : str, optional
        h5py file driver (``"mpio"`` with *comm* for MPI-IO; not needed for reading).
    comm : mpi4py communicator, optional
        With ``driver="mpio"``: the ranks opening the file together (collective open and
        close).
    block_bytes : int
        Memory of the two blocks live when iterating forward: the one served and the next,
        read meanwhile (each at least one chunk row). Default 16 MiB. Where an old HDF5
        makes the reader read through a Python file object, uncompressed files are read a
        block when it is needed, not ahead: a background read would wait for the
        interpreter at every chunk.
    cache_bytes : int
        Memory of the compressed chunk rows read for random access (``u.trajectory[i]``,
        fancy indexing) kept decoded, least recently used dropped first; 0 keeps only the
        one being served. Default 64 MiB.
    threads : int, optional
        Threads decompressing chunks. Default: the cores this process may use, divided
        among the MPI ranks of its node. Blocks read ahead while iterating are decoded by
        all of them while the loop over frames waits for them, by the reading thread alone
        while the analysis keeps its core busy (:meth:`_pace_decoding`).
    group : str, optional
        Particle group to read (default: the first listed, as MDAnalysis reads).
    **kwargs
        MDAnalysis's reader options (``dt``, ``time_offset``).

    Raises
    ------
    h5mdtool.parallel.errors.InputError
        A file that is missing, not HDF5, or not an H5MD trajectory h5mdtool reads.

    Examples
    --------
    >>> import MDAnalysis as mda
    >>> import h5mdtool.mdanalysis  # registers the format
    >>> u = mda.Universe("adk.psf", "adk.h5md", format="H5MDTOOL")
    >>> for ts in u.trajectory[::10]:
    ...     print(ts.frame, u.atoms.center_of_mass())
    """

    format = "H5MDTOOL"
    units = {"time": "ps", "length": "nm", "velocity": "nm/ps", "force": "kJ/(mol*nm)"}

    @store_init_arguments
    def __init__(self, filename, convert_units=True, driver=None, comm=None, block_bytes=BLOCK_BYTES,
                 cache_bytes=CACHE_BYTES, threads=None, group=None, **kwargs):
        super().__init__(filename, convert_units=convert_units, **kwargs)
        if comm is not None and driver != "mpio":
            raise ValueError("a communicator opens the file with MPI-IO: pass driver='mpio' with comm")
        self._driver, self._comm, self._group = driver, comm, group
        self._block_bytes = max(1, int(block_bytes))
        self._cache_bytes = max(0, int(cache_bytes))
        self._threads = threads
        self._file = self._raw = None
        self._chunks = None
        self._open()
        self._describe()
        self._frame = -1
        self.ts = self._Timestep(self.n_atoms, positions=self.has_positions, velocities=self.has_velocities,
                                 forces=self.has_forces, **self._ts_kwargs)
        self._read_frame(0, sequential=False)  # one chunk row: the user may not iterate

    # -- opening -----------------------------------------------------------------------

    def _open(self):
        """Open the file and the chunk reader (again after unpickling)."""
        from ..formats.base import hdf5_open_error
        from ..h5md.chunkcodec import ChunkReader
        from ..h5md.codecs import register_plugins

        register_plugins()  # files compressed with hdf5plugin's filters
        try:
            self._file, self._raw = _open_file(self.filename, self._driver, self._comm)
        except (OSError, ValueError) as error:
            raise hdf5_open_error(self.filename, error) from None
        self._chunks = ChunkReader(self._threads or _threads(self._comm))
        self._block = None
        self._pending = None  # the next block, read in the background while iterating forward
        self._prefetcher = None
        self._decoders = None  # threads decoding it (None: all): _pace_decoding
        self._waiting = 1.0  # share of its time the loop over frames waited for blocks (average)
        self._served_from = time.perf_counter()
        self._buffers = {}
        self._cache, self._cached_bytes = collections.OrderedDict(), 0  # chunk rows read for random access
        self._datasets = {}  # path -> (h5py Dataset, whether h5mdtool's threads decode its chunks)
        self._opened_in = _forks  # the process's forks when the file was opened; None: to reopen
        _readers.add(self)

    def _ensure_open(self):
        """Reopen the file in a process forked since it was opened (:func:`_leave_inherited_files`)."""
        if self._opened_in != _forks:
            block = self._block
            self._drop_inherited()
            self._open()
            self._block = block  # its values came along with the process's memory

    def _drop_inherited(self):
        """Forget the parent's threads and close this process's copy of the file handle."""
        self._pending = self._prefetcher = self._chunks = None
        self._datasets = {}
        self._opened_in = None  # closed here: _ensure_open reopens it
        handle, raw, self._file, self._raw = self._file, self._raw, None, None
        for closing in (handle, raw):
            if closing is not None:
                try:
                    closing.close()
                except Exception:  # noqa: BLE001 - closed already
                    pass

    def _describe(self):
        """Frames, fields, units and layout, from h5mdtool's scan of the open file."""
        segment = H5MDFormat.scan(self.filename, group=self._group, handle=self._file)
        details = segment.details
        self._segment_group = details["group"]
        self.n_atoms = int(segment.n_atoms)
        self._n_frames = int(segment.n_frames)
        self._steps = np.asarray(segment.step, np.int64)
        self._times = None if segment.time is None else np.asarray(segment.time, np.float64)
        if self._times is not None and len(self._times) > 1 and "dt" not in self._ts_kwargs:
            self._ts_kwargs["dt"] = float(self._times[1] - self._times[0])
        self._present = {field: np.asarray(segment.fields[field], bool) for field in _FIELDS if field in segment.fields}
        self._elements = {}
        units = dict.fromkeys(("time", "length", "velocity", "force"))
        units["time"] = "ps"
        for field in _FIELDS:
            element = details["elements"].get(field)
            if element is None:
                continue
            dataset = self._file[element["path"]]
            factor, name = mdanalysis_factor(dataset.attrs.get("unit"), field, element["factor"])
            units[_KINDS[field][0]] = name
            rows = element["rows"]
            scale = np.float32(factor) if self.convert_units and factor != 1.0 else None
            self._elements[field] = {
                "path": element["path"], "dtype": dataset.dtype, "factor": scale,
                # the factor applied as a frame is copied into the Timestep, in the same pass,
                # to float32 values (blocks hold them as stored); casting other types there
                # cost the analysis's thread more than the copy: blocks hold them converted
                "fill_factor": scale if dataset.dtype == np.float32 else None,
                # frame -> row of the element; None when they are the same
                "rows": None if rows is None else np.asarray(rows, np.int64),
            }
        self.units = units
        self._box = self._box_reading(details["box"], segment.fields.get("box"))
        first = self._file[self._elements["positions"]["path"]]
        self.compression, self.compression_opts = first.compression, first.compression_opts
        self._chunk_frames = int(first.chunks[0]) if first.chunks else 1
        frame_bytes = sum(self.n_atoms * 3 * e["dtype"].itemsize for e in self._elements.values())
        # two blocks live while iterating forward: the one served and the next, read meanwhile
        rows = max(1, self._block_bytes // 2 // max(1, frame_bytes * self._chunk_frames))
        self._sequential_frames = min(max(1, self._n_frames), rows * self._chunk_frames)
        self._observables = self._observable_datasets()
        # whether chunk rows cost h5mdtool a decompression (worth caching for random access)
        self._decompressed = any(self._dataset(element["path"])[1] for element in self._elements.values())
        # Reading ahead in a thread pays where it overlaps decompression (threads that release
        # the GIL) or reads by name. HDF5 reading through a Python file object (old HDF5 only:
        # _open_file) calls back into Python for every chunk, and a background thread then
        # waits for the GIL at every call while the analysis holds it: rms.RMSD on 58800
        # uncompressed AdK frames took 6.0 s with it against 3.2 s reading each block when it
        # is needed.
        self._read_ahead = self._raw is None or self._decompressed

    def _box_reading(self, box, present):
        """How to read the box: None, or its kind, rows, factor and dataset."""
        if box is None or present is None or not present.any():
            return None
        length = self._elements["positions"]
        if box["kind"] == "fixed":  # edges in nm (the scan converted them), as (3, 3) vectors
            dimensions = triclinic_box(*box["value"])
            if self.convert_units:
                dimensions[:3] *= np.float32(10.0)
            return {"kind": "fixed", "dimensions": dimensions, "present": present}
        dataset = self._file[box["path"]]
        unit = dataset.attrs.get("unit")
        if unit is None:  # in the positions' unit, as MDAnalysis reads them
            factor = None if length["factor"] is None else length["factor"]
        else:
            value, _ = mdanalysis_factor(unit, "positions", box["factor"])
            factor = np.float32(value) if self.convert_units and value != 1.0 else None
        return {"kind": "series", "path": box["path"], "factor": factor, "present": present,
                "rows": None if box["rows"] is None else np.asarray(box["rows"], np.int64)}

    def _observable_datasets(self):
        """(key of ``ts.data``, dataset) of each observable with one value per frame, as
        MDAnalysis's ``H5MDReader`` names them."""
        observables = self._file.get("observables")
        found = []
        if observables is None or not hasattr(observables, "items"):
            return found
        for key, group in observables.items():
            if not hasattr(group, "keys"):
                continue
            if "value" in group:
                candidates = [(key, group["value"])]
            else:
                candidates = [(f"{key}/{sub}", group[sub].get("value")) for sub in group
                              if hasattr(group[sub], "get")]
            for name, dataset in candidates:
                if dataset is not None and getattr(dataset, "ndim", 0) >= 1 and dataset.shape[0] >= self._n_frames:
                    found.append((name, dataset.name))
        return found

    @staticmethod
    def parse_n_atoms(filename, **kwargs):
        """Atoms of the first particle group's position element (MDAnalysis's minimal topology)."""
        with opened(str(filename)) as handle:
            particles = handle["particles"]
            group = particles[kwargs.get("group") or next(iter(particles))]
            for name in ELEMENTS:
                if name in group:
                    return int(group[name]["value"].shape[1])
        raise NoDataError(f"{filename}: no position, velocity or force element to count atoms in")

    # -- the trajectory API ------------------------------------------------------------

    @property
    def n_frames(self):
        """Number of frames: the steps sampled by position, velocity or force."""
        return self._n_frames

    @property
    def chunk_frames(self):
        """Frames per storage chunk of the positions (1 when stored contiguously): reading a
        frame decodes its whole chunk, so :class:`~h5mdtool.mdanalysis.MPIBackend` gives each
        rank whole chunks."""
        return self._chunk_frames

    @property
    def has_positions(self):
        """True when the file holds positions (``ts.has_positions`` says it per frame)."""
        return "positions" in self._elements

    @property
    def has_velocities(self):
        """True when the file holds velocities (``ts.has_velocities`` says it per frame)."""
        return "velocities" in self._elements

    @property
    def has_forces(self):
        """True when the file holds forces (``ts.has_forces`` says it per frame)."""
        return "forces" in self._elements

    def _get_dt(self):
        if self._times is None or len(self._times) < 2:
            raise AttributeError("no time recorded")
        return float(self._times[1] - self._times[0])

    def _read_next_timestep(self, ts=None):
        return self._read_frame(self._frame + 1, ts)

    def _read_frame(self, frame, ts=None, sequential=None):
        """Fill the Timestep with *frame* (read from the block holding it)."""
        if not 0 <= frame < self._n_frames:
            raise IOError(f"frame {frame} is outside the {self._n_frames} frames")
        block = self._block
        if block is None or frame not in block:
            block = self._block = self._switch_block(frame, frame == self._frame + 1 if sequential is None else sequential)
        self._frame = frame
        ts = self.ts if ts is None else ts
        self._fill(ts, block, frame)
        return ts

    def _reopen(self):
        """Stand before the first frame (the file stays open, the block stays cached)."""
        self._frame = -1

    def _block_range(self, frame, sequential):
        """Frames ``[start, stop)`` of the block read for *frame*: chunk rows from the one
        holding it, ``block_bytes`` of them when iterating forward, one otherwise."""
        chunk = self._chunk_frames
        start = frame - frame % chunk
        length = self._sequential_frames if sequential else chunk
        return start, min(self._n_frames, start + max(length, chunk))

    def _switch_block(self, frame, sequential):
        """The block holding *frame*.

        Iterating forward: the block read in the background if it holds *frame*, else one
        read now into the buffers not being served; the block after it is then read in the
        background. Any other jump: the chunk row holding *frame*, from the cache of chunk
        rows read for random access or read into it.
        """
        self._ensure_open()
        pending, self._pending = self._pending, None
        block = None
        if pending is not None:
            waited = time.perf_counter()
            try:
                ready = pending.result()
            except Exception:  # noqa: BLE001 - a failed look-ahead: read again below, and raise then
                ready = None
            if ready is not None and frame in ready:
                block = ready
                self._pace_decoding(time.perf_counter() - waited)
        if block is None and not sequential:
            return self._cached_block(frame)
        if block is None:
            current = self._block
            slot = 1 - current.slot if current is not None and current.slot in (0, 1) else 0
            block = self._read_block(*self._block_range(frame, sequential), slot)
        if sequential and self._read_ahead and block.stop < self._n_frames:
            if self._prefetcher is None:
                from concurrent.futures import ThreadPoolExecutor

                self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="h5mdtool-prefetch")
            start, stop = self._block_range(block.stop, True)
            self._pending = self._prefetcher.submit(self._read_block, start, stop, 1 - block.slot, self._decoders)
            self._served_from = time.perf_counter()
        return block

    def _pace_decoding(self, waited):
        """Choose the threads decoding the next block read in the background from how long
        the loop over frames waited for this one (*waited* seconds).

        A loop that waited a quarter of its time or more (on average over the last blocks)
        leaves a core idle: every thread decodes. A loop busy with its analysis gets its
        core: only the thread reading ahead decodes. On 2 cores, ``rms.RMSD`` on 58800 AdK
        frames with Zstandard took 3.2-3.4 s with one decoding thread against 3.5-4.1 s with
        two; merely iterating them, 2.7 s against 1.8 s.
        """
        served = time.perf_counter() - self._served_from
        if served <= 0:
            return
        self._waiting = (self._waiting + min(1.0, waited / served)) / 2
        self._decoders = None if self._waiting >= WAITING_FOR_ALL_DECODERS else 1

    def _cached_block(self, frame):
        """The chunk row holding *frame*, from the cache (least recently used dropped first
        beyond ``cache_bytes``) or read into it, in arrays of its own.

        Only rows h5mdtool decompresses are cached: HDF5 reads an uncompressed row about as
        fast as the new memory a cached copy would take is touched, so those are read again
        into one reused buffer.
        """
        start, stop = self._block_range(frame, False)
        cache = self._cache
        block = cache.get(start)
        if block is not None:
            cache.move_to_end(start)
            return block
        cached = self._cache_bytes and self._decompressed
        block = self._read_block(start, stop, None if cached else "random")
        if cached:
            cache[start] = block
            self._cached_bytes += block.nbytes
            while self._cached_bytes > self._cache_bytes and len(cache) > 1:
                self._cached_bytes -= cache.popitem(last=False)[1].nbytes
        return block

    def _read_block(self, start, stop, slot, threads=None):
        """Frames ``[start, stop)``: each field's values in MDAnalysis's units (float32),
        boxes and observables, into the buffers of *slot* (0 or 1 when iterating forward,
        ``"random"`` for a row not cached; None: new arrays), decoded by *threads* (None:
        all)."""
        block = _Block(start, stop, slot)
        for field, element in self._elements.items():
            present = self._present[field][start:stop]
            block.present[field] = present
            if element["rows"] is None and present.all():
                rows = (start, stop - 1)
            elif not present.any():
                continue
            else:
                rows = np.arange(start, stop)[present] if element["rows"] is None else element["rows"][start:stop][present]
            values = self._read_values(field, element, int(rows[0]), int(rows[-1]) + 1,
                                       key=None if slot is None else (slot, field), threads=threads,
                                       scaled=element["fill_factor"] is None)
            block.values[field] = values
            block.nbytes += values.nbytes
            # position of each frame's values in the block's stored rows (-1: none; None: the frame's own)
            block.index[field] = None if present.all() else np.where(present, np.cumsum(present) - 1, -1)
        block.dimensions = self._block_dimensions(start, stop)
        for key, path in self._observables:
            block.observables[key] = self._dataset(path)[0][start:stop]
        return block

    def _dataset(self, path):
        """The h5py Dataset at *path* and whether its chunks are decoded in h5mdtool's threads."""
        found = self._datasets.get(path)
        if found is None:
            dataset = self._file[path]
            found = self._datasets[path] = (dataset, self._chunks._pipeline(dataset) is not None)
        return found

    def _buffer(self, key, count, dtype):
        """An array of *count* values of *dtype*: the reused buffer *key*, or new (key None)."""
        if key is None:
            return np.empty(count, dtype)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.size < count or buffer.dtype != dtype:
            buffer = self._buffers[key] = np.empty(count, dtype)
        return buffer[:count]

    def _read_values(self, field, element, first, last, span=None, key=None, threads=None, scaled=True):
        """Values of element rows ``[first, last)`` (atoms *span*) in MDAnalysis's units
        (float32), or, without *scaled*, the stored values of a float32 element: in the
        reused buffers *key* (new arrays for None), decoded by *threads* (None: all; see
        :meth:`ChunkReader.read <h5mdtool.h5md.chunkcodec.ChunkReader.read>`).

        Chunks decoded in h5mdtool's threads are converted by the thread that decoded them
        (cast to float32, then multiplied by the unit factor in float32, as MDAnalysis's
        H5MDReader computes); datasets HDF5 reads are read, then converted in place.
        """
        dataset, threaded = self._dataset(element["path"])
        span = (0, self.n_atoms) if span is None else span
        shape = (last - first, span[1] - span[0], 3)
        count = shape[0] * shape[1] * 3
        factor = element["factor"] if scaled else None
        if not threaded:
            stored = self._read_rows(element, first, last, span, self._buffer(key, count, element["dtype"]))
            return self._converted(stored, factor, None if key is None else key + ("float32",))
        out = self._buffer(None if key is None else key + ("float32",), count, np.float32).reshape(shape)
        try:
            self._chunks.read(dataset, first, last, span, out, factor, threads)
        except (OSError, ValueError, RuntimeError) as error:
            raise self._read_error(element, first, last, error) from None
        return out

    def _read_error(self, element, first, last, error):
        return InputError(f"{self.filename}: cannot read {element['path']} rows {first} to {last - 1} ({error})")

    def _read_rows(self, element, first, last, span, buffer):
        """Stored values of element rows ``[first, last)`` (atoms *span*), read by HDF5 into
        the flat *buffer* of the dataset's dtype."""
        dataset, _ = self._dataset(element["path"])
        out = buffer.reshape((last - first, span[1] - span[0], 3))
        try:  # one HDF5 read, without h5py's selection machinery (a tenth of a millisecond a call)
            _read_hyperslab(dataset, first, span, out)
        except (OSError, ValueError, RuntimeError) as error:
            raise self._read_error(element, first, last, error) from None
        return out

    def _converted(self, stored, factor, key):
        """*stored* as float32 values times *factor* (float32 arithmetic, as MDAnalysis's
        H5MDReader computes), in place when the stored type has 4 bytes, else in the buffer
        *key* (new for None)."""
        if stored.dtype == np.float32 and factor is None:
            return stored
        if stored.dtype.itemsize == 4:
            out = stored.view(np.float32)
        else:
            out = self._buffer(key, stored.size, np.float32).reshape(stored.shape)
        if factor is None:
            out[...] = stored
        else:
            np.multiply(stored, factor, out=out, dtype=np.float32, casting="unsafe")
        return out

    def _block_dimensions(self, start, stop):
        """MDAnalysis ``dimensions`` (float32, zeros where there is no box) of frames ``[start, stop)``."""
        box = self._box
        count = stop - start
        dimensions = np.zeros((count, 6), np.float32)
        if box is None:
            return dimensions
        present = box["present"][start:stop]
        if not present.any():
            return dimensions
        if box["kind"] == "fixed":
            dimensions[present] = box["dimensions"]
            return dimensions
        frames = np.arange(start, stop)[present]
        rows = frames if box["rows"] is None else box["rows"][frames]
        edges = self._dataset(box["path"])[0][int(rows[0]):int(rows[-1]) + 1][rows - rows[0]]
        flat = edges.reshape(len(edges), -1)
        unique, inverse = np.unique(flat, axis=0, return_inverse=True)
        if edges.ndim == 2:  # edge lengths of a rectangular box, as MDAnalysis reads them
            cells = np.concatenate([unique.astype(np.float32), np.full((len(unique), 3), 90, np.float32)], axis=1)
        else:
            cells = np.array([triclinic_box(*row.reshape(3, 3)) for row in unique], np.float32).reshape(-1, 6)
        if box["factor"] is not None:
            cells[:, :3] *= box["factor"]
        dimensions[present] = cells[inverse.reshape(-1)]
        return dimensions

    def _fill(self, ts, block, frame):
        i = frame - block.start
        ts.frame = frame
        for field in self._elements:
            present = bool(block.present[field][i])
            if getattr(ts, _HAS[field]) != present:
                setattr(ts, _HAS[field], present)
            if present:
                index = block.index[field]
                values = block.values[field][i if index is None else index[i]]
                factor = self._elements[field]["fill_factor"]
                if factor is None:
                    getattr(ts, field)[...] = values
                else:
                    np.multiply(values, factor, out=getattr(ts, field))
        ts.dimensions = block.dimensions[i]
        if self._times is not None:
            ts.time = self._times[frame]
        ts.data["step"] = self._steps[frame]
        for key, values in block.observables.items():
            ts.data[key] = values[i]

    def timeseries(self, asel=None, atomgroup=None, start=None, stop=None, step=None, order="fac"):
        """Positions of *atomgroup* (all atoms by default) at frames ``start:stop:step``.

        As :meth:`MDAnalysis.coordinates.base.ProtoReader.timeseries`, read block by block
        (only the span of atoms from the first to the last one asked for) into the result,
        without moving the reader. With transformations, or frames without positions, the
        frames are read one by one as MDAnalysis does.

        Parameters
        ----------
        asel : AtomGroup, optional
            Deprecated name of *atomgroup*.
        atomgroup : AtomGroup, optional
        start, stop, step : int, optional
        order : str
            Axis order of the result, a permutation of ``"fac"`` (frames, atoms, coordinates).

        Returns
        -------
        numpy.ndarray
            float32 positions in MDAnalysis's units (Angstrom).
        """
        self._ensure_open()
        first, last, stride = self.check_slice_indices(start, stop, step)
        frames = np.arange(first, last, stride, dtype=np.int64)
        element = self._elements.get("positions")
        if (self._transformations or element is None or element["rows"] is not None
                or not self._present["positions"][frames].all()):
            return super().timeseries(asel=asel, atomgroup=atomgroup, start=start, stop=stop, step=step, order=order)
        if asel is not None:
            warnings.warn("asel argument to timeseries will be renamed to'atomgroup' in 3.0, see #3911",
                          category=DeprecationWarning)
            if atomgroup:
                raise ValueError("Cannot provide both asel and atomgroup kwargs")
            atomgroup = asel
        if atomgroup is not None:
            if len(atomgroup) == 0:
                raise ValueError("Timeseries requires at least one atom to analyze")
            atoms = np.asarray(atomgroup.indices, np.int64)
        else:
            atoms = np.arange(self.n_atoms)
        default_order = "fac"
        if order != default_order:
            try:
                axes = [default_order.index(i) for i in order]
            except ValueError:
                raise ValueError(f"Unrecognized order key in {order}, must be permutation of 'fac'") from None
        coordinates = np.empty((len(frames), len(atoms), 3), np.float32)
        if len(frames):
            span = (int(atoms.min()), int(atoms.max()) + 1)
            pick = None if span == (0, self.n_atoms) and np.array_equal(atoms, np.arange(self.n_atoms)) \
                else atoms - span[0]
            ascending = frames if stride > 0 else frames[::-1]
            filled = coordinates if stride > 0 else coordinates[::-1]
            for begin, end in self._runs(ascending):
                rows = ascending[begin:end]
                values = self._read_values("positions", element, int(rows[0]), int(rows[-1]) + 1, span,
                                           ("timeseries",))
                picked = values[rows - rows[0]]
                filled[begin:end] = picked if pick is None else picked[:, pick]
        if order != default_order:
            try:
                coordinates = np.moveaxis(coordinates, axes, [0, 1, 2])
            except ValueError:
                raise ValueError(f"Repeated or missing keys passed to argument `order`: {order}, "
                                 "each key must be used once") from None
        return coordinates

    def _runs(self, frames):
        """(begin, end) index ranges of increasing *frames* read together: frames at most a
        chunk row apart, within one sequential block's length."""
        runs, begin = [], 0
        chunk, limit = self._chunk_frames, self._sequential_frames
        for position in range(1, len(frames) + 1):
            if (position == len(frames) or frames[position] - frames[position - 1] > chunk
                    or frames[position] - frames[begin] >= limit):
                runs.append((begin, position))
                begin = position
        return runs

    def Writer(self, filename, n_atoms=None, **kwargs):
        """MDAnalysis's :class:`~MDAnalysis.coordinates.H5MD.H5MDWriter` for *filename*,
        with this file's fields and compression (h5mdtool's ``convert`` writes H5MD faster)."""
        kwargs.setdefault("compression", self.compression if self.compression in ("gzip", "lzf", "szip") else None)
        if kwargs["compression"] is not None:
            kwargs.setdefault("compression_opts", self.compression_opts)
        kwargs.setdefault("positions", self.has_positions)
        kwargs.setdefault("velocities", self.has_velocities)
        kwargs.setdefault("forces", self.has_forces)
        return H5MDWriter(filename, self.n_atoms if n_atoms is None else n_atoms, **kwargs)

    def close(self):
        """Close the file and stop the decoding threads (idempotent)."""
        if getattr(self, "_opened_in", _forks) not in (_forks, None):  # forked: the threads stayed in the parent
            self._drop_inherited()
        pending, prefetcher = getattr(self, "_pending", None), getattr(self, "_prefetcher", None)
        self._pending = self._prefetcher = None
        if pending is not None and not pending.cancel():
            try:  # a look-ahead read in progress finishes before the file closes
                pending.exception()
            except Exception:  # noqa: BLE001 - cancelled meanwhile
                pass
        if prefetcher is not None:
            prefetcher.shutdown(wait=False)
        chunks, handle, raw = getattr(self, "_chunks", None), getattr(self, "_file", None), getattr(self, "_raw", None)
        self._chunks = self._file = self._raw = None
        if chunks is not None:  # no wait: close() also runs from __del__, in whatever thread collects garbage
            chunks.close(wait=False)
        if handle is not None:
            try:
                handle.close()
            except Exception:  # noqa: BLE001 - closing twice, or at interpreter exit
                pass
        if raw is not None:
            raw.close()

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_file", "_raw", "_chunks", "_block", "_pending", "_prefetcher", "_buffers", "_datasets",
                     "_cache", "_cached_bytes"):
            state.pop(name, None)
        if state.get("_driver") == "mpio":  # a communicator does not travel: reopen without MPI-IO
            state["_driver"], state["_comm"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._open()
