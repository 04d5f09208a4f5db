"""Layout lint: will frame-by-frame reads of a per-particle dataset be fast?

A reader such as MDAnalysis reads ``value[i]`` (one frame, all atoms) at a time. What that
costs depends only on the dataset's storage: how many chunks one frame touches, how many
bytes those chunks hold, whether they are compressed and fit HDF5's chunk cache, and which
filters must be installed to decode them. Each problem becomes a warning with the
``h5mdtool convert`` command that rewrites the file with a frame-shaped layout (convert
reads H5MD input and carries everything else over).
"""

import math
import os
import shlex

from ..h5md.chunkcodec import chunk_stored
from ..h5md.codecs import LZF_HINT, PLUGIN_HINT
from ..parallel.sizes import human_bytes

#: Filters every HDF5 library has built in (no plugin needed to read).
BUILTIN_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset"}
#: Registered plugin filters (HDF Group registry) that are commonly met in MD files.
PLUGIN_FILTERS = {
    307: "bzip2", 32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
    32013: "zfp", 32015: "zstd", 32017: "sz", 32026: "blosc2",
}
#: Filters the hdf5plugin package provides (registers when imported), by code.
try:
    import hdf5plugin as _hdf5plugin

    HDF5PLUGIN_FILTERS = {int(code): name for name, code in _hdf5plugin.FILTERS.items()}
except ImportError:  # h5mdtool requires hdf5plugin; a broken install still lints
    HDF5PLUGIN_FILTERS = {}
#: Filters that change the stored bytes (a relayout should compress again).
NOT_COMPRESSING = {2, 3, 5, 6}
#: h5py's (and HDF5's) default chunk cache per open dataset.
DEFAULT_CHUNK_CACHE = 1024**2
#: Contiguous datasets this large are flagged (no compression, no growth).
LARGE_CONTIGUOUS = 16 * 1024**3


def filter_name(code):
    return BUILTIN_FILTERS.get(code) or PLUGIN_FILTERS.get(code) or f"filter {code}"


def filter_label(code):
    """``blosc (filter 32001)`` for a named filter, ``filter 33000`` for another."""
    name = filter_name(code)
    return name if name == f"filter {code}" else f"{name} (filter {code})"


def filters_phrase(names, gzip_level=None):
    """A filter pipeline as ``info`` names it: ``shuffle+gzip 4``, ``shuffle+zstd``; None without filters."""
    if not names:
        return None
    return "+".join(f"gzip {gzip_level}" if name == "gzip" and gzip_level is not None else name for name in names)


def dataset_filters(dataset):
    """``[(code, name), ...]`` of *dataset*'s filter pipeline, in order."""
    plist = dataset.id.get_create_plist()
    codes = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    return [(int(code), filter_name(int(code))) for code in codes]


def unavailable_filters(dataset):
    """Labels (:func:`filter_label`) of the filters this HDF5/h5py lacks that *dataset*'s stored chunks were encoded with.

    An optional filter may have been skipped when a chunk was written (its bit is set in the
    chunk's filter mask); only filters applied to the first or last stored chunk count.
    """
    import h5py

    missing = [(position, filter_label(code)) for position, (code, _) in enumerate(dataset_filters(dataset))
               if not h5py.h5z.filter_avail(code)]
    if not missing:
        return []
    masks = [dataset.id.read_direct_chunk(corner)[0] for corner in _end_chunks(dataset)
             if chunk_stored(dataset, corner)]
    return [name for position, name in missing if any(not mask & (1 << position) for mask in masks)]


