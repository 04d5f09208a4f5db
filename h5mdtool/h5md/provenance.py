"""What h5mdtool records about how a file was made: command, inputs, software, ranks."""

import datetime
import shlex
import socket
import sys

from .. import __version__
from ..parallel.mpi import mpi_library_version


def command_line(argv=None):
    """The command as the user typed it (program name shortened to ``h5mdtool``)."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(("h5mdtool", "__main__.py")):
        argv[0] = "h5mdtool"
    return shlex.join(argv)


def printable(text):
    """*text* with the bytes of a non-UTF-8 file name as escapes (``b\\xff.xtc``).

    Python carries such bytes in ``str`` as lone surrogates (PEP 383), which HDF5's UTF-8
    strings and UTF-8 output cannot encode.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def library_text(text):
    """*text* from a C library, made printable: NUL terminators and surrounding blanks removed.

    Open MPI's ``MPI_Get_library_version`` string ends with its C terminator (mpi4py passes
    the whole buffer through), which would otherwise end up in JSON and HDF5 attributes.
    """
    if text is None:
        return None
    return str(text).replace("\x00", "").strip()


def software_versions():
    """Versions of h5mdtool and the libraries that shape its output.

    MDAnalysis's is read from its installed metadata unless it is imported already: a
    command that did not need MDAnalysis does not import it (0.25-0.7 s) for its version.
    """
    from importlib import metadata

    import h5py
    import numpy

    mdanalysis = sys.modules.get("MDAnalysis")

    versions = {
        "h5mdtool": __version__,
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "MDAnalysis": mdanalysis.__version__ if mdanalysis is not None else metadata.version("MDAnalysis"),
        "h5py": h5py.version.version,
        "HDF5": h5py.version.hdf5_version,
        "h5py_mpi": bool(h5py.get_config().mpi),
    }
    mpi4py = sys.modules.get("mpi4py")
    if mpi4py is not None:
        versions["mpi4py"] = mpi4py.__version__
        versions["MPI"] = library_text(mpi_library_version())
    return versions


def base_record(comm, command=None):
    """The provenance fields every h5mdtool output shares (computed on rank 0)."""
    return {
        "h5mdtool_version": __version__,
        "command": printable(command or command_line()),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "n_ranks": comm.size,
        "versions": software_versions(),
    }
