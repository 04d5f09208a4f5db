"""The storage layouts compared by the compression study (``study_layouts.py``).

A candidate is a *representation* of the positions (float32 in nm, or integers on a grid in
pm or fm, always values a plain HDF5 reader decodes to the true coordinates in the unit its
``unit`` attribute names) and an HDF5 *filter pipeline* (built-in filters, h5py's lzf or
hdf5plugin's). This module makes the datasets, writes them (serially or with collective
MPI-IO writes of whole chunks, as ``h5mdtool convert`` does) and reads them back the ways
analyses do. It is a prototype for the benchmark, not part of the h5mdtool package.
"""

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: XTC's default precision: coordinates are integers in units of 0.001 nm (1 pm)
XTC_GRID_NM = 0.001
#: raw block written per collective round (convert's default block on one rank)
BLOCK_BYTES = 32 * 1024**2


@dataclass(frozen=True)
class Representation:
    """How positions (nm) are stored: dtype, unit, and the grid step (nm) they are rounded to.

    ``step_nm`` None keeps the float32 values as they are. With a step, values are rounded to
    the nearest multiple of it; integer representations then store them in ``unit``
    (``per_nm`` units per nm), so a plain HDF5 reader gets the true value in that unit.
    """

    name: str
    dtype: str
    unit: str
    per_nm: float = 1.0
    step_nm: float = None

    def encode(self, positions, out=None):
        """Stored values of *positions* (float32 nm), into *out* when given."""
        if self.step_nm is None:
            if out is None:
                return np.asarray(positions, np.float32)
            out[...] = positions
            return out
        steps = np.rint(np.asarray(positions, np.float64) / self.step_nm)
        stored = steps * (self.step_nm * self.per_nm)
        if out is None:
            out = np.empty(stored.shape, self.dtype)
        out[...] = stored  # integers: exact (whole numbers of units below 2**31)
        return out

    def decode(self, stored):
        """Positions in nm (float64) of *stored* values."""
        return np.asarray(stored, np.float64) / self.per_nm


FLOAT_NM = Representation("float32 nm", "float32", "nm")


def grid(step_nm):
    """The integer representation of a grid of *step_nm* nm (pm for >= 1 pm, else fm)."""
    if step_nm >= XTC_GRID_NM - 1e-12:
        return Representation(f"int32 pm ({step_nm:g} nm grid)", "int32", "pm", 1000.0, step_nm)
    return Representation(f"int32 fm ({step_nm:g} nm grid)", "int32", "fm", 1e6, step_nm)


def float_grid(step_nm):
    """float32 nm rounded to multiples of *step_nm* (what scale-offset stores)."""
    return Representation(f"float32 nm ({step_nm:g} nm grid)", "float32", "nm", 1.0, step_nm)


@dataclass(frozen=True)
class Candidate:
    """One layout: a representation, a filter pipeline and what a reader needs for it.

    ``filters`` is a callable returning ``create_dataset`` keyword arguments (so hdf5plugin
    is imported only when a candidate using it is made). ``bound_nm`` is the error bound by
    construction (None: lossless with respect to the XTC's data). ``nbit`` stores integers
    with HDF5's n-bit filter at the precision the data needs.
    """

    key: str
    label: str
    representation: Representation
    filters: object
    needs: str
    family: str
    bound_nm: float = None
    nbit: bool = False
    notes: str = ""

    @property
    def lossy(self):
        return self.bound_nm is not None


def _plugin():
    import hdf5plugin

    return hdf5plugin


def _gzip(level, shuffle=True):
    return lambda: {"compression": "gzip", "compression_opts": level, "shuffle": shuffle}


def _zstd(level, shuffle=True):
    return lambda: {"compression": _plugin().Zstd(clevel=level), "shuffle": shuffle}


def _lz4(shuffle=True):
    return lambda: {"compression": _plugin().LZ4(), "shuffle": shuffle}


def _bitshuffle(cname, level=3):
    return lambda: {"compression": _plugin().Bitshuffle(cname=cname, clevel=level)}


def _blosc2(cname, level, shuffle):
    def options():
        plugin = _plugin()
        return {"compression": plugin.Blosc2(cname=cname, clevel=level, filters=getattr(plugin.Blosc2, shuffle))}
    return options


def _blosc(cname, level, shuffle):
    def options():
        plugin = _plugin()
        return {"compression": plugin.Blosc(cname=cname, clevel=level, shuffle=getattr(plugin.Blosc, shuffle))}
    return options


def _level_key(cname, level):
    """``zstd5``, but ``lz4-5``."""
    return f"{cname}-{level}" if cname[-1].isdigit() else f"{cname}{level}"


