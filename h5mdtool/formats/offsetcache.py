"""A persistent cache of XTC and TRR frame offsets, kept apart from the trajectories.

XTC and TRR frames carry no index: every command that reads such a file first walks all its
frame headers (:mod:`h5mdtool.formats.xdrscan`), about 10 us a frame on one rank. This
cache keeps the result of a complete scan (frame starts and packed headers) so that the
next command on the same, unchanged file skips it.

* Where: ``$XDG_CACHE_HOME/h5mdtool/offsets`` (``~/.cache/h5mdtool/offsets`` when the
  variable is unset), one ``.npz`` file per trajectory, never beside the trajectory (its
  directory may be read-only or shared, and MDAnalysis's own hidden offset files there
  already confuse users). ``H5MDTOOL_OFFSETS_CACHE=off`` turns the cache off.
* Which file: an entry is named by a hash of the trajectory's real path, device, inode,
  size, modification time and status-change time (nanoseconds), and holds that key to be
  compared again. A file written again, appended to, moved over or touched has a new key.
* Checked before use: the headers of a sample of the cached frames (the first, the last and
  :data:`SAMPLE_FRAMES` spread between) are read and walked again with every check of the
  scan; the cached starts and headers must equal what the walk finds. An entry that fails is
  removed and the file scanned.
* Only scans of whole files are kept (an incomplete last frame, dropped with
  ``--on-truncated drop``, is not), only when the file did not change while it was scanned,
  and only when it was last modified :data:`RECENT_SECONDS` or more before: file systems
  record times in clock ticks of a few milliseconds, so a file changed again within the
  tick of its scan would keep its key. The cache never decides whether a command fails: an
  entry that cannot be read or written is the same as no entry.
* Size: at most :data:`MAX_BYTES`; the least recently used entries go first.
"""

import hashlib
import os
import tempfile
import time

import numpy as np

from ..parallel.errors import InputError
from .base import file_stat

#: Environment variable: ``off`` (or ``0``, ``no``, ``false``) turns the cache off.
ENVIRONMENT = "H5MDTOOL_OFFSETS_CACHE"
#: Version of the entries' content; entries of another version are never found.
VERSION = 1
#: Frames besides the first and the last whose headers are walked again before an entry is used.
SAMPLE_FRAMES = 30
#: Bytes the cache holds at most (a 588,000-frame XTC's entry: about 40 MB).
MAX_BYTES = 1 << 30
#: A file modified less than this many seconds before its scan is not kept (see above).
RECENT_SECONDS = 5.0
#: Temporary files older than this (seconds) are left by killed processes and removed.
STALE_TEMPORARY = 3600

_OFF = ("off", "0", "no", "false")


def cache_directory():
    """The cache's directory, or None when ``H5MDTOOL_OFFSETS_CACHE`` turns it off (or no
    home directory is known)."""
    if os.environ.get(ENVIRONMENT, "").strip().lower() in _OFF:
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative: ignored, as the XDG specification says
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):  # no home directory: never a cache relative to the working directory
        return None
    return os.path.join(base, "h5mdtool", "offsets")


def entry_key(format_name, path, stat):
    """The text that identifies a trajectory file's content (see the module's docstring)."""
    return "\0".join(str(value) for value in (
        VERSION, format_name, os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size,
        stat.st_mtime_ns, stat.st_ctime_ns))


def _entry_path(directory, key):
    # a name's bytes that are not UTF-8 are carried as lone surrogates (PEP 383): back to bytes
    return os.path.join(directory, hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest() + ".npz")


