"""A dataset's HDF5 filter pipeline, applied to whole chunks outside HDF5.

HDF5 1.10.8 runs a dataset's filters inside ``H5Dread``/``H5Dwrite``, one chunk after
another in the calling thread. h5mdtool's H5MD reader decompresses chunks in threads
(:class:`ChunkReader`), and ``convert --threads`` compresses them in threads and stores them
with HDF5's direct chunk write (:mod:`.chunkwriter`). The pipeline and its parameters are
read from the dataset itself, after HDF5's ``set_local`` callbacks filled them in, so a
chunk encoded here decodes with HDF5's own filters in any reader, and the reverse:

- shuffle (built in): c-blosc2's SIMD byte shuffle from hdf5plugin's Blosc2 library (the
  same byte order), numpy without it;
- deflate (built in): a zlib stream, which HDF5's filter (any zlib) reads; written with
  ``zlib`` one byte plane at a time after a shuffle (:func:`deflate_planes`: a plane that
  deflate barely shrinks is stored, and inflates at the speed of a copy), read with
  libdeflate (the optional ``deflate`` package, 2 to 3 times faster than zlib at inflating
  whole chunks) when it is installed, else with ``zlib``;
- hdf5plugin's filters (Zstd, Bitshuffle/LZ4, Blosc2, ...): the plugin library's own
  filter function, called through ctypes on a malloc'd buffer it may replace; Zstd chunks
  are read with python-zstandard (the optional ``zstandard`` package) when it is installed:
  one decompression context per thread, reused, where the filter makes one per chunk (4
  times faster on a one-frame chunk, a fifth faster on a 1 MB one).

The filter functions, zlib, libdeflate and python-zstandard release the GIL, so threads code chunks in parallel.
"""

import ctypes
import glob
import math
import os
import threading
import typing
import weakref
import zlib

import numpy as np

SHUFFLE, DEFLATE = 2, 1
#: hdf5plugin's Zstd filter: each chunk one Zstandard frame that records its size.
ZSTD = 32015
#: HDF5's flag of an optional filter (a chunk it declines is stored without it).
FLAG_OPTIONAL = 0x0001
#: HDF5's flag telling a filter function to decode.
FLAG_REVERSE = 0x0100
#: hdf5plugin filters whose libraries keep global state between calls (SZ, SZ3).
NOT_THREAD_SAFE = frozenset({32017, 32024})

try:  # libdeflate: inflates a whole zlib stream of known size 2 to 3 times faster than zlib
    from deflate import DeflateError as _DeflateError, zlib_decompress as _libdeflate_zlib_decompress
except ImportError:  # an optional dependency (tools/install.sh installs it)
    _libdeflate_zlib_decompress = None


def inflate(data, size=None):
    """The bytes of the zlib stream *data* (bytes-like), *size* of them when known.

    With *size* (not 0: the ``deflate`` package then returns no bytes without reading the
    stream) and libdeflate installed, libdeflate inflates it; a stream it refuses (damaged,
    or not of *size* bytes) goes to zlib, which gives the error or the bytes.

    Raises
    ------
    zlib.error
        If the stream is damaged.
    """
    if size and _libdeflate_zlib_decompress is not None:
        try:
            return _libdeflate_zlib_decompress(data, size)
        except (_DeflateError, ValueError, OverflowError):
            pass
    return zlib.decompress(data)


#: A byte plane that deflate makes less than this much smaller is stored instead. Deflate
#: codes such bytes as literals, and inflating literals is what inflating costs (libdeflate:
#: about 2.5 ns a byte here; a stored byte is copied). The float32 positions of an XTC
#: have one such plane, the mantissa's top bits: deflate level 4 shrinks it by 0.02% (AdK)
#: and 2.2% (solvated AdK), where it shrinks the two low planes by 9-12%. Stored, it takes
#: a quarter (AdK) to a third (solvated AdK) of the chunks' inflating time away; the AdK
#: file is 0.4% smaller (each plane gets its own Huffman codes), the solvated one 0.2% larger.
STORED_BELOW = 0.05
#: zlib's stream header (RFC 1950) for each level, as ``zlib.compress`` writes it.
_ZLIB_HEADERS = {level: zlib.compress(b"", level)[:2] for level in range(10)}