def candidates(q_nm=XTC_GRID_NM):
    """Every candidate for an error bound of *q_nm* / 2 (nm), keyed by ``Candidate.key``.

    For ``q_nm`` equal to the XTC's grid (0.001 nm) the integer grid holds the XTC's data
    exactly; for a coarser ``q_nm`` it is rounded to that grid; for a finer one the XTC's
    data already lies on a coarser grid, so the pm representation stays exact.
    """
    half = q_nm / 2
    ints = grid(max(q_nm, XTC_GRID_NM))
    lossy_ints = half if q_nm > XTC_GRID_NM * (1 + 1e-9) else None
    builtin, plugin, lzf = "HDF5 built-in", "hdf5plugin", "h5py (lzf)"
    out = []

    def add(key, label, rep, filters, needs, family, bound=None, **extra):
        out.append(Candidate(key, label, rep, filters, needs, family, bound, **extra))

    # float32 nm, lossless with respect to the XTC's data
    add("f32-none", "float32, no filter", FLOAT_NM, lambda: {}, builtin, "float lossless")
    add("f32-shuffle-gzip4", "float32, shuffle + gzip 4 (today's --compression gzip)", FLOAT_NM, _gzip(4), builtin,
        "float lossless")
    add("f32-shuffle-gzip1", "float32, shuffle + gzip 1", FLOAT_NM, _gzip(1), builtin, "float lossless")
    add("f32-shuffle-zstd1", "float32, shuffle + Zstd 1", FLOAT_NM, _zstd(1), plugin, "float lossless")
    add("f32-shuffle-zstd3", "float32, shuffle + Zstd 3", FLOAT_NM, _zstd(3), plugin, "float lossless")
    add("f32-shuffle-lz4", "float32, shuffle + LZ4", FLOAT_NM, _lz4(), plugin, "float lossless")
    add("f32-bshuf-lz4", "float32, Bitshuffle + LZ4", FLOAT_NM, _bitshuffle("lz4"), plugin, "float lossless")
    add("f32-bshuf-zstd1", "float32, Bitshuffle + zstd 1", FLOAT_NM, _bitshuffle("zstd", 1), plugin, "float lossless")
    add("f32-blosc2-bitshuffle-zstd1", "float32, Blosc2 bitshuffle + zstd 1", FLOAT_NM,
        _blosc2("zstd", 1, "BITSHUFFLE"), plugin, "float lossless")
    add("f32-blosc2-shuffle-lz4-5", "float32, Blosc2 shuffle + lz4 5", FLOAT_NM,
        _blosc2("lz4", 5, "SHUFFLE"), plugin, "float lossless")
    add("f32-blosc2-bitshuffle-lz4-5", "float32, Blosc2 bitshuffle + lz4 5", FLOAT_NM,
        _blosc2("lz4", 5, "BITSHUFFLE"), plugin, "float lossless")
    add("f32-blosc2-delta-zstd5", "float32, Blosc2 delta + zstd 5", FLOAT_NM,
        _blosc2("zstd", 5, "DELTA"), plugin, "float lossless")
    add("f32-shuffle-lzf", "float32, shuffle + lzf", FLOAT_NM, lambda: {"compression": "lzf", "shuffle": True}, lzf,
        "float lossless")

    # float32 lossy with an absolute bound
    digits = round(-math.log10(q_nm))
    if abs(10.0 ** -digits - q_nm) < 1e-12:
        add(f"f32-so{digits}-gzip4", f"float32 scale-offset {digits} digits + gzip 4 (today's --precision {q_nm:g})",
            float_grid(q_nm), lambda: {"scaleoffset": digits, "compression": "gzip", "compression_opts": 4}, builtin,
            "float lossy", half)
        add(f"f32-so{digits}", f"float32 scale-offset {digits} digits", float_grid(q_nm),
            lambda: {"scaleoffset": digits}, builtin, "float lossy", half)
        add(f"f32-so{digits}-zstd3", f"float32 scale-offset {digits} digits + Zstd 3", float_grid(q_nm),
            lambda: {"scaleoffset": digits, "compression": _plugin().Zstd(clevel=3)}, plugin, "float lossy", half)
    add("f32-sz-abs", f"SZ, absolute bound {half:g} nm", FLOAT_NM,
        lambda: {"compression": _plugin().SZ(absolute=half)}, plugin, "float lossy", half)
    add("f32-sz3-abs", f"SZ3, absolute bound {half:g} nm", FLOAT_NM,
        lambda: {"compression": _plugin().SZ3(absolute=half)}, plugin, "float lossy", half)
    add("f32-zfp-acc", f"ZFP fixed accuracy {half:g} nm", FLOAT_NM,
        lambda: {"compression": _plugin().Zfp(accuracy=half)}, plugin, "float lossy", half)
    add("f32-blosc2-truncprec-zstd5", "float32, Blosc2 trunc_prec + zstd 5 (its default bits)", FLOAT_NM,
        _blosc2("zstd", 5, "TRUNC_PREC"), plugin, "float lossy", half,
        notes="relative precision: error checked, not bounded by construction")

    # integers on the grid (pm, or fm below 1 pm)
    r = ints
    fam = "integer grid"
    add("i32-none", f"{r.name}, no filter", r, lambda: {}, builtin, fam, lossy_ints)
    add("i32-gzip4", f"{r.name}, gzip 4 (no shuffle)", r, _gzip(4, shuffle=False), builtin, fam, lossy_ints)
    for level in (1, 4, 6, 9):
        add(f"i32-shuffle-gzip{level}", f"{r.name}, shuffle + gzip {level}", r, _gzip(level), builtin, fam, lossy_ints)
    add("i32-so-gzip4", f"{r.name}, integer scale-offset + gzip 4", r,
        lambda: {"scaleoffset": 0, "compression": "gzip", "compression_opts": 4}, builtin, fam, lossy_ints)
    add("i32-so", f"{r.name}, integer scale-offset (bit packing)", r, lambda: {"scaleoffset": 0}, builtin, fam,
        lossy_ints)
    add("i32-nbit", f"{r.name}, n-bit (precision from the data's range)", r, lambda: {}, builtin, fam, lossy_ints,
        nbit=True)
    add("i32-nbit-shuffle-gzip4", f"{r.name}, n-bit + shuffle + gzip 4", r, _gzip(4), builtin, fam, lossy_ints,
        nbit=True)
    add("i32-shuffle-lzf", f"{r.name}, shuffle + lzf", r, lambda: {"compression": "lzf", "shuffle": True}, lzf, fam,
        lossy_ints)
    add("i32-shuffle-bzip2", f"{r.name}, shuffle + bzip2 9", r,
        lambda: {"compression": _plugin().BZip2(blocksize=9), "shuffle": True}, plugin, fam, lossy_ints)
    for level in (1, 3, 9, 19):
        add(f"i32-shuffle-zstd{level}", f"{r.name}, shuffle + Zstd {level}", r, _zstd(level), plugin, fam, lossy_ints)
    add("i32-shuffle-lz4", f"{r.name}, shuffle + LZ4", r, _lz4(), plugin, fam, lossy_ints)
    add("i32-bshuf-lz4", f"{r.name}, Bitshuffle + LZ4", r, _bitshuffle("lz4"), plugin, fam, lossy_ints)
    for level in (1, 3, 9):
        add(f"i32-bshuf-zstd{level}", f"{r.name}, Bitshuffle + zstd {level}", r, _bitshuffle("zstd", level), plugin,
            fam, lossy_ints)
    for cname, level, shuffle in [("lz4", 5, "BITSHUFFLE"), ("lz4", 9, "BITSHUFFLE"), ("lz4", 5, "SHUFFLE"),
                                  ("blosclz", 5, "BITSHUFFLE"), ("zstd", 1, "BITSHUFFLE"),
                                  ("zstd", 5, "BITSHUFFLE"), ("zstd", 9, "BITSHUFFLE"), ("zstd", 5, "SHUFFLE"),
                                  ("zstd", 5, "DELTA"), ("lz4hc", 5, "BITSHUFFLE")]:
        add(f"i32-blosc2-{shuffle.lower()}-{_level_key(cname, level)}", f"{r.name}, Blosc2 {shuffle.lower()} + {cname} {level}",
            r, _blosc2(cname, level, shuffle), plugin, fam, lossy_ints)
    # hdf5plugin's Blosc2 class exposes one filter slot; bytedelta (Blosc2 filter 35) only
    # through the raw filter options, and then without the shuffle it is meant to follow
    add("i32-blosc2-bytedelta-zstd5", f"{r.name}, Blosc2 bytedelta (alone) + zstd 5", r,
        lambda: {"compression": 32026, "compression_opts": (0, 0, 0, 0, 5, 35, 5)}, plugin, fam, lossy_ints)
    for cname, level in [("lz4", 5), ("zstd", 5)]:
        add(f"i32-blosc-bitshuffle-{_level_key(cname, level)}", f"{r.name}, Blosc bitshuffle + {cname} {level}", r,
            _blosc(cname, level, "BITSHUFFLE"), plugin, fam, lossy_ints)
    return {c.key: c for c in out}