def _end_chunks(dataset):
    """Corners of the first and the last chunk of *dataset*'s grid."""
    last = tuple((n - 1) // c * c for n, c in zip(dataset.shape, dataset.chunks))
    return sorted({(0,) * dataset.ndim, last})


def one_frame_read(shape, chunks, itemsize):
    """What reading one frame ``value[i]`` (all of its other axes) touches.

    Returns
    -------
    dict or None
        ``chunks`` touched (0 for contiguous storage), ``bytes`` those chunks hold
        (uncompressed; an upper bound at the dataset's edges), ``frame_bytes`` actually
        wanted; None for datasets without a frame axis.
    """
    if shape is None or len(shape) < 2:
        return None
    frame_bytes = math.prod(int(s) for s in shape[1:]) * int(itemsize)
    if chunks is None:
        return {"chunks": 0, "bytes": frame_bytes, "frame_bytes": frame_bytes, "chunk_bytes": None}
    touched = math.prod(-(-int(s) // int(c)) for s, c in zip(shape[1:], chunks[1:]))
    chunk_bytes = math.prod(int(c) for c in chunks) * int(itemsize)
    return {"chunks": touched, "bytes": touched * chunk_bytes, "frame_bytes": frame_bytes, "chunk_bytes": chunk_bytes}


def relayout_command(file, compression=None, level=None, precision=None, chunk_frames="auto"):
    """The ``h5mdtool convert`` command that rewrites *file* with frame-shaped chunks."""
    stem = os.path.splitext(file)[0]
    words = ["h5mdtool", "convert", file, "-o", f"{stem}_relayout.h5md", "--chunk-frames", str(chunk_frames)]
    if compression:
        words += ["--compression", compression]
        if compression == "gzip" and level is not None:
            words += ["--compression-level", str(level)]
    if precision:
        words += ["--precision", f"{precision:g}"]
    return shlex.join(words)


def storage_of(dataset):
    """Layout facts of *dataset*: shape, chunks, itemsize, filters, gzip level, lossy precision (nm)."""
    filters = dataset_filters(dataset)
    codes = [code for code, _ in filters]
    level = None
    if 1 in codes:
        try:
            level = int(dataset.compression_opts)
        except (TypeError, ValueError):
            level = None
    precision = None
    try:
        recorded = dataset.attrs.get("precision")
        unit = dataset.attrs.get("unit", "nm")
        unit = unit.decode() if isinstance(unit, bytes) else str(unit)
        if recorded is not None and float(recorded) > 0:
            from ..h5md.units import unit_factor

            precision = float(recorded) * unit_factor(unit, "length", dataset.name)
    except Exception:  # noqa: BLE001 - a strange attribute only loses the hint
        precision = None
    return {
        "shape": dataset.shape, "chunks": dataset.chunks, "itemsize": dataset.dtype.itemsize,
        "filters": filters, "level": level, "precision": precision,
        "compressed": any(code not in NOT_COMPRESSING for code in codes),
    }


def fix_for(file, storage):
    """The relayout command for a dataset with *storage*, keeping its compression.

    gzip keeps its level; a codec of ``--compression`` (zstd, lz4, blosc2) is kept; any
    other compressing filter becomes zstd.
    """
    from ..h5md.codecs import CODECS

    compression = level = None
    if storage["compressed"]:
        codes = [code for code, _ in storage["filters"]]
        named = [c.name for c in CODECS.values() if c.filter_id in codes and c.name != "lzf"]
        compression = "gzip" if 1 in codes else (named[0] if named else "zstd")
        level = storage["level"]
    return relayout_command(file, compression, level, storage["precision"])


def lint_dataset(report, path, dataset, file):
    """Add layout warnings (LINT001-LINT005) for a per-particle ``[n][N][D]`` value dataset.

    Parameters
    ----------
    report : FileReport
    path : str
        HDF5 path of *dataset*, for the findings.
    dataset : h5py.Dataset
    file : str
        The file as the user named it, for the fix command.

    Returns
    -------
    dict or None
        The dataset's storage facts, or None when they cannot be read (then FILE003 is added).
    """
    try:
        storage = storage_of(dataset)
    except Exception as error:  # noqa: BLE001 - any unreadable layout is a finding, not a crash
        report.add("FILE003", path, f"cannot read the dataset's layout: {_reason(error)}")
        return None
    shape, chunks, itemsize = storage["shape"], storage["chunks"], storage["itemsize"]
    if shape is None or len(shape) != 3:
        return storage
    fix = fix_for(file, storage)
    cost = one_frame_read(shape, chunks, itemsize)
    if chunks is None:
        total = math.prod(int(s) for s in shape) * itemsize
        if total >= LARGE_CONTIGUOUS:
            report.add("LINT005", path, f"contiguous dataset of {human_bytes(total)}: it cannot be compressed or extended", fix)
        return storage
    if chunks[1] < shape[1] or chunks[2] < shape[2]:
        amplification = cost["bytes"] / cost["frame_bytes"] if cost["frame_bytes"] else 0
        what = f"reading one frame touches {cost['chunks']} chunks and {human_bytes(cost['bytes'])} for {human_bytes(cost['frame_bytes'])} of data ({amplification:.0f}x)"
        if chunks[1] < shape[1]:
            pieces = -(-shape[1] // chunks[1])
            report.add("LINT001", path, f"chunks {tuple(chunks)} split each frame of {shape[1]} atoms into {pieces} pieces: {what}; Jakupovic & Beckstein (SciPy 2021, doi:10.25080/majora-1b6fd038-005) measured about 10x slower reads with such auto-chunked files", fix)
        # x, y and z chunked apart over all atoms (--split-xyz) is a compressed layout's choice:
        # the three chunks of a frame hold its bytes once, so only uncompressed ones are warned of
        if chunks[2] < shape[2] and not (storage["compressed"] and chunks[1] == shape[1]):
            report.add("LINT002", path, f"chunks {tuple(chunks)} split the xyz axis into {-(-shape[2] // chunks[2])} pieces: {what}", fix)
    chunk_bytes = cost["chunk_bytes"]
    if storage["filters"] and chunks[0] > 1 and chunk_bytes > DEFAULT_CHUNK_CACHE:
        report.add("LINT003", path,
                   f"filtered chunks of {chunks[0]} frames ({human_bytes(chunk_bytes)}) exceed the default {human_bytes(DEFAULT_CHUNK_CACHE)} chunk cache: "
                   f"reading frame by frame decompresses each chunk up to {chunks[0]} times (unless readers raise rdcc_nbytes)", fix)
    for code, name in storage["filters"]:
        if code in HDF5PLUGIN_FILTERS:
            report.add("LINT006", path, f"{filter_label(code)} comes from hdf5plugin: {PLUGIN_HINT}",
                       "none needed; for readers that cannot install plugins: "
                       + relayout_command(file, "gzip", None, storage["precision"]))
        elif code not in BUILTIN_FILTERS:
            report.add("LINT004", path, f"{filter_label(code)} is neither built into HDF5 nor in hdf5plugin: "
                       + (LZF_HINT if code == 32000 else "every reader must find and install its plugin"),
                       relayout_command(file, "zstd", None, storage["precision"]))
    return storage


def _reason(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
