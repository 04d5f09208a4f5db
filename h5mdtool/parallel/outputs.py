"""Safe outputs: refuse to clobber, write under a temporary name, publish by rename.

Temporaries are hidden names in the directory of the output (so publishing is a rename on
one file system). They are removed on failure and on signals (:mod:`h5mdtool.parallel.interrupts`);
publishing and creating them hold the interrupt lock, so a signal never leaves one behind
nor publishes a half-cleaned one.
"""

import contextlib
import errno
import functools
import glob
import os
import re
import shutil
import stat
import sys
import uuid

from .errors import OutputError, UsageError
from .interrupts import exclusive, on_stop


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
        If *path* is empty, one of *inputs*, a directory (or ends with ``/``), a device,
        pipe or socket (even with
        *force*: renaming over ``/dev/null`` would replace the device), exists without
        *force*, or its directory is missing or not writable.
    """
    path = os.fspath(path)
    if not path:
        raise OutputError("the output file name is empty")
    for source in inputs:
        if _same_file(path, source):
            raise OutputError(f"{path}: the output is one of the inputs; choose another name")
    if os.path.basename(path) in ("", ".", ".."):  # out/ would have made a file named out
        raise OutputError(f"{path}: names a directory; give a file name for the output")
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; give a file name for the output")
    kind = _special_file_kind(path)
    if kind is not None:
        raise OutputError(f"{path}: is {kind}, not a regular file; h5mdtool writes its output under a temporary "
                          "name and renames it into place, which would replace it: give a file name")
    if os.path.lexists(path) and not force:
        raise OutputError(f"{path}: exists; pass --force to replace it")
    _check_writable_directory(os.path.dirname(os.path.abspath(path)))


def check_output_extension(path, written, named_by, suggestion):
    """Refuse an output file name whose extension names another format than the one written.

    ``convert -o md.xtc`` would otherwise write an H5MD file named ``md.xtc``, which every
    other program then misreads.

    Parameters
    ----------
    path : str
    written : str
        The format written (``"H5MD"``, ``"PDB"``).
    named_by : mapping
        Lower-case extensions with the dot -> the format each names; extensions not listed,
        and those naming *written*, are accepted.
    suggestion : str
        The extension to suggest instead (``".h5md"``).

    Raises
    ------
    UsageError
        If the extension names another format.
    """
    extension = os.path.splitext(os.fspath(path))[1].lower()
    named = named_by.get(extension)
    if named is not None and named != written:
        stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        raise UsageError(f"{path}: {extension} names {named}, but the output is {written}; "
                         f"name it e.g. {stem}{suggestion}")


def _special_file_kind(path):
    """What *path* (followed through symbolic links) is when it is neither a regular file,
    a directory nor missing: ``"a character device"`` (``/dev/null``), ``"a pipe"``, ...; else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None


