"""Guarded reading of HDF5 files whatever they hold, for ``validate`` and ``info``.

:class:`Access` wraps every h5py call that can fail (missing members, unreadable
attributes, damaged objects, datatypes h5py cannot map) and records the failure in a
report instead of raising. Links are looked at before they are followed: soft links are
resolved one path component at a time (so a loop or a dangling target is reported, not
raised) and external links, met directly or through a soft link, are never followed.
:func:`storage` says, from metadata alone, what a dataset declares and what it really
stores, so that nothing a file merely declares is ever allocated or read.
:func:`isolated` runs a whole check in a forked child in serial runs, because libhdf5
itself can crash, or loop for ever, on damaged metadata: the child sends a
:func:`heartbeat` as it progresses and is stopped when it stays silent too long.
"""

import collections
import math
import os
import sys
import time

import numpy as np

from ..formats.base import check_regular_file
from ..h5md.chunkcodec import chunk_stored
from ..parallel.errors import H5mdToolError, UnreadableError, locked_file_message
from .findings import ERROR, WARNING

#: Root groups whose content H5MD defines (a broken soft link there is an error).
H5MD_ROOTS = ("h5md", "particles", "observables", "connectivity")
#: Soft links followed in a row before calling it a loop (HDF5's own limit is 16).
MAX_SOFT_LINKS = 16


def reason(error):
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def join_path(path, name):
    return f"{path.rstrip('/')}/{name}"


def is_group(obj):
    import h5py

    return isinstance(obj, h5py.Group)


def is_dataset(obj):
    import h5py

    return isinstance(obj, h5py.Dataset)


def integers(value):
    """*value* as an integer array, or None when it is not of an integer type."""
    if value is None:
        return None
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001
        return None
    return array if array.dtype.kind in "iu" else None


def text_of(value):
    """*value* as a str when it is a (scalar) string, else None."""
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "OSU":
        value = value.item()
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        return value
    return None


class Access:
    """Guarded access to an open file: never raises, records link and read problems."""

    def __init__(self, handle, report):
        self.handle = handle
        self.report = report

    def _link_severity(self, path):
        top = path.strip("/").split("/", 1)[0]
        return ERROR if top in H5MD_ROOTS else WARNING

    def names(self, group, path):
        """Member names of *group* (creation order when tracked, else by name)."""
        try:
            return list(group)
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE002", path, f"cannot list this group: {reason(error)}")
            return []

    def link(self, group, name, path):
        """The link object for *name* (HardLink, SoftLink, ExternalLink) or None."""
        try:
            return group.get(name, getlink=True)
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE003", path, f"cannot read the link: {reason(error)}")
            return None

    def resolve(self, group, name, path, depth=0):
        """Follow member *name* of *group* without ever crossing into another file.

        Returns the object, or ``("missing",)``, ``("loop", link)``, ``("external", link)``
        or ``("error", exception)``. Soft links are resolved one path component at a time,
        each component's link type checked first.
        """
        import h5py

        try:
            link = group.get(name, getlink=True)
        except Exception as error:  # noqa: BLE001
            return ("error", error)
        if link is None:
            return ("missing",)
        if isinstance(link, h5py.ExternalLink):
            return ("external", link)
        if isinstance(link, h5py.SoftLink):
            if depth >= MAX_SOFT_LINKS:
                return ("loop", link)
            obj = self.handle if link.path.startswith("/") else group
            for component in (c for c in link.path.split("/") if c and c != "."):
                if not is_group(obj):
                    return ("missing",)
                obj = self.resolve(obj, component, path, depth + 1)
                if isinstance(obj, tuple):
                    return obj if obj[0] != "missing" else ("dangling", link)
            return obj
        try:
            return group[name]
        except Exception as error:  # noqa: BLE001
            return ("error", error)

    def child(self, group, name, path):
        """Member *name* of *group*, or None when missing, external, broken or unreadable."""
        if group is None or not is_group(group):
            return None
        obj = self.resolve(group, name, path)
        if not isinstance(obj, tuple):
            return obj
        self.report_problem(path, obj)
        return None

    def report_problem(self, path, outcome):
        kind = outcome[0]
        if kind == "external":
            self._external(path, outcome[1])
        elif kind in ("loop", "dangling"):
            self._broken_soft_link(path, outcome[1])
        elif kind == "error":
            self.report.add("FILE003", path, f"cannot open: {reason(outcome[1])}")

    def _external(self, path, link):
        self.report.add("LINK001", path, f"external link to {link.filename}:{link.path} (directly or through a soft link), not followed")

    def _broken_soft_link(self, path, link):
        self.report.add("LINK002", path, f"soft link to {link.path} cannot be resolved (dangling, or a loop)",
                        severity=self._link_severity(path))

    def walk(self, top):
        """Every link below group *top*, groups entered breadth first, each object once.

        Yields
        ------
        (group, name, path, link, obj)
            The group holding the link, the link's name and path, the link (None when it
            cannot be read) and, for a hard link to an object not met before, the object
            (None otherwise: other links, objects met through another hard link, objects
            that cannot be opened). The caller stops the walk when it has seen enough.
        """
        seen = {self.key(top)}
        queue = collections.deque([(top, "/")])
        while queue:
            group, path = queue.popleft()
            for name in self.names(group, path):
                child_path = join_path(path, name)
                link = self.link(group, name, child_path)
                obj = None
                if type(link).__name__ == "HardLink":
                    obj = self.child(group, name, child_path)
                    key = self.key(obj) if obj is not None else None
                    if key is None or key in seen:
                        obj = None
                    else:
                        seen.add(key)
                        if is_group(obj):
                            queue.append((obj, child_path))
                yield group, name, child_path, link, obj

    @staticmethod
    def key(obj):
        """A hashable identity of the object *obj* (the same through every hard link), or None.

        h5py hashes objects by their file and object numbers, which it cannot read for some
        damaged objects; those get None (never treated as seen).
        """
        try:
            return hash(obj.id)
        except Exception:  # noqa: BLE001
            return None

    def same(self, a, b):
        """True when *a* and *b* are one object (hard links); False when unknown."""
        key = self.key(a)
        return key is not None and key == self.key(b)

    def attr(self, obj, name, path):
        """Attribute *name* of *obj*, or None when absent or unreadable (FILE003)."""
        try:
            if name not in obj.attrs:
                return None
            return obj.attrs[name]
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE003", path, f"cannot read attribute {name}: {reason(error)}")
            return None

    def string_kind(self, obj, name):
        """``(variable_length, shape)`` of a string attribute, or None for non-strings."""
        import h5py

        try:
            attribute = obj.attrs.get_id(name)
            kind = attribute.get_type()
            if not isinstance(kind, h5py.h5t.TypeStringID):
                return None
            return bool(kind.is_variable_str()), attribute.shape
        except Exception:  # noqa: BLE001
            return None

    def shape(self, dataset, path):
        try:
            shape = dataset.shape
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE003", path, f"cannot read the shape: {reason(error)}")
            return None
        return None if shape is None else tuple(int(s) for s in shape)

    def kind(self, dataset, path):
        """numpy dtype kind of *dataset* ('i', 'u', 'f', 'S', 'O', 'V'...), or None."""
        try:
            return dataset.dtype.kind
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE003", path, f"cannot read the datatype: {reason(error)}")
            return None

    def read(self, dataset, path, selection=()):
        try:
            return dataset[selection]
        except Exception as error:  # noqa: BLE001
            self.report.add("FILE003", path, f"cannot read the data: {reason(error)}")
            return None


LAYOUTS = {0: "compact", 1: "contiguous", 2: "chunked", 3: "virtual"}


def keeps_data_elsewhere(dataset):
    """True for a virtual dataset or one whose raw data live in external files (never read)."""
    plist = dataset.id.get_create_plist()
    return LAYOUTS.get(plist.get_layout()) == "virtual" or plist.get_external_count() > 0


#: Chunks of a dataset's grid up to which its chunk index is walked. HDF5 1.10.8 counts the
#: stored chunks (``get_num_chunks``), sums their sizes (``get_storage_size``) and finds a
#: chunk's record (``get_chunk_info_by_coord``) by visiting every index entry up to the last
#: one written, about 0.2 us each: a dataset declaring 2^40 rows whose last row was written
#: took minutes. Beyond it, chunks are looked up one at a time (:func:`chunk_stored`).
WALKED_CHUNKS = 2**21
#: Chunks looked up, spread evenly over the grid, to tell a written prefix from storage
#: with holes when the index is too large to walk.
PROBED_CHUNKS = 64


def chunk_grid(dataset):
    """Chunks along each axis of chunked *dataset* (the last ones partly beyond its shape)."""
    return [-(-int(n) // int(c)) for n, c in zip(dataset.shape, dataset.chunks)]


def walkable(dataset):
    """True unless *dataset* is chunked with more than :data:`WALKED_CHUNKS` chunks declared,
    so that counting its chunks would walk a chunk index too large (see there)."""
    return not dataset.chunks or math.prod(chunk_grid(dataset)) <= WALKED_CHUNKS


def storage(dataset):
    """What *dataset* declares and what it really stores, from its metadata alone.

    Returns
    -------
    dict
        ``layout`` ("compact", "contiguous", "chunked", "virtual"), ``external`` (raw data
        in other files: never read), ``declared_chunks`` and ``stored_chunks`` (chunked
        layout; ``stored_chunks`` None when the index is too large to count, see
        :data:`WALKED_CHUNKS`), ``stored_bytes`` (None likewise), ``complete`` (every
        element has storage) and ``stored_rows``: how many leading rows of the first axis
        have storage (all rows when complete; the written prefix of a file whose writer
        stopped early; None when the stored chunks are not a prefix). For a chunked dataset
        the prefix is found with a binary search of chunk lookups by coordinate, so this
        costs O(log n) lookups. When the index is too large to count, the prefix is checked
        by looking up :data:`PROBED_CHUNKS` chunks spread over the grid (the last one
        included) instead of counting every chunk.
    """
    plist = dataset.id.get_create_plist()
    layout = LAYOUTS.get(plist.get_layout(), "unknown")
    shape = tuple(int(n) for n in dataset.shape or ())
    counted = layout != "chunked" or walkable(dataset)
    facts = {"layout": layout, "external": keeps_data_elsewhere(dataset),
             "declared_chunks": None, "stored_chunks": None,
             "stored_bytes": int(dataset.id.get_storage_size()) if counted else None,
             "complete": True, "stored_rows": shape[0] if shape else None}
    if facts["external"]:
        facts["complete"], facts["stored_rows"] = False, None
        return facts
    if math.prod(shape) == 0:
        return facts
    if layout == "contiguous":
        if facts["stored_bytes"] == 0:  # allocated on the first write: all or nothing
            facts["complete"], facts["stored_rows"] = False, 0
        return facts
    if layout != "chunked":
        return facts
    chunks = tuple(int(c) for c in dataset.chunks)
    grid = chunk_grid(dataset)
    declared = math.prod(grid)
    facts["declared_chunks"] = declared
    per_row = declared // grid[0]
    if counted:
        stored = facts["stored_chunks"] = int(dataset.id.get_num_chunks())
        if stored >= declared:
            return facts

    def corner(row):
        return (row * chunks[0],) + (0,) * (len(shape) - 1)

    def has_storage(row):
        if counted:
            return dataset.id.get_chunk_info_by_coord(corner(row)).byte_offset is not None
        return chunk_stored(dataset, corner(row))

    low, high = 0, grid[0]  # rows [0, low) are stored; rows >= high are not
    while low < high:
        middle = (low + high) // 2
        if has_storage(middle):
            low = middle + 1
        else:
            high = middle
    if counted:
        facts["complete"] = False
        facts["stored_rows"] = min(low * chunks[0], shape[0]) if low * per_row == stored else None
        return facts
    probes = np.unique(np.linspace(0, grid[0] - 1, min(grid[0], PROBED_CHUNKS)).astype(np.int64))
    prefix = all(has_storage(int(row)) == (row < low) for row in probes)
    facts["complete"] = prefix and low == grid[0]
    facts["stored_rows"] = min(low * chunks[0], shape[0]) if prefix else None
    return facts


def load_filter_plugins():
    """Register hdf5plugin's filters (Zstd, Blosc, Bitshuffle, ...) with HDF5 when it is installed."""
    try:
        import hdf5plugin  # noqa: F401 - importing it registers the filters
    except Exception:  # noqa: BLE001 - not installed, or broken: its filters stay unavailable
        return False
    return True


def open_hdf5(path):
    """Open *path* read-only with h5py (hdf5plugin's filters loaded when it is installed).

    Raises
    ------
    UnreadableError
        If the path is missing, a directory, not a regular file (a FIFO would block the
        open), or not a readable HDF5 file (empty, truncated, another format).
    """
    import h5py

    check_regular_file(path)
    load_filter_plugins()
    try:
        return h5py.File(path, "r")
    except Exception as error:  # noqa: BLE001 - every way of failing means "cannot be read"
        if "unable to lock file" in reason(error).lower():
            raise UnreadableError(locked_file_message(path)) from None
        raise UnreadableError(f"{path}: not a readable HDF5 file (empty, truncated or another format: {reason(error)})") from None


def _isolation():
    """How :func:`isolated` runs: "fork", "spawn" (MPI is running in this process) or "inline"."""
    if os.environ.get("H5MDTOOL_ISOLATE", "1") in ("0", "no", "false") or not hasattr(os, "fork"):
        return "inline"
    module = sys.modules.get("mpi4py.MPI")
    try:
        mpi_running = module is not None and module.Is_initialized() and not module.Is_finalized()
    except Exception:  # noqa: BLE001
        return "inline"
    return "spawn" if mpi_running else "fork"


#: Environment variables of MPI launchers: a spawned reader must not believe it is a rank.
LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPI_LOCAL", "I_MPI_", "SLURM_STEP", "SLURM_PROCID")
#: The spawned reader: sets sys.path as the parent's, then runs the function (see :func:`_spawn`).
SPAWNED_READER = (
    "import os, pickle, sys\n"
    "from multiprocessing.connection import Connection\n"
    "path, payload = pickle.loads(sys.stdin.buffer.read())\n"
    "sys.path[:] = path\n"
    "from h5mdtool.check.h5access import _run_child\n"
    "function, args = pickle.loads(payload)\n"
    "_run_child(Connection(int(sys.argv[1]), readable=False), function, args)\n"
)


#: Seconds an isolated reader may go without a heartbeat before it is stopped.
DEFAULT_READ_TIMEOUT = 60.0
#: Heartbeats are sent at most this often (seconds).
HEARTBEAT_INTERVAL = 0.5

_heartbeat_sender = None
_last_heartbeat = 0.0


def read_timeout():
    """Seconds without progress after which :func:`isolated` stops its child (``H5MDTOOL_READ_TIMEOUT``)."""
    try:
        value = float(os.environ.get("H5MDTOOL_READ_TIMEOUT", DEFAULT_READ_TIMEOUT))
    except ValueError:
        return DEFAULT_READ_TIMEOUT
    return value if value > 0 else DEFAULT_READ_TIMEOUT


def heartbeat():
    """Tell the parent of an isolated check that it progresses (cheap; a no-op elsewhere).

    Loops over blocks, chunks or objects call this; a libhdf5 call that never returns stops
    the heartbeats and the parent stops the child after :func:`read_timeout` seconds.
    """
    global _last_heartbeat
    if _heartbeat_sender is None:
        return
    now = time.monotonic()
    if now - _last_heartbeat >= HEARTBEAT_INTERVAL:
        _last_heartbeat = now
        _heartbeat_sender()


def _run_child(writer, function, args):
    import faulthandler

    global _heartbeat_sender
    faulthandler.disable()  # a crash here is expected and reported by the parent
    _heartbeat_sender = lambda: writer.send(("beat",))  # noqa: E731
    try:
        outcome = ("ok", function(*args))
    except H5mdToolError as error:
        outcome = ("error", error)
    except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
        outcome = ("exception", f"{type(error).__name__}: {error}")
    _heartbeat_sender = None
    writer.send(outcome)
    writer.close()


def isolated(function, *args, timeout=None):
    """Run ``function(*args)`` where a crash or a hang of libhdf5 cannot take this process down.

    HDF5 itself can crash (segmentation fault) on damaged metadata, for instance a corrupt
    fractal-heap block of a group, or loop for ever, for instance on a corrupt global heap
    (both seen with HDF5 1.10.8). Files are therefore read in a child process, which is
    stopped when it sends no :func:`heartbeat` for *timeout* seconds: a forked child in
    serial runs, a fresh interpreter (fork and exec) once MPI is running in this process,
    since a plain fork after MPI_Init is unsafe with some networks. ``H5MDTOOL_ISOLATE=0``
    runs the function in this process.

    Parameters
    ----------
    timeout : float, optional
        Seconds without progress; default :func:`read_timeout`.

    Returns
    -------
    tuple
        ``("ok", value)``, ``("error", H5mdToolError)``, ``("crash", signal number)`` or
        ``("timeout", seconds)``.

    Raises
    ------
    RuntimeError
        If the function failed with another exception in the child (a bug).
    """
    mode = _isolation()
    if mode == "inline":
        try:
            return ("ok", function(*args))
        except H5mdToolError as error:
            return ("error", error)
    timeout = read_timeout() if timeout is None else float(timeout)
    child, reader = _spawn(function, args) if mode == "spawn" else _fork(function, args)
    outcome = None
    try:
        while outcome is None:
            if not reader.poll(timeout):
                child.kill()
                outcome = ("timeout", timeout)
                break
            message = reader.recv()
            if message[0] != "beat":
                outcome = message
    except EOFError:
        outcome = None
    finally:
        reader.close()
        exitcode = child.wait() if mode == "spawn" else (child.join() or child.exitcode)
    if outcome is None:
        return ("crash", -exitcode if exitcode and exitcode < 0 else exitcode)
    if outcome[0] == "exception":
        raise RuntimeError(outcome[1])
    return outcome


def _fork(function, args):
    """A forked child running *function*; returns (process, connection to read)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_run_child, args=(writer, function, args))
    child.start()
    writer.close()
    return child, reader


def _spawn(function, args):
    """A fresh interpreter running *function* (fork and exec: safe after MPI_Init).

    The child gets this process's ``sys.path`` and an environment without the MPI launcher's
    variables, so it never starts MPI; results and heartbeats come back on a pipe.
    """
    import pickle
    import subprocess
    from multiprocessing.connection import Connection

    read_fd, write_fd = os.pipe()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    environment["H5MDTOOL_MPI"] = "0"
    try:
        child = subprocess.Popen([sys.executable, "-c", SPAWNED_READER, str(write_fd)], stdin=subprocess.PIPE,
                                 pass_fds=(write_fd,), env=environment)
    finally:
        os.close(write_fd)
    try:
        child.stdin.write(pickle.dumps((list(sys.path), pickle.dumps((function, args)))))
        child.stdin.close()
    except OSError:  # the child died at once: its exit status tells
        pass
    return child, Connection(read_fd, writable=False)