# --- H5MD files ---------------------------------------------------------------------------

def nbit_type(stored_range):
    """An int32 HDF5 type with the precision (bits) that holds *stored_range* (min, max)."""
    import h5py

    low, high = stored_range
    bits = max(int(abs(low)).bit_length(), int(abs(high)).bit_length()) + 1  # sign bit
    tid = h5py.h5t.STD_I32LE.copy()
    tid.set_precision(max(2, min(32, bits)))
    return tid


def create_file(h5file, candidate, n_frames, n_atoms, chunk_frames, stored_range=None):
    """Collective: H5MD 1.1 skeleton and the position datasets; returns (value, step, time)."""
    import h5py

    h5md = h5file.create_group("h5md")
    h5md.attrs["version"] = np.array([1, 1], np.int32)
    h5md.create_group("author").attrs["name"] = "h5mdtool compression study"
    creator = h5md.create_group("creator")
    creator.attrs["name"] = "h5mdtool benchmarks/study_layouts.py"
    creator.attrs["version"] = "0"
    group = h5file.create_group("particles").create_group("trajectory")
    box = group.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = np.array(["none"] * 3, dtype=h5py.string_dtype())
    position = group.create_group("position")
    chunks = (min(chunk_frames, n_frames), n_atoms, 3)
    options = dict(candidate.filters())
    rep = candidate.representation
    if candidate.nbit:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        dcpl.set_filter(5, 0, ())  # H5Z_FILTER_NBIT (h5py has no set_nbit)
        if options.get("shuffle"):
            dcpl.set_shuffle()
        if options.get("compression") == "gzip":
            dcpl.set_deflate(options["compression_opts"])
        space = h5py.h5s.create_simple((n_frames, n_atoms, 3))
        dsid = h5py.h5d.create(position.id, b"value", nbit_type(stored_range), space, dcpl=dcpl)
        value = h5py.Dataset(dsid)
    else:
        value = position.create_dataset("value", shape=(n_frames, n_atoms, 3), dtype=rep.dtype, chunks=chunks,
                                        fill_time="never", **options)
    value.attrs["unit"] = rep.unit
    if rep.step_nm is not None:
        value.attrs["precision"] = np.float64(rep.step_nm * rep.per_nm)
    step = position.create_dataset("step", shape=(n_frames,), dtype=np.int64)
    time_ = position.create_dataset("time", shape=(n_frames,), dtype=np.float64)
    time_.attrs["unit"] = "ps"
    return value, step, time_