def check_output_directory(path, inputs=(), force=False):
    """Check, before any work, that *path* may receive the files of a split.

    An existing empty directory is written into (it keeps its permissions, group and
    file-system striping); a symbolic link to a directory counts as that directory.

    Parameters
    ----------
    path : str
    inputs : sequence of str
        Input files, which must not be inside *path* (by any name: symbolic links are
        resolved and hard links compared by inode), since ``force`` removes its contents.
    force : bool
        Allow a non-empty directory (its contents are replaced when the new files are ready).

    Returns
    -------
    bool
        Whether the directory exists already.

    Raises
    ------
    OutputError
        If *path* is a dangling symbolic link, not a directory, a non-empty directory without
        *force*, not writable, or holds one of *inputs*; or its parent is missing or not
        writable when it does not exist yet.
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.islink(path) and not os.path.exists(path):
        raise OutputError(f"{path}: is a symbolic link to {os.readlink(path)}, which does not exist")
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{path}: exists and is not a directory")
    if not os.path.isdir(path):
        _check_writable_directory(os.path.dirname(path))
        return False
    _check_inputs_outside(path, inputs)
    if os.listdir(path) and not force:
        raise OutputError(f"{path}: directory is not empty; pass --force to replace its contents")
    _check_writable_directory(path)
    return True


def _check_inputs_outside(directory, inputs):
    """Refuse inputs that live in *directory* under any name (symbolic or hard links)."""
    real_directory = os.path.realpath(directory)
    identities = {}
    for source in inputs:
        real = os.path.realpath(source)
        if os.path.commonpath([real, real_directory]) == real_directory:
            raise OutputError(
                f"{source} is inside the output directory {directory} (as {real}); "
                "choose another output directory"
            )
        with contextlib.suppress(OSError):
            stat = os.stat(source)
            identities[(stat.st_dev, stat.st_ino)] = source
    if not identities:
        return
    for root, directories, files in os.walk(directory):
        for name in files + directories:
            entry = os.path.join(root, name)
            try:
                stat = os.lstat(entry)
            except OSError:
                continue
            source = identities.get((stat.st_dev, stat.st_ino))
            if source is not None:
                raise OutputError(
                    f"{source} is the same file as {entry} in the output directory; "
                    "choose another output directory"
                )


def _check_writable_directory(directory):
    if not os.path.isdir(directory):
        raise OutputError(f"{directory}: output directory does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{directory}: output directory is not writable")


#: Names handed out by :func:`temporary_name` and neither published nor removed yet; a
#: signal removes them (:func:`remove_pending_temporaries`), whoever wrote them.
_pending = set()


def temporary_name(path):
    """A unique hidden name beside *path*, in the same directory (so rename is atomic).

    Until :func:`publish` or :func:`remove_quietly` is called with it, the name is pending:
    if the command line is stopped by a signal, the file there is removed.
    """
    directory, name = os.path.split(os.path.abspath(path))
    token = uuid.uuid4().hex[:12]
    # the output's own name is shortened when needed: a name the file system accepts must
    # not fail as a temporary, nor once claimed for removal (remove_quietly appends to it)
    room = _name_max(directory) - len(f"..h5mdtool-{token}.tmp") - _CLAIM_LENGTH
    temporary = os.path.join(directory, f".{_shortened(name, room)}.h5mdtool-{token}.tmp")
    _pending.add(temporary)
    return temporary


def claim_for_update(path, action="append", holders=None, copy=None):
    """Rank 0: make the lock file that lets one command at a time update the file *path*.

    An update (``--append``) copies the file, extends the copy and renames it over the file:
    two at once would each publish their own copy, and the frames of the first would be
    lost without a word. The lock is a hidden file beside *path*'s target, holding the host
    and process id of every process of the update and the working copy's path, made by a
    hard link (atomic with its content on local file systems, NFS and Lustre alike); it is
    pending like a temporary (removed on errors and signals). A lock left by processes
    killed outright (``kill -9``) is stale once none of them runs: the next update (or
    convert to *path*) removes it and the working copy it names (:func:`clear_stale_lock`).

    Parameters
    ----------
    path : str
    action : str
        What the update is called in messages.
    holders : list of (str, int), optional
        ``(host, pid)`` of every process taking part (default: this one).
    copy : str, optional
        The working copy the update will write (removed with a stale lock).

    Returns
    -------
    (str, str or None)
        The lock's path (pass it to :func:`remove_quietly` when the update is published),
        and a note when a stale lock was cleared first.

    Raises
    ------
    OutputError
        If another process may hold the lock, or it cannot be made.
    """
    import socket

    lock = lock_path(path)
    record = "".join(f"{host} {pid}\n" for host, pid in holders or [(socket.gethostname(), os.getpid())])
    record += f"copy {copy}\n" if copy else ""
    note = None
    for _ in range(2):  # once more after clearing a stale lock
        draft = f"{lock}.{uuid.uuid4().hex[:12]}"
        with exclusive():
            try:
                with open(draft, "x") as handle:
                    handle.write(record)
                try:
                    os.link(draft, lock)
                except OSError as error:  # a file system without hard links: create it in place
                    if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                        raise
                    with open(lock, "x") as handle:
                        handle.write(record)
                _pending.add(lock)
                return lock, note
            except FileExistsError:
                pass
            except OSError as error:
                raise OutputError(f"{path}: cannot be locked for the {action} ({system_reason(error)})") from None
            finally:
                with contextlib.suppress(OSError):
                    os.remove(draft)
        note = clear_stale_lock(path, action) or note
    raise OutputError(f"{path}: another h5mdtool {action} is updating it; run one at a time")


def lock_path(path):
    """The lock of updates of the file *path* (hidden, beside the file it names)."""
    directory, name = os.path.split(os.path.realpath(path))
    room = _name_max(directory) - len("..h5mdtool-lock") - _CLAIM_LENGTH  # the draft's suffix is shorter
    return os.path.join(directory, f".{_shortened(name, room)}.h5mdtool-lock")


def clear_stale_lock(path, action="append"):
    """Rank 0: remove the update lock of *path* when none of the processes it names runs.

    A lock is stale when every process it records ran on this host and is gone; the
    working copy it names is removed with it. Processes of other hosts cannot be checked
    from here: the message names them and the lock to remove once they are gone.

    Returns
    -------
    str or None
        A note saying what was removed, or None when there was no lock.

    Raises
    ------
    OutputError
        If a process the lock names may still run.
    """
    import socket

    lock = lock_path(path)
    try:
        before = os.stat(lock)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OutputError(f"{path}: cannot read its update lock {lock} ({system_reason(error)})") from None
    holders, copy = _lock_record(lock)
    host = socket.gethostname()
    if not holders:
        raise OutputError(f"{path}: another h5mdtool {action} is updating it (its lock {lock} names no process: "
                          "if no h5mdtool runs, remove it); run one at a time")
    running = [(h, pid) for h, pid in holders if h == host and process_alive(pid)]
    elsewhere = sorted({h for h, _ in holders if h != host})
    if running:
        raise OutputError(f"{path}: another h5mdtool {action} is updating it (process "
                          f"{', '.join(str(pid) for _, pid in running)} on {host}); run one at a time")
    if elsewhere:
        pids = ", ".join(f"{pid} on {h}" for h, pid in holders if h != host)
        raise OutputError(f"{path}: another h5mdtool {action} may be updating it (process {pids}, which cannot be "
                          f"checked from {host}; if none of them runs, remove {lock}); run one at a time")
    claimed = f"{lock}{CLAIMED}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        os.rename(lock, claimed)
    except FileNotFoundError:  # another process cleared it first
        return None
    if os.stat(claimed).st_ino != before.st_ino:  # a new lock took its place meanwhile: not ours to clear
        os.rename(claimed, lock)
        raise OutputError(f"{path}: another h5mdtool {action} is updating it; run one at a time")
    os.remove(claimed)
    removed = ""
    if copy and os.path.dirname(copy) == os.path.dirname(lock) and _TEMPORARY.fullmatch(os.path.basename(copy)) \
            and os.path.lexists(copy):
        remove_quietly(copy)
        removed = f" and its working copy {os.path.basename(copy)}"
    pids = ", ".join(str(pid) for _, pid in holders)
    return f"removed the lock{removed} left by an h5mdtool {action} whose processes ({pids} on {host}) were killed"


def _lock_record(lock):
    """``([(host, pid), ...], working copy or None)`` written in *lock* (no holders when unreadable)."""
    holders, copy = [], None
    try:
        with open(lock) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return holders, copy
    for line in lines:
        key, _, value = line.partition(" ")
        if key == "copy":
            copy = value
            continue
        with contextlib.suppress(ValueError):
            holders.append((key, int(value)))
    return holders, copy


def process_alive(pid):
    """True unless no process *pid* exists on this host (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _name_max(directory):
    """Longest file name, in bytes, that the file system of *directory* accepts."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _shortened(name, limit):
    """*name* cut to at most *limit* bytes once encoded (never inside a character)."""
    encoded = os.fsencode(name)
    if len(encoded) <= limit:
        return name
    return os.fsdecode(encoded[:max(limit, 0)].decode("utf-8", "ignore").encode("utf-8"))


def remove_pending_temporaries():
    """Remove every pending temporary (see :func:`temporary_name`); never raises.

    Returns
    -------
    tuple of bool
        Whether this call claimed one of them, and whether any was pending.
    """
    names = list(_pending)
    claimed = False
    for name in names:
        claimed = remove_quietly(name) or claimed
    return claimed, bool(names)


on_stop(remove_pending_temporaries, order=1)


#: Names :func:`temporary_name` makes (a stale lock's working copy is removed only when so named).
_TEMPORARY = re.compile(r"\..*\.h5mdtool-[0-9a-f]{12}\.tmp")
#: Suffix of a temporary claimed for removal by one process (followed by its id).
CLAIMED = ".removing-"
#: Longest suffix :func:`remove_quietly` appends: CLAIMED, a process id, "-", 6 hex digits.
_CLAIM_LENGTH = len(CLAIMED) + 10 + 1 + 6


def hidden_directory_inside(directory):
    """A unique hidden name inside *directory*, for files built before they are published."""
    return os.path.join(os.path.abspath(directory), f".h5mdtool-{uuid.uuid4().hex[:12]}.tmp")


def remove_quietly(path):
    """Remove a file or directory tree if it exists; never raises.

    Safe when several processes (the ranks of a job) try at once: the path is first claimed
    by an atomic rename to a name of this process, so exactly one of them removes it and
    none can remove what another has since renamed into place. Claimed names that other
    processes left (killed while removing) are removed too.

    Returns
    -------
    bool
        True when this call claimed *path* and removed it.
    """
    path = os.path.abspath(os.fspath(path))
    _pending.discard(path)
    claimed = f"{path}{CLAIMED}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        os.rename(path, claimed)
        mine = True
    except FileNotFoundError:
        mine = False
    except OSError:
        claimed, mine = path, True  # cannot rename this entry: remove it in place
    for entry in ([claimed] if mine else []) + glob.glob(glob.escape(path) + CLAIMED + "*"):
        try:
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                os.remove(entry)
        except OSError:
            pass
    return mine and not os.path.lexists(claimed)


def publish(temporary, final):
    """Move a completed *temporary* file to *final* (atomic rename), replacing what is there.

    Raises
    ------
    h5mdtool.parallel.interrupts.Interrupted
        If a signal was received: nothing is published then.
    """
    with exclusive():
        os.replace(temporary, final)
        _pending.discard(os.path.abspath(temporary))


def publish_into(temporary, directory, names, replace=False):
    """Move the files *names* from the hidden directory *temporary* into *directory*.

    They are moved in the order given (put the file that announces the others, such as a
    manifest, last), then *temporary* is removed. With *replace*, what *directory* held
    before is set aside first and removed once the new files are in place. If a move fails,
    the files already moved are removed and what was set aside is put back, so *directory*
    is left as it was.

    Raises
    ------
    OutputError
        If the files cannot be moved (for example because another rank, stopped by a
        signal, removed *temporary*).
    h5mdtool.parallel.interrupts.Interrupted
        If a signal was received: nothing is published then.
    """
    directory = os.path.abspath(directory)
    temporary = os.path.abspath(temporary)
    with exclusive():
        aside = os.path.join(temporary, ".replaced")
        old = []
        moved = []
        try:
            if replace:
                os.mkdir(aside)
                for name in os.listdir(directory):
                    if os.path.join(directory, name) != temporary:
                        os.rename(os.path.join(directory, name), os.path.join(aside, name))
                        old.append(name)
            for name in names:
                os.rename(os.path.join(temporary, name), os.path.join(directory, name))
                moved.append(name)
        except OSError as error:
            for name in moved:
                remove_quietly(os.path.join(directory, name))
            for name in old:
                with contextlib.suppress(OSError):
                    os.rename(os.path.join(aside, name), os.path.join(directory, name))
            raise OutputError(f"{directory}: cannot move the finished files into place ({error})") from None
        remove_quietly(temporary)


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


@functools.lru_cache(maxsize=None)
def _fallocate():
    """libc's ``fallocate``, looked up once (``find_library`` runs ``ldconfig`` in a child
    process: 12 ms, and a fork of an MPI process, for every part of a split)."""
    import ctypes
    import ctypes.util

    try:
        fallocate = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return fallocate


#: ``errno`` values that mean an output does not fit: a full file system, a disk quota, the
#: process's file size limit (``ulimit -f``).
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def preallocate(path, nbytes, label=None):
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

    Raises
    ------
    OutputError
        When the space is not there (:data:`NO_ROOM`); messages name *label* (default *path*).
    """
    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    fallocate = _fallocate()
    if fallocate is None:
        return False
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        if fallocate(descriptor, 0, 0, int(nbytes)) == 0:
            return True
        import ctypes

        failure = ctypes.get_errno()
    finally:
        os.close(descriptor)
    if failure in NO_ROOM:
        from .sizes import human_bytes

        raise OutputError(f"{label or path}: cannot reserve the {human_bytes(nbytes)} it needs ({os.strerror(failure)}; "
                          f"{free_space(path)} free on its file system)")
    return False


