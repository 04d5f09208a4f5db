"""Stopping cleanly on SIGINT, SIGTERM, SIGHUP and the batch systems' warning signals (SIGUSR1,
SIGUSR2, SIGXCPU), installed by the command line only.

What went wrong before this module: Python raises ``KeyboardInterrupt`` only if SIGINT was
not ignored when the interpreter started, and a POSIX shell starts every background job of
a script (``h5mdtool convert ... &``) with SIGINT ignored, so ``kill -INT`` was swallowed and
the run finished with exit status 0. SIGTERM and SIGHUP (a batch system's time limit,
``scancel``, Open MPI's ``mpirun`` passing on any of the three signals as SIGTERM to every
rank) kept their default action: the process died at once and left its hidden temporary
behind. And a Python signal handler runs only between bytecodes of the main thread, which
may sit for minutes in an MPI collective waiting for a rank that is gone.

So the handlers installed here do nothing themselves except note the signal: Python's C
level handler also writes the signal number to a pipe (:func:`signal.set_wakeup_fd`), and a
watcher thread blocked on that pipe ends the process whatever the main thread is doing,
as long as that releases the GIL (checked: mpi4py's collectives, and h5py's collective
write into a filtered dataset while it waits for another rank): it runs the clean-ups
registered with :func:`h5mdtool.mpi.cleanup_on_abort`, prints one line and leaves with exit
status 128 + the signal number, without MPI_Finalize, so the MPI launcher ends the other
ranks (Open MPI sends them SIGTERM, and SIGKILL one second later). Temporaries named with
:func:`h5mdtool.outputs.temporary_name` and not yet published are removed as well.

The watcher holds :data:`_lock` from the clean-up until the process is gone. Code that
creates or publishes an output holds the same lock (:func:`exclusive`), so a temporary is
never created after the clean-up ran, and never published half-cleaned. A temporary shared
by several ranks is removed by whichever rank gets to it first (:func:`h5mdtool.outputs.remove_quietly`
claims it by an atomic rename); that rank prints the line, the others stay quiet (and wait
half a second, so that the launcher, which kills the remaining ranks as soon as one ends,
does not cut the removal short), so a job interrupted through ``mpirun`` prints one line,
not one per rank. A rank with nothing registered prints only if it is rank 0.

SIGUSR1, SIGUSR2 and SIGXCPU end a process by default too, and batch systems send them before
they kill a job (Grid Engine at a soft time or CPU limit, LSF's and Slurm's warning signal
``--signal``; Open MPI's mpirun passes SIGUSR1 and SIGUSR2 on to every rank): they are handled
the same way, but only where nothing else (an ignoring parent, a library) took them first.

The library never installs handlers: a host program's signal handling is its own. Without
them :func:`exclusive` is an uncontended lock and :func:`settle` does nothing.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from .errors import H5mdToolError

#: Signals that stop h5mdtool cleanly.
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU")
#: Signals taken only when their action is still the default (``nohup`` ignores SIGHUP).
ONLY_IF_DEFAULT = ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU")

#: How long a rank that found the shared temporary already claimed waits before it ends
#: (Open MPI's mpirun kills the remaining ranks as soon as one ends after a signal).
GRACE_SECONDS = 0.5

_lock = threading.RLock()
_handled = set()
_signalled = None


class Interrupted(H5mdToolError):
    """A signal asked h5mdtool to stop; the exit status is 128 + the signal number."""

    def __init__(self, signum):
        super().__init__("interrupted")
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


def install():
    """Handle :data:`SIGNALS` as described in the module docstring.

    Call it once from the command line's entry point, in the main thread. An inherited
    SIGINT that the shell set to "ignore" is handled anyway (that is the swallowed Ctrl-C);
    an ignored SIGHUP is left ignored, so ``nohup h5mdtool ...`` keeps working.

    Returns
    -------
    bool
        True when the handlers were installed by this call.
    """
    if _handled or threading.current_thread() is not threading.main_thread():
        return False
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for name in SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue
        if name in ONLY_IF_DEFAULT and signal.getsignal(number) != signal.SIG_DFL:
            continue
        signal.signal(number, _note)
        _handled.add(int(number))
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_end,), name="h5mdtool-signals", daemon=True).start()
    return True


def _note(signum, frame):
    """Python-level handler (main thread): only remember the signal; the watcher acts."""
    global _signalled
    if _signalled is None:
        _signalled = signum


def _watch(read_end):
    while True:
        data = os.read(read_end, 1)
        if not data:
            return
        if data[0] in _handled:
            stop(data[0])


def signalled():
    """The number of the first handled signal received, or None."""
    return _signalled


def stop(signum):
    """Clean up, report and end the process with status ``128 + signum``; never returns.

    Safe to call from any thread and more than once: the first caller does the work while
    holding :data:`_lock` until the process is gone, later callers wait for it.
    """
    global _signalled
    _lock.acquire()
    if _signalled is None:
        _signalled = signum
    signum = _signalled
    try:
        removed, registered = _clean_up()
        rank, parallel = _where()
        if not parallel or removed or (rank == 0 and not registered):
            _report(rank)
        elif registered:
            # Another rank claimed the shared temporary. When this rank ends, the launcher
            # kills the others at once: give that rank a moment to finish and report.
            time.sleep(GRACE_SECONDS)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
    finally:
        os._exit(128 + int(signum))


def _clean_up():
    """Run the registered clean-ups and remove the pending temporaries.

    Only modules already imported are asked, since nothing can be registered in one that is
    not: importing here, in the watcher thread, could wait for the main thread's import of
    the same module, or start importing numpy, when the signal came while the command line
    was still starting.

    Returns
    -------
    tuple of bool
        Whether something was removed, and whether anything was registered.
    """
    removed = registered = False
    for module, name in (("mpi", "run_abort_cleanups"), ("outputs", "remove_pending_temporaries")):
        function = getattr(sys.modules.get(f"{__package__}.{module}"), name, None)
        if function is not None:
            done, known = function()
            removed, registered = removed or done, registered or known
    return removed, registered


def settle():
    """If a handled signal arrived, finish handling it here (never returns); else return.

    Error paths call this before they report: once a signal arrived, errors caused by the
    clean-up running underneath the main thread (a vanished temporary) are not the news.
    """
    if _signalled is not None:
        stop(_signalled)


@contextlib.contextmanager
def exclusive():
    """Hold off the clean-up of a signal while the block creates or publishes an output.

    Raises
    ------
    Interrupted
        If a signal was already received (nothing new is created or published then).
    """
    with _lock:
        if _signalled is not None:
            raise Interrupted(_signalled)
        yield


def _where():
    """This process's MPI rank and whether the job has several ranks, without MPI calls
    that could block (the main thread may be inside one)."""
    module = sys.modules.get("mpi4py.MPI")
    try:
        if module is not None and module.Is_initialized() and not module.Is_finalized():
            world = module.COMM_WORLD
            return world.Get_rank(), world.Get_size() > 1
    except Exception:  # noqa: BLE001 - fall back to the launcher's variables
        pass
    for rank_name, size_name in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                 ("PMI_RANK", "PMI_SIZE"), ("PMIX_RANK", None)):
        if rank_name in os.environ:
            with contextlib.suppress(ValueError):
                size = int(os.environ.get(size_name, "2")) if size_name else 2
                return int(os.environ[rank_name]), size > 1
    return 0, False


def _report(rank):
    text = "error: interrupted" if rank == 0 else f"error: rank {rank}: interrupted"
    # a progress bar may own the terminal line; os.write avoids sys.stderr's lock, which the
    # main thread may hold
    prefix = "\r\x1b[K" if _isatty(2) else ""
    with contextlib.suppress(OSError):
        os.write(2, f"{prefix}{text}\n".encode())


def _isatty(descriptor):
    try:
        return os.isatty(descriptor)
    except OSError:
        return False
