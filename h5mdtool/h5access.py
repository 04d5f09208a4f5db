"""Guarded reading of HDF5 files whatever they hold, for ``validate`` and ``info``.

:class:`Access` wraps every h5py call that can fail (missing members, unreadable
attributes, damaged objects, datatypes h5py cannot map) and records the failure in a
report instead of raising. Links are looked at before they are followed: soft links are
resolved one path component at a time (so a loop or a dangling target is reported, not
raised) and external links, met directly or through a soft link, are never followed.
:func:`isolated` runs a whole check in a forked child in serial runs, because libhdf5
itself can crash on damaged metadata.
"""

import os
import sys

import numpy as np

from .errors import H5mdToolError, UnreadableError
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


def open_hdf5(path):
    """Open *path* read-only with h5py.

    Raises
    ------
    UnreadableError
        If the path is missing, a directory, or not a readable HDF5 file (empty, truncated,
        another format).
    """
    import h5py

    if not os.path.exists(path):
        raise UnreadableError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UnreadableError(f"{path}: is a directory, not a file")
    try:
        return h5py.File(path, "r")
    except Exception as error:  # noqa: BLE001 - every way of failing means "cannot be read"
        raise UnreadableError(f"{path}: not a readable HDF5 file (empty, truncated or another format: {reason(error)})") from None


def _fork_is_safe():
    """Forking is safe here: POSIX, MPI not started in this process, not disabled."""
    if os.environ.get("H5MDTOOL_ISOLATE", "1") in ("0", "no", "false") or not hasattr(os, "fork"):
        return False
    module = sys.modules.get("mpi4py.MPI")
    try:
        return module is None or not module.Is_initialized() or module.Is_finalized()
    except Exception:  # noqa: BLE001
        return False


def _run_child(writer, function, args):
    import faulthandler

    faulthandler.disable()  # a crash here is expected and reported by the parent
    try:
        outcome = ("ok", function(*args))
    except H5mdToolError as error:
        outcome = ("error", error)
    except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
        outcome = ("exception", f"{type(error).__name__}: {error}")
    writer.send(outcome)
    writer.close()


def isolated(function, *args):
    """Run ``function(*args)`` where a crash of libhdf5 cannot take this process down.

    HDF5 itself can crash (segmentation fault) on damaged metadata, for instance a corrupt
    fractal-heap block of a group (seen with HDF5 1.10.8). Serial runs therefore read files
    in a forked child; under MPI (fork is unsafe after MPI_Init with some networks) the
    function runs in this process.

    Returns
    -------
    tuple
        ``("ok", value)``, ``("error", H5mdToolError)`` or ``("crash", signal number)``.

    Raises
    ------
    RuntimeError
        If the function failed with another exception in the child (a bug).
    """
    if not _fork_is_safe():
        try:
            return ("ok", function(*args))
        except H5mdToolError as error:
            return ("error", error)
    import multiprocessing

    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_run_child, args=(writer, function, args))
    child.start()
    writer.close()
    try:
        outcome = reader.recv()
    except EOFError:
        outcome = None
    finally:
        reader.close()
        child.join()
    if outcome is None:
        return ("crash", -child.exitcode if child.exitcode and child.exitcode < 0 else child.exitcode)
    if outcome[0] == "exception":
        raise RuntimeError(outcome[1])
    return outcome