def open_h5(path, mode, comm):
    from h5mdtool.parallel.mpi import open_h5 as _open

    return _open(path, mode, comm, libver=("v110", "latest"), rdcc_nbytes=0) if mode == "w" else \
        _open(path, mode, comm)


def write_file(path, candidate, positions, chunk_frames, comm, n_frames=None, local_start=0, steps=None, times=None,
               stored_range=None):
    """Write positions (float32 nm) into a new H5MD file of *n_frames* frames.

    *positions* holds frames ``local_start, local_start + 1, ...`` (all frames by default;
    a memmap works too) and must cover this rank's share: each rank writes its
    chunk-aligned share in rounds of about :data:`BLOCK_BYTES` with collective calls (every
    rank takes part in every round). *stored_range* (min, max of the stored integers) sets
    the n-bit precision. Returns a dict with the time from creation to close and this
    rank's per-round timeline (seconds from the start): ``encode`` (the representation's
    rounding and cast) and ``write`` (the HDF5 call: filters and MPI-IO) of each round.
    """
    from h5mdtool.parallel.mpi import RowWriter, chunk_aligned_slices

    n_frames = len(positions) if n_frames is None else n_frames
    n_atoms = positions.shape[1]
    rep = candidate.representation
    chunk = min(chunk_frames, n_frames)
    capacity = max(1, BLOCK_BYTES // (chunk * n_atoms * 12)) * chunk
    slices = chunk_aligned_slices(n_frames, chunk, comm.size)
    begin, stop = slices[comm.rank]
    rounds = max(-(-(b - a) // capacity) for a, b in slices)
    comm.Barrier()
    started = time.perf_counter()
    h5file = open_h5(path, "w", comm)
    value, step_set, time_set = create_file(h5file, candidate, n_frames, n_atoms, chunk, stored_range)
    writer = RowWriter(comm)
    buffer = np.empty((min(capacity, max(1, stop - begin)), n_atoms, 3), rep.dtype)
    timeline = []
    for number in range(rounds):
        first = begin + number * capacity
        last = min(stop, first + capacity)
        count = max(0, last - first)
        t0 = time.perf_counter()
        rows = rep.encode(positions[first - local_start:last - local_start], out=buffer[:count]) if count else buffer[:0]
        t1 = time.perf_counter()
        if candidate.nbit:
            write_rows(value, first, rows, writer.transfer, memory_type=value.id.get_type())
        else:
            writer.write(value, first, rows)
        t2 = time.perf_counter()
        timeline.append({"round": number, "frames": count, "start": t0 - started, "encode": t1 - t0,
                         "write": t2 - t1})
    frames = np.arange(begin, stop)
    writer.write(step_set, begin, np.asarray(steps[begin:stop] if steps is not None else frames + 1, np.int64))
    writer.write(time_set, begin, np.asarray(times[begin:stop] if times is not None else frames, np.float64))
    h5file.close()
    comm.Barrier()
    return {"seconds": time.perf_counter() - started, "timeline": timeline}


def write_rows(dataset, start, rows, transfer, memory_type=None):
    """:meth:`h5mdtool.parallel.mpi.RowWriter.write` with a memory type.

    The n-bit filter's file type (int32 with fewer bits of precision) differs from numpy's
    int32; HDF5 1.10.8 then converts types, which breaks collective I/O ("datatype
    conversions were required"), and filtered writes must be collective. Declaring the
    buffer to have the file's type (the values fit its precision) avoids the conversion.
    """
    import h5py

    file_space = dataset.id.get_space()
    if rows.shape[0] == 0:
        file_space.select_none()
        memory_space = h5py.h5s.create_simple((1,) + rows.shape[1:])
        memory_space.select_none()
        rows = np.zeros((1,) + rows.shape[1:], dtype=rows.dtype)
    else:
        file_space.select_hyperslab((start,) + (0,) * (rows.ndim - 1), rows.shape)
        memory_space = h5py.h5s.create_simple(rows.shape)
    dataset.id.write(memory_space, file_space, np.ascontiguousarray(rows), mtype=memory_type, dxpl=transfer)


def read_blocks(path, span=None, block_frames=1024, comm=None):
    """Read every frame in blocks of whole chunks into a reused float32 nm buffer (as ``bench rmsd``).

    *span* ``(first, last)`` limits the atoms read (the span of a selection); integers are
    converted to nm in numpy into the reused buffer, as an analysis needs them. Returns
    (seconds, frames read).
    """
    import h5py

    from h5mdtool.parallel.mpi import SerialComm, balanced_slices

    comm = comm or SerialComm()
    started = time.perf_counter()
    with (open_h5(path, "r", comm) if comm.size > 1 else h5py.File(path, "r")) as handle:
        value = handle["particles/trajectory/position/value"]
        n_frames, n_atoms = value.shape[:2]
        chunk = value.chunks[0] if value.chunks else 1
        block = max(chunk, (block_frames // chunk) * chunk)
        first_atom, last_atom = span or (0, n_atoms)
        unit = value.attrs["unit"]
        per_nm = {"nm": 1.0, "pm": 1000.0, "fm": 1e6}[unit.decode() if isinstance(unit, bytes) else unit]
        a, b = balanced_slices(-(-n_frames // chunk), comm.size)[comm.rank]
        start, stop = a * chunk, min(n_frames, b * chunk)
        raw = np.empty((block, last_atom - first_atom, 3), value.dtype)
        nm = raw if value.dtype == np.float32 and per_nm == 1.0 else np.empty(raw.shape, np.float32)
        for first in range(start, stop, block):
            count = min(block, stop - first)
            value.read_direct(raw, np.s_[first:first + count, first_atom:last_atom], np.s_[0:count])
            if nm is not raw:
                np.multiply(raw[:count], np.float32(1.0 / per_nm), out=nm[:count], casting="unsafe")
        comm.Barrier()
    return time.perf_counter() - started, stop - start


def max_error_nm(path, positions, block_frames=512):
    """Maximum absolute difference (nm) between the stored positions and *positions*."""
    import h5py

    worst = 0.0
    with h5py.File(path, "r") as handle:
        value = handle["particles/trajectory/position/value"]
        unit = value.attrs["unit"]
        per_nm = {"nm": 1.0, "pm": 1000.0, "fm": 1e6}[unit.decode() if isinstance(unit, bytes) else unit]
        for first in range(0, value.shape[0], block_frames):
            stored = value[first:first + block_frames]
            difference = np.abs(stored.astype(np.float64) / per_nm - positions[first:first + block_frames])
            worst = max(worst, float(difference.max()))
    return worst