def deflate_planes(data, level, planes):
    """A zlib stream of the bytes-like *data*, deflated in *planes* equal parts (the byte
    planes of a shuffled chunk: ``planes`` is its element size), each part whose deflated
    form is not at least :data:`STORED_BELOW` smaller stored as it is.

    Each part is deflated alone, so Huffman codes fit each plane; the stream is one RFC 1950
    stream (the header :func:`zlib.compress` writes at *level*, the parts' raw deflate blocks
    flushed to byte boundaries, an empty final block, the Adler-32 of *data*) that any zlib
    inflates, HDF5's deflate filter included. Trailing bytes of a partial element (a chunk
    size not a multiple of *planes*) go into the last part.

    Returns
    -------
    bytes
    """
    view = memoryview(data).cast("B")
    size = len(view)
    plane = size // planes if planes > 1 else size
    bounds = [number * plane for number in range(max(planes, 1))] + [size]
    pieces = [_ZLIB_HEADERS[level]]
    for first, stop in zip(bounds[:-1], bounds[1:]):
        part = view[first:stop]
        deflated = _raw_deflate(part, level)
        if len(deflated) > (1 - STORED_BELOW) * len(part):
            deflated = _raw_deflate(part, 0)
        pieces.append(deflated)
    final = zlib.compressobj(0, zlib.DEFLATED, -15)
    pieces.append(final.flush(zlib.Z_FINISH))
    pieces.append(zlib.adler32(view).to_bytes(4, "big"))
    return b"".join(pieces)


def _raw_deflate(data, level):
    """Raw deflate blocks of *data* at *level*, ended at a byte boundary and not final (so that
    more blocks may follow)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


_ZSTANDARD = []  # the zstandard module, or None without it: imported on first use (6 ms)
_ZSTD_CONTEXTS = threading.local()


def _zstandard():
    """python-zstandard (an optional dependency tools/install.sh installs), or None."""
    if not _ZSTANDARD:
        try:
            import zstandard
        except ImportError:
            zstandard = None
        _ZSTANDARD.append(zstandard)
    return _ZSTANDARD[0]


def _zstd_frame(data, size):
    """The *size* bytes of the Zstandard frame *data*, decoded by python-zstandard with this
    thread's context; None when it is not installed or the frame is not one of *size*
    bytes (the plugin's filter then decodes it, or says what is wrong)."""
    zstandard = _zstandard()
    if zstandard is None:
        return None
    context = getattr(_ZSTD_CONTEXTS, "context", None)
    if context is None:
        context = _ZSTD_CONTEXTS.context = zstandard.ZstdDecompressor()
    try:
        result = context.decompress(data)
    except zstandard.ZstdError:
        return None
    return result if len(result) == size else None  # not all of it: frames written one after another


class DamagedChunk(OSError):
    """A stored chunk that its filters cannot decode; *row* is the first dataset row asked of it."""

    def __init__(self, message, row):
        super().__init__(message)
        self.row = row


class UnsupportedPipeline(Exception):
    """The pipeline holds a filter that can only run inside HDF5 (lzf, scale-offset, nbit...)."""


class _FilterClass(ctypes.Structure):
    """HDF5's ``H5Z_class2_t``, as a plugin's ``H5PLget_plugin_info`` returns it."""

    _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("encoder_present", ctypes.c_uint),
                ("decoder_present", ctypes.c_uint), ("name", ctypes.c_char_p), ("can_apply", ctypes.c_void_p),
                ("set_local", ctypes.c_void_p), ("filter", ctypes.c_void_p)]


_FILTER_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_uint, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
                                    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                    ctypes.POINTER(ctypes.c_void_p))
# malloc, free, memcpy and the byte shuffle are quick: called through PyDLL they keep the
# GIL (a call through CDLL releases it, and getting it back from a thread that decodes
# frames can take a switch interval). The filter functions, the long calls, release it.
_LIBC = ctypes.PyDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
_LIBC.memcpy.restype = ctypes.c_void_p
_LIBC.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_PLUGINS = {}
_PLUGINS_LOCK = threading.Lock()


def _new_plugins_lock():
    """A forked child's own lock: a decoding thread of the parent may have held the
    parent's at the fork, and no thread of the child would ever release that copy."""
    global _PLUGINS_LOCK
    _PLUGINS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_plugins_lock)


def _plugin_function(filter_id):
    """The filter function of hdf5plugin's library for *filter_id* (libraries loaded once)."""
    with _PLUGINS_LOCK:
        if not _PLUGINS:
            try:
                import hdf5plugin
            except ImportError:
                raise UnsupportedPipeline(f"filter {filter_id} needs hdf5plugin") from None
            # the libraries themselves: with HDF5_PLUGIN_PATH set, hdf5plugin leaves loading to HDF5
            for path in sorted(glob.glob(os.path.join(hdf5plugin.PLUGIN_PATH, "libh5*"))):
                try:
                    library = ctypes.CDLL(path)
                    library.H5PLget_plugin_info.restype = ctypes.POINTER(_FilterClass)
                    info = library.H5PLget_plugin_info().contents
                except (OSError, AttributeError):
                    continue
                _PLUGINS[info.id] = (library, _FILTER_FUNCTION(info.filter))
        if filter_id not in _PLUGINS:
            raise UnsupportedPipeline(f"filter {filter_id} is not one of hdf5plugin's")
        return _PLUGINS[filter_id][1]


class _Buffer:
    """A chunk's bytes in malloc'd memory, which HDF5 filter functions free and replace."""

    def __init__(self, size):
        self.pointer = _LIBC.malloc(max(size, 1))
        if not self.pointer:
            raise MemoryError("malloc failed for a chunk")
        self.size = size

    @classmethod
    def copy_of(cls, data):
        """A buffer holding a copy of the bytes-like *data*."""
        source = np.frombuffer(data, np.uint8)
        buffer = cls(source.size)
        if source.size:
            _LIBC.memcpy(buffer.pointer, source.ctypes.data, source.size)
        return buffer

    def view(self):
        """The bytes as a uint8 array, without a copy (valid until the next filter or :meth:`free`)."""
        if not self.size:
            return np.empty(0, np.uint8)
        return np.frombuffer((ctypes.c_char * self.size).from_address(self.pointer), np.uint8)

    def run(self, function, flags, values):
        """Apply an HDF5 filter function in place; False if it declined (or failed)."""
        pointer = ctypes.c_void_p(self.pointer)
        capacity = ctypes.c_size_t(max(self.size, 1))
        parameters = (ctypes.c_uint * len(values))(*values)
        written = function(flags, len(values), parameters, self.size, ctypes.byref(capacity), ctypes.byref(pointer))
        self.pointer = pointer.value  # the filter may have freed ours and handed back its own
        # a filter's output fits its buffer; more is an error code passed on as a size (Zstd's on damaged input)
        if 0 < written <= min(capacity.value, 2**48):
            self.size = written
            return True
        return False

    def take(self):
        """The bytes as a Python object; the memory is freed."""
        try:
            return ctypes.string_at(self.pointer, self.size)
        finally:
            self.free()

    def free(self):
        """Release the memory (idempotent)."""
        if self.pointer:
            _LIBC.free(self.pointer)
            self.pointer = None


def _release(buffer):
    """Free *buffer* if there is one; None (to assign back)."""
    if buffer is not None:
        buffer.free()
    return None


_BLOSC2 = []


def _blosc2_shuffles():
    """c-blosc2's SIMD byte (un)shuffle from hdf5plugin's Blosc2 library, or None.

    Its byte shuffle is HDF5's (every element's byte 0, then every byte 1, ...; trailing
    bytes of a partial element copied), 10x faster than a numpy transpose (checked in
    tests/h5md/test_chunkwriter.py).
    """
    with _PLUGINS_LOCK:
        if not _BLOSC2:
            functions = None
            try:
                import hdf5plugin

                library = ctypes.PyDLL(os.path.join(hdf5plugin.PLUGIN_PATH, "libh5blosc2.so"))
                functions = (library.blosc2_shuffle, library.blosc2_unshuffle)
                for function in functions:
                    function.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
                    function.restype = ctypes.c_int
            except (ImportError, OSError, AttributeError):
                functions = None
            _BLOSC2.append(functions)
        return _BLOSC2[0]


def _byte_transpose(source, size, reverse, out):
    """HDF5's byte shuffle (or its reverse) of the uint8 array *source* into the uint8 array *out*."""
    functions = _blosc2_shuffles()
    if size > 1 and functions is not None and 0 < source.size < 2**31:
        functions[1 if reverse else 0](size, source.size, source.ctypes.data, out.ctypes.data)
        return out
    whole = source.size - source.size % size if size > 1 else 0
    if whole:
        shape = (size, -1) if reverse else (-1, size)
        out[:whole] = source[:whole].reshape(shape).T.ravel()
    out[whole:] = source[whole:]
    return out


def _shuffle(data, size):
    """HDF5's byte shuffle of *data* for elements of *size* bytes (a uint8 array)."""
    source = np.frombuffer(data, np.uint8)
    return _byte_transpose(source, size, False, np.empty_like(source))


def _unshuffle(data, size):
    """The reverse of :func:`_shuffle`."""
    source = np.frombuffer(data, np.uint8)
    return _byte_transpose(source, size, True, np.empty_like(source))


