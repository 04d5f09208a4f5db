"""Safe outputs: refuse to clobber, write under a temporary name, publish by rename."""

import os
import shutil
import sys
import uuid

from .errors import OutputError


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_output_file(path, inputs=(), force=False):
    """Check that *path* may be written as a new output file.

    Raises
    ------
    OutputError
        If *path* is one of *inputs*, a directory, exists without *force*, or its directory
        is missing or not writable.
    """
    path = os.fspath(path)
    for source in inputs:
        if _same_file(path, source):
            raise OutputError(f"{path}: the output is one of the inputs; choose another name")
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; give a file name for the output")
    if os.path.lexists(path) and not force:
        raise OutputError(f"{path}: exists; pass --force to replace it")
    _check_writable_directory(os.path.dirname(os.path.abspath(path)))


def check_output_directory(path, force=False):
    """Check that *path* may be filled as a new output directory.

    Raises
    ------
    OutputError
        If *path* is a file, a non-empty directory without *force*, or cannot be created.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{path}: exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path) and not force:
        raise OutputError(f"{path}: directory is not empty; pass --force to replace its contents")
    parent = os.path.dirname(os.path.abspath(path))
    _check_writable_directory(parent)


def _check_writable_directory(directory):
    if not os.path.isdir(directory):
        raise OutputError(f"{directory}: output directory does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{directory}: output directory is not writable")


def temporary_name(path):
    """A unique hidden name beside *path*, in the same directory (so rename is atomic)."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.h5mdtool-{uuid.uuid4().hex[:12]}.tmp")


def remove_quietly(path):
    """Remove a file or directory tree if it exists; never raises."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
    except OSError:
        pass


def publish(temporary, final):
    """Move a completed *temporary* file or directory to *final*, replacing what is there."""
    if os.path.isdir(temporary) and os.path.isdir(final):
        shutil.rmtree(final)
    os.replace(temporary, final)


def lfs_setstripe(path, stripe_count=None, stripe_size=None):
    """Create *path* empty with the asked Lustre striping, when the ``lfs`` command exists.

    Returns
    -------
    str
        What happened, for provenance: ``"applied"``, ``"not asked"``, ``"lfs not found"``
        or ``"failed: <reason>"``. Failing here is not an error: the file system may
        simply not be Lustre.
    """
    import subprocess

    if stripe_count is None and stripe_size is None:
        return "not asked"
    lfs = shutil.which("lfs")
    if lfs is None:
        return "lfs not found"
    command = [lfs, "setstripe"]
    if stripe_count is not None:
        command += ["-c", str(stripe_count)]
    if stripe_size is not None:
        command += ["-S", str(stripe_size)]
    try:
        done = subprocess.run(command + [path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"failed: {error}"
    if done.returncode != 0:
        return f"failed: {(done.stderr or done.stdout).strip().splitlines()[-1:] or done.returncode}"
    return "applied"


def preallocate(path, nbytes):
    """Reserve the first *nbytes* of *path* on disk with Linux ``fallocate(2)`` (mode 0).

    A full disk then fails before any frame is decoded, and the writes fill blocks that are
    already allocated (on the ext4 file system measured here, 2.36 GB took 0.46-0.47 s of
    kernel time instead of 0.51-0.52 s; see docs/performance.md for why other runs varied
    far more). Callers must pass a size the finished file will reach anyway (so nothing is
    left beyond the data). Where the call is not available (not Linux, a file system
    without fallocate) nothing happens: no zeros are written.

    Returns
    -------
    bool
        Whether the space was reserved.
    """
    import ctypes
    import ctypes.util

    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):
        return False
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        return fallocate(descriptor, 0, 0, int(nbytes)) == 0
    finally:
        os.close(descriptor)
