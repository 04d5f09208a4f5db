"""Exceptions raised by h5mdtool.

Every failure that a user can cause (bad input, bad options, an existing output) raises a
subclass of :class:`H5mdToolError`; the command line turns these into one ``error: ...``
line and an exit code, and anything else is a bug that keeps its traceback.
"""


class H5mdToolError(Exception):
    """Root of all errors that h5mdtool reports to the user.

    Attributes
    ----------
    exit_code : int
        Exit status the command line uses for this error.
    collective : bool
        True when every rank raises this error together (for example after rank 0 found a bad
        input and broadcast the verdict), so the job can end without ``MPI_Abort``.
    """

    exit_code = 1
    collective = False


class UsageError(H5mdToolError):
    """A command line that is wrong whatever the files hold (exit status 2).

    Options that contradict each other, values outside their allowed range. An option that
    does not fit the input (``--nparts`` beyond its frames, a group the index file lacks)
    is an :class:`InputError`: exit status 2 means the command line itself is wrong.
    """

    exit_code = 2


class InputError(H5mdToolError):
    """An input trajectory or topology that is missing, empty, truncated or corrupt."""


class OverlapError(InputError):
    """Segments of one trajectory whose steps overlap or go backwards."""


class OutputError(H5mdToolError):
    """An output path that exists, is one of the inputs, or cannot be written."""


class StackError(H5mdToolError):
    """The software stack cannot do what was asked (for example h5py without MPI)."""


class RemoteRankError(H5mdToolError):
    """Raised on the ranks that did not fail, when another rank reported an error."""


def mark_collective(error):
    """Return *error* flagged as raised by every rank at once."""
    error.collective = True
    return error


class UnreadableError(InputError):
    """A file that cannot be read at all: missing, a directory, not HDF5, truncated."""


def locked_file_message(path):
    """What to tell a user whose HDF5 file could not be opened because another process holds its lock."""
    return (f"{path}: locked by another process (HDF5 file locking: is a program still writing it?); "
            "on a file system without working locks set HDF5_USE_FILE_LOCKING=FALSE")
