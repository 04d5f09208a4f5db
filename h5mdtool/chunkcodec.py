"""A dataset's HDF5 filter pipeline, applied to whole chunks outside HDF5.

convert compresses the chunks of filtered datasets in its own threads and stores them
with HDF5's direct chunk write (:mod:`.chunkwriter`): HDF5 1.10.8 runs filters inside
``H5Dwrite``, one chunk after another, and in parallel inside the collective call. The
pipeline and its parameters are read from the dataset itself, after HDF5's ``set_local``
callbacks filled them in, so a chunk encoded here decodes with HDF5's own filters in any
reader:

- shuffle (built in): a byte transpose in numpy;
- deflate (built in): a zlib stream (``zlib.compress``, what HDF5's filter writes);
- hdf5plugin's filters (Zstd, Bitshuffle/LZ4, Blosc2, ...): the plugin library's own
  filter function, called through ctypes.

zlib and ctypes release the GIL, so threads encode chunks in parallel.
"""

import ctypes
import glob
import os
import threading
import zlib

import numpy as np

SHUFFLE, DEFLATE = 2, 1
#: HDF5's flag of an optional filter (a chunk it declines is stored without it).
FLAG_OPTIONAL = 0x0001
#: HDF5's flag telling a filter function to decode.
FLAG_REVERSE = 0x0100
#: hdf5plugin filters whose libraries keep global state between calls (SZ, SZ3).
NOT_THREAD_SAFE = frozenset({32017, 32024})


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
_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
_PLUGINS = {}
_PLUGINS_LOCK = threading.Lock()


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


def _run_plugin(function, flags, values, data):
    """Call an HDF5 filter function on *data* (a bytes-like object); the output bytes, or None if it declined."""
    view = memoryview(data).cast("B")
    size = view.nbytes
    buffer = _LIBC.malloc(max(size, 1))
    if not buffer:
        raise MemoryError("malloc failed for a chunk")
    if size:
        ctypes.memmove(buffer, np.frombuffer(view, np.uint8).ctypes.data, size)
    pointer = ctypes.c_void_p(buffer)
    buffer_size = ctypes.c_size_t(size)
    parameters = (ctypes.c_uint * len(values))(*values)
    written = function(flags, len(values), parameters, size, ctypes.byref(buffer_size), ctypes.byref(pointer))
    try:
        return ctypes.string_at(pointer.value, written) if written else None
    finally:
        _LIBC.free(pointer.value)


def _shuffle(data, size):
    if size <= 1:
        return data
    return np.frombuffer(data, np.uint8).reshape(-1, size).T.tobytes()


def _unshuffle(data, size):
    if size <= 1:
        return data
    return np.frombuffer(data, np.uint8).reshape(size, -1).T.tobytes()


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
        self.functions = {code: _plugin_function(code) for code, _, _ in self.filters
                          if code not in (SHUFFLE, DEFLATE)}
        for code in self.functions:
            if code < 256:  # HDF5's other built-in filters (scale-offset, nbit, fletcher32)
                raise UnsupportedPipeline(f"HDF5 filter {code}")
        self.thread_safe = not any(code in NOT_THREAD_SAFE for code, _, _ in self.filters)

    @classmethod
    def of(cls, dataset):
        """The pipeline of an h5py *dataset* (read from its creation property list)."""
        plist = dataset.id.get_create_plist()
        filters = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]
        return cls(filters, dataset.dtype.itemsize)

    def describe(self):
        """The pipeline as plain values (to broadcast it: ``FilterPipeline(*pipeline.describe())``)."""
        return self.filters, self.itemsize

    def encode(self, chunk):
        """Stored bytes of *chunk* and HDF5's filter mask (bit i set: filter i skipped).

        Parameters
        ----------
        chunk : numpy.ndarray
            C-contiguous data of the chunk's full shape (pad a dataset's last, partial chunk).

        Raises
        ------
        RuntimeError
            If a mandatory filter fails (HDF5 would fail the write).
        """
        data = memoryview(np.ascontiguousarray(chunk)).cast("B")
        mask = 0
        for number, (code, flags, values) in enumerate(self.filters):
            if code == SHUFFLE:
                data = _shuffle(data, values[0] if values else self.itemsize)
            elif code == DEFLATE:
                data = zlib.compress(data, values[0] if values else 6)
            else:
                out = _run_plugin(self.functions[code], flags & ~FLAG_REVERSE, values, data)
                if out is None:
                    if not flags & FLAG_OPTIONAL:
                        raise RuntimeError(f"HDF5 filter {code} failed to compress a chunk")
                    mask |= 1 << number
                    continue
                data = out
        return bytes(data), mask

    def decode(self, stored, mask=0):
        """The chunk's raw bytes from its *stored* bytes and filter *mask* (the reverse of :meth:`encode`)."""
        data = stored
        for number in reversed(range(len(self.filters))):
            code, flags, values = self.filters[number]
            if mask & (1 << number):
                continue
            if code == SHUFFLE:
                data = _unshuffle(data, values[0] if values else self.itemsize)
            elif code == DEFLATE:
                data = zlib.decompress(data)
            else:
                out = _run_plugin(self.functions[code], flags | FLAG_REVERSE, values, data)
                if out is None:
                    raise RuntimeError(f"HDF5 filter {code} failed to decompress a chunk")
                data = out
        return bytes(data)


def supported_pipeline(dataset):
    """:class:`FilterPipeline` of *dataset*, or None when its filters run only inside HDF5."""
    try:
        return FilterPipeline.of(dataset)
    except UnsupportedPipeline:
        return None