def free_space(path):
    """Space left to an unprivileged user on the file system of *path*, for messages ("?" if unknown)."""
    from .sizes import human_bytes

    try:
        usage = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return "?"
    return human_bytes(usage.f_bavail * usage.f_frsize)


def is_write_failure(error):
    """True for an error of writing a file: an ``OSError``, or HDF5's failure to write its
    cached data, which h5py raises as ``RuntimeError`` ("Unable to flush cached data ...
    (file write failed)")."""
    return isinstance(error, OSError) or (isinstance(error, RuntimeError) and "write failed" in str(error))


@contextlib.contextmanager
def write_failures_reported(path, label, action="cannot be written"):
    """Turn a failure to write *path* inside the block into an :class:`OutputError` (see :func:`write_failure`)."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        if not is_write_failure(error):
            raise
        raise OutputError(write_failure(error, path, label, action)) from None


def write_failure(error, path, label=None, action="cannot be written"):
    """One line saying why writing *path* failed: "LABEL: ACTION (why; free space)".

    *label* names the final output instead of the temporary *path*. The free space is what
    a user checks first.
    """
    why = system_reason(error)
    why = why.replace(os.fspath(path), label) if label else why
    return f"{label or path}: {action} ({why}; {free_space(path)} free on its file system)"


def system_reason(error):
    """The system's reason for a failed file operation, from an ``OSError`` or HDF5's message.

    HDF5's messages of a failed system call carry a time stamp, a buffer's address and the
    system's own message; this keeps the system's message (or else the first line).
    """
    text = str(error)
    found = re.search(r"error message = '([^']*)'", text)
    if found:
        return found.group(1)
    if isinstance(error, OSError) and error.errno in NO_ROOM:
        return os.strerror(error.errno)
    return (text.strip() or type(error).__name__).splitlines()[0]


#: Linux ioctl that shares a file's blocks with another (copy-on-write file systems: XFS, Btrfs).
FICLONE = 0x40049409


def clone_file(source, destination):
    """Copy *source* to the new file *destination*, sharing blocks where the file system can.

    A reflink (``FICLONE``) is instant on copy-on-write file systems; elsewhere the data are
    copied by the kernel (``copy_file_range``/``sendfile`` through :func:`shutil.copyfile`).

    Returns
    -------
    str
        ``"reflink"`` or ``"copy"``.
    """
    import fcntl

    with open(source, "rb") as src, open(destination, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return "reflink"
        except OSError:
            pass
    shutil.copyfile(source, destination)
    return "copy"