class FilterPipeline:
    """The filters of one chunked dataset, in HDF5's order, with their parameters.

    Parameters
    ----------
    filters : list of (int, int, tuple of int)
        ``(filter id, flags, client data values)`` of each filter, as
        ``h5py.h5p.PropDCID.get_filter`` gives them.
    itemsize : int
        Bytes per element of the dataset.

    Raises
    ------
    UnsupportedPipeline
        If a filter can only run inside HDF5.
    """

    def __init__(self, filters, itemsize):
        self.filters = [(int(code), int(flags), tuple(int(v) for v in values)) for code, flags, values in filters]
        self.itemsize = int(itemsize)
        for code, _, _ in self.filters:
            if code < 256 and code not in (SHUFFLE, DEFLATE):  # scale-offset, nbit, fletcher32, szip
                raise UnsupportedPipeline(f"HDF5 filter {code}")
        self.functions = {code: _plugin_function(code) for code, _, _ in self.filters
                          if code not in (SHUFFLE, DEFLATE)}
        self.thread_safe = not any(code in NOT_THREAD_SAFE for code, _, _ in self.filters)
        # whether filter i's input is the chunk's size: only shuffles (which keep it) run before it
        self.sized_output = [all(code == SHUFFLE for code, _, _ in self.filters[:i]) for i in range(len(self.filters))]

    @classmethod
    def of(cls, dataset):
        """The pipeline of an h5py *dataset* (read from its creation property list)."""
        plist = dataset.id.get_create_plist()
        filters = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]
        return cls(filters, dataset.dtype.itemsize)

    def encode(self, chunk):
        """Stored bytes of *chunk* and HDF5's filter mask (bit i set: filter i skipped).

        Parameters
        ----------
        chunk : numpy.ndarray
            Data of the chunk's full shape (pad a dataset's last, partial chunk).

        Raises
        ------
        RuntimeError
            If a mandatory filter fails (HDF5 would fail the write).
        """
        data = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
        buffer, mask = None, 0  # the bytes live in *buffer* (malloc'd) once a filter ran, else in *data*
        try:
            for number, (code, flags, values) in enumerate(self.filters):
                current = buffer.view() if buffer is not None else np.frombuffer(data, np.uint8)
                if code == SHUFFLE:
                    shuffled = _Buffer(current.size)
                    _byte_transpose(current, values[0] if values else self.itemsize, False, shuffled.view())
                    _release(buffer)
                    buffer = shuffled
                elif code == DEFLATE:
                    shuffled = number > 0 and self.filters[number - 1][0] == SHUFFLE
                    planes = (self.filters[number - 1][2] or (self.itemsize,))[0] if shuffled else 1
                    data = deflate_planes(current, values[0] if values else 6, planes)
                    buffer = _release(buffer)
                else:
                    if buffer is None:
                        buffer = _Buffer.copy_of(data)
                    if not buffer.run(self.functions[code], flags & ~FLAG_REVERSE, values):
                        if not flags & FLAG_OPTIONAL:
                            raise RuntimeError(f"HDF5 filter {code} failed to compress a chunk")
                        mask |= 1 << number
            return (buffer.take() if buffer is not None else bytes(data)), mask
        finally:
            _release(buffer)

    def decode(self, stored, mask=0, out=None):
        """The chunk's bytes (a uint8 array) from its *stored* bytes and filter *mask*.

        Parameters
        ----------
        stored : bytes-like
        mask : int
        out : numpy.ndarray of uint8, optional
            Where to put the bytes when it has their size (a reused scratch array).

        Raises
        ------
        RuntimeError
            If a filter fails on the bytes (a damaged chunk).
        """
        data, buffer = stored, None
        try:
            for number in reversed(range(len(self.filters))):
                code, flags, values = self.filters[number]
                if mask & (1 << number):
                    continue
                current = buffer.view() if buffer is not None else np.frombuffer(data, np.uint8)
                if code == SHUFFLE:
                    target = out if out is not None and out.size == current.size else np.empty_like(current)
                    data = _byte_transpose(current, values[0] if values else self.itemsize, True, target)
                    buffer = _release(buffer)
                elif code == DEFLATE:
                    try:
                        data = inflate(current, out.size if out is not None and self.sized_output[number] else None)
                    except zlib.error as error:
                        raise RuntimeError(f"deflate: {error}") from None
                    buffer = _release(buffer)
                else:
                    if (code == ZSTD and buffer is None and out is not None and self.sized_output[number]
                            and (frame := _zstd_frame(current, out.size)) is not None):
                        data = frame
                        continue
                    if buffer is None:
                        buffer = _Buffer.copy_of(data)
                    if not buffer.run(self.functions[code], flags | FLAG_REVERSE, values):
                        raise RuntimeError(f"HDF5 filter {code} failed to decompress a chunk")
            if buffer is not None:
                data = buffer.view()
            result = np.frombuffer(data, np.uint8)
            if out is not None and out.size == result.size and not np.shares_memory(out, result):
                out[...] = result
                return out
            return result.copy() if buffer is not None else result
        finally:
            _release(buffer)


def stored_bound(size):
    """Bytes a stored chunk of *size* bytes takes at most after the filters h5mdtool decodes
    (deflate, Zstandard, LZ4, Blosc2 and Bitshuffle grow incompressible data by well under
    1/64 plus a header); a larger one is read by HDF5."""
    return size + size // 64 + 4096


def supported_pipeline(dataset):
    """:class:`FilterPipeline` of *dataset*, or None when its filters run only inside HDF5."""
    try:
        return FilterPipeline.of(dataset)
    except UnsupportedPipeline:
        return None


def whole_frame_chunks(dataset):
    """Whether *dataset*'s chunks each hold whole frames: every atom, and all of the last
    axis or an even part of it (``--split-xyz``: ``(k, n_atoms, 1)``)."""
    chunks, shape = dataset.chunks, dataset.shape
    if chunks is None:
        return False
    if len(shape) == 3:
        return chunks[1] == shape[1] and shape[2] % chunks[2] == 0
    return tuple(chunks[1:]) == tuple(shape[1:])


def row_offsets(dataset):
    """Where the chunks of one row of chunks start, past the first axis: ``[(0, 0)]`` for
    frame-shaped chunks, ``[(0, 0), (0, 1), (0, 2)]`` when x, y and z are chunked apart."""
    if dataset.ndim == 3:
        return [(0, column) for column in range(0, dataset.shape[2], dataset.chunks[2])]
    return [(0,) * (dataset.ndim - 1)]