def _same_file(a, b):
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def lookup(cls, path):
    """The file's status and its cached scan, if the cache holds one that passes the checks.

    Parameters
    ----------
    cls : type
        The format (:class:`~h5mdtool.formats.xtc.XTCFormat` or the TRR one: a walker).
    path : str

    Returns
    -------
    (os.stat_result, (offsets, rows) or None)
        *offsets*: start of each frame, then the end of the last; *rows*: the packed headers
        (:meth:`~h5mdtool.formats.base.FrameWalk.rows`), as a complete scan returns them.

    Raises
    ------
    InputError
        As :func:`~h5mdtool.formats.base.file_stat`: a missing file, a directory.
    """
    stat = file_stat(path)
    directory = cache_directory()
    if directory is None:
        return stat, None
    key = entry_key(cls.name, path, stat)
    entry = _entry_path(directory, key)
    try:
        with np.load(entry, allow_pickle=False) as stored:
            if str(stored["key"]) != key:
                return stat, None
            offsets, rows = stored["offsets"], stored["rows"]
    except FileNotFoundError:
        return stat, None
    except Exception:  # noqa: BLE001 - a damaged or foreign entry is no entry (and goes)
        _remove(entry)
        return stat, None
    if not _plausible(offsets, rows, stat.st_size) or not _sample_agrees(cls, path, stat, offsets, rows):
        _remove(entry)
        return stat, None
    try:
        os.utime(entry)  # recently used: pruned last
    except OSError:
        pass
    return stat, (offsets, rows)


def _plausible(offsets, rows, size):
    return (offsets.dtype == np.int64 and offsets.ndim == 1 and len(offsets) >= 2 and rows.ndim >= 1
            and len(rows) == len(offsets) - 1 and offsets[0] == 0
            and offsets[-1] <= size and bool(np.all(np.diff(offsets) > 0)))


def sample_frames(n_frames):
    """Frames whose headers are walked again before an entry is used: the first, the last,
    and :data:`SAMPLE_FRAMES` spread evenly between."""
    return np.unique(np.linspace(0, n_frames - 1, SAMPLE_FRAMES + 2).round().astype(np.int64))


def _sample_agrees(cls, path, stat, offsets, rows):
    """Whether walking the sampled frames of *path* finds the cached starts and headers."""
    walker = cls.walker
    try:
        with open(path, "rb", buffering=0) as handle:
            n_atoms = None  # frame 0, always sampled first, gives the atoms later frames are walked with
            for frame in sample_frames(len(rows)):
                frame = int(frame)
                walk = walker(path, handle.fileno(), stat.st_size, "error", position=int(offsets[frame]),
                              frame=frame, n_atoms=n_atoms)
                walk.run(stop=int(offsets[frame]) + 1)
                n_atoms = walk.n_atoms
                walked = walk.rows()
                if (walk.offsets != [offsets[frame]] or walk.position != offsets[frame + 1]
                        or walked.dtype != rows.dtype or walked.shape[1:] != rows.shape[1:]
                        or not np.array_equal(walked[0], rows[frame])):
                    return False
    except (InputError, OSError, ValueError, IndexError):
        return False
    return True


def store(cls, path, stat, offsets, rows):
    """Keep a complete scan of *path* (its *stat* taken before the scan); silently nothing
    when the cache is off, the file changed since *stat*, or the entry cannot be written."""
    directory = cache_directory()
    if directory is None:
        return
    try:
        if not _same_file(stat, os.stat(path)):
            return  # written to while it was scanned: the scan may hold frames the key does not
        if time.time() - stat.st_mtime < RECENT_SECONDS:
            return
        os.makedirs(directory, mode=0o700, exist_ok=True)
        key = entry_key(cls.name, path, stat)
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".entry-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(descriptor, "wb") as handle:
            np.savez(handle, key=np.array(key), offsets=np.asarray(offsets, np.int64),
                     rows=np.ascontiguousarray(rows))
        os.replace(temporary, _entry_path(directory, key))
    except OSError:
        pass
    finally:
        _remove(temporary)
    prune(directory)


def prune(directory, max_bytes=None):
    """Remove the least recently used entries until the cache holds at most *max_bytes*
    (default :data:`MAX_BYTES`), and temporary files killed processes left."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = []
    now = time.time()
    try:
        names = [entry.path for entry in os.scandir(directory)]
    except OSError:
        return
    for name in names:
        try:
            stat = os.stat(name)
        except OSError:
            continue
        if name.endswith(".tmp"):
            if now - stat.st_mtime > STALE_TEMPORARY:
                _remove(name)
        elif name.endswith(".npz"):
            entries.append((stat.st_mtime, stat.st_size, name))
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= limit:
            break
        _remove(name)
        total -= size


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass
