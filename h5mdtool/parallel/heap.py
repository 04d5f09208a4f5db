"""Process-wide heap settings for the ``h5mdtool`` command (glibc only).

Compressing a chunk in HDF5's deflate filter allocates zlib's state (about 270 KB in a few
pieces) and frees it again. Under MPI the freed state often sits at the top of the heap,
and glibc then hands those pages back to the kernel, so the next chunk faults them in
again: 312 000 page faults per rank for the 600x AdK trajectory on 2 ranks, against 35 000
when freed memory is kept (docs/performance.md). Fixing glibc's trim threshold also stops
it from raising its mmap threshold as large blocks are freed, so the mmap threshold is
fixed too, at the ceiling glibc would raise it to: without that, every temporary array of
a few MB (a block of frames in ``bench rmsd``) was mapped and faulted in afresh.

The command line keeps freed memory; the library leaves the malloc settings of a process
that imports it alone.
"""

import ctypes
import os

# glibc's mallopt parameter numbers
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: the largest mmap threshold glibc accepts on 64-bit systems (and its dynamic ceiling)
MMAP_THRESHOLD_CEILING = 32 << 20
ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def keep_freed_heap(trim_threshold=1 << 30, mmap_threshold=MMAP_THRESHOLD_CEILING):
    """Keep freed memory in the process instead of returning it to the kernel at once.

    Parameters
    ----------
    trim_threshold : int
        Bytes of free memory at the top of the heap that glibc keeps before returning any
        (glibc's default: 128 KiB, raised as large blocks are freed).
    mmap_threshold : int
        Allocations of this size or more get their own mapping, returned on free
        (glibc's default: 128 KiB, raised up to 32 MiB as large blocks are freed).

    Returns
    -------
    bool
        True when applied; False when the C library has no ``mallopt`` (macOS, ...), refuses
        a setting, or the user chose one with ``MALLOC_TRIM_THRESHOLD_`` or
        ``MALLOC_MMAP_THRESHOLD_``.
    """
    if any(name in os.environ for name in ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
            and mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1)