class _ChunkLayout(typing.NamedTuple):
    """What :class:`ChunkReader` needs of a dataset: its pipeline (None: HDF5 reads it), dtype,
    chunk shape and :func:`row_offsets`."""

    pipeline: object
    dtype: object
    chunks: tuple
    offsets: list


class ChunkReader:
    """Reads rows of filtered datasets chunked by whole frames, decoding chunks in threads.

    HDF5 decompresses the chunks of one read one after another; here the calling thread
    reads each chunk's stored bytes (``read_direct_chunk``, into an array it reuses from
    read to read), then up to *threads* threads,
    the calling one first, each decode a contiguous group of them with the dataset's own
    filters and copy out the rows and atoms asked for (of each chunk's
    coordinates, when x, y and z are chunked apart). Datasets it cannot read so
    (unfiltered, chunks splitting the atoms, filters only HDF5 runs, chunks never written)
    are read by HDF5.

    Parameters
    ----------
    threads : int
    """

    def __init__(self, threads):
        from concurrent.futures import ThreadPoolExecutor

        self.threads = max(1, int(threads))
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="h5mdtool-decode")
        self.pipelines = {}  # (file number, dataset name) -> _ChunkLayout
        self.by_object = weakref.WeakKeyDictionary()  # h5py DatasetID -> _ChunkLayout
        self._stored = threading.local()  # per calling thread: the reused array of a read's stored bytes

    def close(self, wait=True):
        """Stop the decoding threads; without *wait*, return at once (from a finalizer, where
        joining a thread can deadlock in the interpreter's thread bookkeeping)."""
        self.pool.shutdown(wait=wait)

    def _layout(self, dataset):
        """*dataset*'s :class:`_ChunkLayout` (its pipeline None when HDF5 must read it).

        Found once per dataset (by file and name), and then, for the same h5py object, without
        asking HDF5 anything (that costs tens of microseconds, a read of one small chunk).
        """
        identifier = dataset.id
        layout = self.by_object.get(identifier)
        if layout is not None:
            return layout
        key = (dataset.file.id.fileno, dataset.name)
        layout = self.pipelines.get(key)
        if layout is None:
            pipeline = None
            if (whole_frame_chunks(dataset) and dataset.dtype.isnative
                    and dataset.id.get_create_plist().get_nfilters()):
                pipeline = supported_pipeline(dataset)
                if pipeline is not None and not pipeline.thread_safe:
                    pipeline = None
            layout = self.pipelines[key] = _ChunkLayout(
                pipeline, dataset.dtype, dataset.chunks, None if pipeline is None else row_offsets(dataset))
        self.by_object[identifier] = layout
        return layout

    def _pipeline(self, dataset):
        """The :class:`FilterPipeline` that decodes *dataset*'s chunks here, or None (HDF5 reads it)."""
        return self._layout(dataset).pipeline

    def read(self, dataset, start, stop, span, out, scale=None, threads=None):
        """``out[...] = dataset[start:stop, span[0]:span[1]]``, times *scale* if given.

        Parameters
        ----------
        dataset : h5py.Dataset
        start, stop : int
            Rows to read.
        span : (int, int)
            Atoms to read.
        out : numpy.ndarray
            Of the dataset's dtype, or, for a dataset whose chunks are decoded here, of any
            numeric dtype: each chunk's values are cast to it (and multiplied by *scale*, in
            that dtype) by the thread that decoded the chunk, up to :data:`STORE_BYTES` at a time.
        scale : scalar, optional
            Factor the values are multiplied by (only when the chunks are decoded here).
        threads : int, optional
            Threads decoding this read, the calling one included (default: all of the
            reader's). Each decodes a contiguous group of the rows of chunks.

        Returns
        -------
        bool
            True when the chunks were decoded here (*out* holds the scaled values), False
            when HDF5 read them (*out* holds the stored values: scale them yourself).

        Raises
        ------
        ValueError
            If *out* is not of the dataset's dtype and HDF5 must read the dataset.
        """
        pipeline, dtype, shape, offsets = self._layout(dataset)
        if pipeline is None:
            if out.dtype != dtype:
                raise ValueError(f"HDF5 reads {dataset.name}: out must be of its dtype {dtype}")
            dataset.read_direct(out, np.s_[start:stop, span[0]:span[1]])
            return False
        rows = shape[0]
        chunk_id = dataset.id
        corners = range(start - start % rows, stop, rows)
        # one array per calling thread for the read's stored bytes, reused by its next read: with a
        # bytes object per chunk, all freed at the read's end, glibc gives the pages back and
        # the next read faults them in again (iterating the 600x zstd AdK file: 74 faults a chunk)
        area = _scratch("area", len(corners) * len(offsets) * stored_bound(math.prod(shape) * dtype.itemsize),
                        self._stored)
        used = 0
        chunk_rows = []  # (corner, pieces) of each row of chunks
        for corner in corners:
            pieces = []
            for offset in offsets:
                try:
                    mask, stored = chunk_id.read_direct_chunk((corner,) + offset, out=area[used:])
                except (OSError, KeyError, ValueError, RuntimeError):
                    # a chunk never written: HDF5 fills it (or one that does not fit: HDF5 reads it)
                    return self._read_by_hdf5(dataset, start, stop, span, out, scale)
                used += len(stored)
                pieces.append((offset[-1] if offset else 0, mask, stored))
            chunk_rows.append((corner, pieces))
        if not chunk_rows:  # no rows asked for (a rank without frames)
            return True
        # Each thread decodes one contiguous group of the rows of chunks, this thread the
        # first. With a task per chunk the threads handed Python's GIL to each other tens of
        # times a chunk, and a thread iterating frames meanwhile (MDAnalysis, while the next
        # block is read in the background) waited for it each time.
        groups = max(1, min(self.threads, len(chunk_rows), threads or self.threads))
        bounds = [len(chunk_rows) * number // groups for number in range(groups + 1)]
        calls = []
        for number in range(groups):
            group = chunk_rows[bounds[number]:bounds[number + 1]]
            first, last = max(start, group[0][0]), min(stop, group[-1][0] + rows)
            calls.append((_decode_rows, pipeline, group, dtype, shape, first, last, span,
                          out[first - start:last - start], scale))
        pending = [self.pool.submit(*call) for call in calls[1:]]
        errors = [_run_here(*calls[0]).exception()] + [future.exception() for future in pending]
        for error in errors:
            if error is not None:
                raise error
        return True

    @staticmethod
    def _read_by_hdf5(dataset, start, stop, span, out, scale):
        """:meth:`read` through HDF5 (a dataset with chunks never written), scaled as asked."""
        if out.dtype == dataset.dtype:
            dataset.read_direct(out, np.s_[start:stop, span[0]:span[1]])
            stored = out
        else:
            stored = dataset[start:stop, span[0]:span[1]]
        _store(stored, out, scale)
        return True


class _Done:
    """A finished call, with the interface of the futures :meth:`ChunkReader.read` waits on."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error

    def exception(self):
        return self.error

    def result(self):
        if self.error is not None:
            raise self.error


def _run_here(function, *arguments):
    """Call *function* in this thread; its outcome as a :class:`_Done`."""
    try:
        function(*arguments)
    except Exception as error:  # noqa: BLE001 - raised by ChunkReader.read, as a thread's would be
        return _Done(error)
    return _Done(None)


def _store(values, out, scale):
    """``out[...] = values * scale`` computed in *out*'s dtype (``values`` cast first); a
    plain cast without *scale*."""
    if scale is None:
        out[...] = values
    else:
        np.multiply(values, scale, out=out, dtype=out.dtype, casting="unsafe")


_SCRATCH = threading.local()
#: Bytes of decoded chunks a thread gathers before storing them into the output in one call.
STORE_BYTES = 4 << 20


def _scratch(name, size, store=_SCRATCH):
    """This thread's reused uint8 array *name* of *size* bytes (grown when too small), kept
    in the ``threading.local`` *store* (module-wide by default)."""
    array = getattr(store, name, None)
    if array is None or array.size < size:
        array = np.empty(size, np.uint8)
        setattr(store, name, array)
    return array[:size]


def _decode_rows(pipeline, chunk_rows, dtype, shape, first, last, span, out, scale=None):
    """Decode the rows of chunks *chunk_rows*, consecutive (corner, pieces) with pieces of
    (last-axis column, filter mask, stored bytes), and store their dataset rows
    ``first:last`` and atoms *span* into *out* (cast to its dtype, times *scale*:
    :func:`_store`).

    The chunks are decoded into this thread's reused scratch array, up to
    :data:`STORE_BYTES` of them, which are then stored in one call: every call that lets go
    of Python's GIL is a hand-over to any thread waiting for it, and one per chunk, not
    two, keeps a thread iterating frames meanwhile from waiting. Whole chunks of all atoms
    going into a contiguous *out* of their dtype, unscaled, are decoded straight into it
    (no copy). Chunks of one coordinate each (``--split-xyz``) are stored, each as it is
    decoded, straight into their column of *out*: interleaving them in the scratch array
    first was one more pass over the values (the solvated AdK's 47681-atom frames: 95
    against 130-190 us a frame).
    """
    rows = shape[0]
    size = math.prod(shape) * dtype.itemsize
    columns = len(chunk_rows[0][1])
    per_store = max(1, STORE_BYTES // (size * columns))
    as_stored = (scale is None and out.dtype == dtype and columns == 1 and tuple(span) == (0, shape[1])
                 and out.flags.c_contiguous)
    for begin in range(0, len(chunk_rows), per_store):
        batch = chunk_rows[begin:begin + per_store]
        corner = batch[0][0]
        low, high = max(first, corner), min(last, corner + len(batch) * rows)
        direct = as_stored and low == corner and high == corner + len(batch) * rows
        if direct:  # whole chunks of all atoms, as stored: decoded in place
            decoded = out[low - first:high - first]
        elif columns == 1:
            decoded = _scratch("rows", len(batch) * size).view(dtype).reshape((len(batch) * rows,) + shape[1:])
        for number, (row_corner, pieces) in enumerate(batch):
            for column, mask, stored in pieces:
                try:
                    data = pipeline.decode(stored, mask, out=_scratch("piece", size) if columns > 1 else
                                           decoded[number * rows:(number + 1) * rows].view(np.uint8).reshape(-1))
                except RuntimeError as error:
                    raise DamagedChunk(f"cannot decompress a chunk ({error})", max(first, row_corner)) from None
                if data.size != size:
                    raise DamagedChunk(f"a chunk decompresses to {data.size} bytes, not the {size} of its shape",
                                       max(first, row_corner))
                if columns > 1:  # this coordinate's rows of the read, into its column of out
                    a, b = max(first, row_corner), min(last, row_corner + rows)
                    _store(data.view(dtype).reshape(shape)[a - row_corner:b - row_corner, span[0]:span[1]],
                           out[a - first:b - first, ..., column:column + shape[-1]], scale)
        if columns == 1 and not direct:
            _store(decoded[low - corner:high - corner, span[0]:span[1]], out[low - first:high - first], scale)


def chunk_stored(dataset, corner):
    """True when the chunk at *corner* (element coordinates) has storage.

    A direct index lookup (``H5Dread_chunk``, which also reads the chunk's stored bytes),
    not a walk of the index as ``get_chunk_info_by_coord`` is in HDF5 1.10.8.
    """
    corner = tuple(int(c) for c in corner)
    try:
        dataset.id.read_direct_chunk(corner)
    except (RuntimeError, OSError) as error:  # no such chunk; no chunk index at all
        if "not allocated" in str(error) or "not initialized" in str(error):
            return False
        raise
    except MemoryError:
        # HDF5 1.14.5 (h5py 3.16) answers a dataset with no chunk written yet (no index)
        # with MemoryError; the index lookup, which no index makes instant, tells
        return dataset.id.get_chunk_info_by_coord(corner).byte_offset is not None
    return True
