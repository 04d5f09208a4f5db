"""Process-wide heap setting for the ``h5mdtool`` command (glibc only).

Compressing a chunk in HDF5's deflate filter allocates zlib's state (about 270 KB in a few
pieces) and frees it again. Under MPI the freed state often sits at the top of the heap,
and glibc then hands those pages back to the kernel, so the next chunk faults them in
again: 312 000 page faults per rank for the 600x AdK trajectory on 2 ranks, against 35 000
when freed memory is kept (docs/performance.md). The command line keeps it; the library
leaves the malloc settings of a process that imports it alone.
"""

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter number
TRIM_THRESHOLD_ENV = "MALLOC_TRIM_THRESHOLD_"


def keep_freed_heap(threshold=1 << 30):
    """Let the process keep up to *threshold* bytes of freed memory at the top of its heap.

    Parameters
    ----------
    threshold : int
        Bytes of free heap top that glibc may keep before returning memory to the kernel
        (glibc's default is 128 KiB, adjusted upwards as large blocks are freed).

    Returns
    -------
    bool
        True when applied; False when the C library has no ``mallopt`` (macOS, ...), refuses
        the setting, or the user chose one with ``MALLOC_TRIM_THRESHOLD_``.
    """
    if TRIM_THRESHOLD_ENV in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(M_TRIM_THRESHOLD, int(threshold)) == 1
