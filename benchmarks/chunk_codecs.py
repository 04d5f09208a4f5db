"""Compress whole chunks outside HDF5, byte for byte as a dataset's filter pipeline would.

Prototype for the compression study (``study_parallel_write.py``): chunks compressed here,
in Python threads, can be stored with HDF5's direct chunk write
(``h5py.h5d.DatasetID.write_direct_chunk``) and read back by any HDF5 reader with the
filters. The pipeline and its parameters are read from the dataset itself (after HDF5's
``set_local`` callbacks filled them in), so what is written is exactly what HDF5 would
have written:

- shuffle (HDF5 built-in): a byte transpose in numpy;
- deflate (HDF5 built-in): ``zlib.compress`` (the same zlib stream format);
- hdf5plugin's filters (Zstd, Bitshuffle, Blosc2, LZ4, ...): their own filter function,
  called through ctypes from the plugin library hdf5plugin ships.

zlib and ctypes calls release the GIL, so threads compress chunks in parallel. SZ keeps
global state (not thread-safe): :attr:`ChunkPipeline.thread_safe` is False for it.
"""

import ctypes
import zlib

import numpy as np

SHUFFLE, DEFLATE = 2, 1
#: filters whose libraries keep global state between calls
NOT_THREAD_SAFE = {32017, 32024}  # SZ, SZ3


class _FilterClass(ctypes.Structure):
    """HDF5's ``H5Z_class2_t`` (the struct a plugin's ``H5PLget_plugin_info`` returns)."""

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


def _plugin_function(filter_id):
    """The filter function of hdf5plugin's library for *filter_id* (loaded once)."""
    if filter_id not in _PLUGINS:
        import glob
        import os

        import hdf5plugin

        # the libraries themselves (registered_filters names no path when HDF5_PLUGIN_PATH
        # is set, for then hdf5plugin leaves the loading to HDF5)
        for path in sorted(glob.glob(os.path.join(hdf5plugin.PLUGIN_PATH, "libh5*"))):
            library = ctypes.CDLL(path)
            library.H5PLget_plugin_info.restype = ctypes.POINTER(_FilterClass)
            info = library.H5PLget_plugin_info().contents
            if info.id == filter_id:
                _PLUGINS[filter_id] = (library, _FILTER_FUNCTION(info.filter))
                break
        else:
            raise KeyError(f"no hdf5plugin library for filter {filter_id}")
    return _PLUGINS[filter_id][1]


def _run_plugin(function, flags, cd_values, data):
    """Call an HDF5 filter function on *data* (bytes); return the output bytes."""
    size = len(data)
    buffer = _LIBC.malloc(max(size, 1))
    ctypes.memmove(buffer, data, size)
    pointer = ctypes.c_void_p(buffer)
    buffer_size = ctypes.c_size_t(size)
    values = (ctypes.c_uint * len(cd_values))(*cd_values)
    written = function(flags, len(cd_values), values, size, ctypes.byref(buffer_size), ctypes.byref(pointer))
    try:
        if written == 0:
            raise RuntimeError("the filter failed")
        return ctypes.string_at(pointer.value, written)
    finally:
        _LIBC.free(pointer.value)


class ChunkPipeline:
    """The filter pipeline of an h5py dataset, applied to whole chunks in memory."""

    def __init__(self, dataset):
        plist = dataset.id.get_create_plist()
        self.filters = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]
        self.functions = {code: _plugin_function(code) for code, _, _ in self.filters
                          if code not in (SHUFFLE, DEFLATE)}
        self.thread_safe = not any(code in NOT_THREAD_SAFE for code, _, _ in self.filters)

    def compress(self, chunk):
        """Bytes to store for *chunk* (a C-contiguous array of the chunk's full shape)."""
        data = np.ascontiguousarray(chunk)
        out = data
        for code, flags, values in self.filters:
            if code == SHUFFLE:
                size = values[0] if values else data.dtype.itemsize
                out = np.frombuffer(out, np.uint8).reshape(-1, size).T.copy() if size > 1 else out
            elif code == DEFLATE:
                out = zlib.compress(memoryview(out).cast("B"), values[0])
            else:
                out = _run_plugin(self.functions[code], 0, values, bytes(memoryview(out).cast("B")))
        return bytes(memoryview(out).cast("B")) if not isinstance(out, bytes) else out
