"""Progress on rank 0: a live bar for a person at a terminal, sparse lines or nothing in logs.

Whether rank 0's progress reaches a terminal (``--progress``/``--no-progress`` not given):

1. its standard error is a terminal (a serial run, ``srun --pty``): a live bar;
2. started by ``mpirun``/``mpiexec`` (Open MPI, MPICH's Hydra): the ranks' standard error is
   a pipe that the launcher forwards as it comes to its own standard error. When that is a
   terminal (found through ``/proc``: the launcher among rank 0's parent processes), a live
   bar; when it is a file or a pipe (a log, ``2> log``), nothing;
3. started by ``srun``, or by a launcher on another node (rank 0's parent is Slurm's
   ``slurmstepd``): the launcher's terminal cannot be seen from rank 0, so a line at most
   every :data:`LINE_INTERVAL` seconds and one at the end, which a person at ``srun``'s
   terminal sees and a batch log keeps short;
4. otherwise (a serial run whose standard error is redirected): nothing.

``--progress`` where no terminal is found prints the sparse lines; ``--no-progress`` prints
nothing.
"""

import os
import stat
import sys
import threading
import time

from .sizes import human_rate

#: Programs that start MPI ranks and forward their standard error to their own.
MPI_LAUNCHERS = ("mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "prun")
#: Programs behind which the launcher's terminal cannot be seen (a task of srun on a node).
REMOTE_LAUNCHERS = ("slurmstepd",)
#: Seconds between two progress lines where no terminal is found.
LINE_INTERVAL = 30.0
#: Parent processes looked at for the launcher.
MAX_ANCESTORS = 8

BAR, LINES, NONE = "bar", "lines", "none"


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LineProgress(_NoBar):
    """Progress as whole lines, at most one per *interval* seconds and one at the end (no
    carriage returns, for logs)."""

    def __init__(self, total, description, unit, stream, interval=LINE_INTERVAL, clock=time.monotonic):
        self.total, self.description, self.unit, self.stream = total, description, unit, stream
        self.interval, self.clock = interval, clock
        self.done = 0
        self.started = self.last = clock()
        self.lock = threading.Lock()

    def update(self, n=1):
        with self.lock:
            self.done += n
            now = self.clock()
            if now - self.last >= self.interval and self.done < self.total:
                self.last = now
                self._line(now)

    def close(self):
        with self.lock:
            self._line(self.clock())

    def _line(self, now):
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        self.stream.write(f"{self.description}: {self.done} of {self.total} {self.unit}s{share} after "
                          f"{elapsed:.0f} s, {human_rate(rate, self.unit + 's/s')}\n")
        self.stream.flush()


def _ancestors(pid):
    """``(pid, name)`` of *pid*'s parent processes, nearest first (Linux ``/proc``; empty elsewhere)."""
    found = []
    for _ in range(MAX_ANCESTORS):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2:].split()[1])  # the name may hold spaces and parentheses
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/comm") as handle:
                found.append((pid, handle.read().strip()))
        except OSError:
            break
    return found


def _is_terminal(path):
    return path.startswith(("/dev/pts/", "/dev/tty"))


def launcher_terminal(pid=None):
    """Whether the MPI launcher of this process writes to a terminal: True, False, or None (cannot be seen)."""
    for ancestor, name in _ancestors(os.getpid() if pid is None else pid):
        if name in MPI_LAUNCHERS:
            try:
                return _is_terminal(os.readlink(f"/proc/{ancestor}/fd/2"))
            except OSError:
                return None
        if name in REMOTE_LAUNCHERS:
            return None
    return None


def forwarded(stream):
    """Whether *stream* writes into a pipe or socket, as a launcher's forwarding of rank output does
    (not a file, nor a stream replaced in the process, such as a test's captured output)."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def progress_mode(enabled=None, stream=None):
    """How rank 0 shows progress: ``"bar"``, ``"lines"`` or ``"none"`` (the rule of this module)."""
    from .mpi import launched_by_mpi

    stream = sys.stderr if stream is None else stream
    if enabled is False:
        return NONE
    if stream.isatty():
        return BAR
    through_launcher = launched_by_mpi() and forwarded(stream)
    seen = launcher_terminal() if through_launcher else False
    if seen:
        return BAR
    if enabled or (seen is None and through_launcher):
        return LINES
    return NONE


def progress_bar(total, description, comm, enabled=None, unit="frame"):
    """Return a progress display for *total* units of work of the whole job (rank 0 only).

    Parameters
    ----------
    total : int
    description : str
    comm : communicator
        Only rank 0 shows progress.
    enabled : bool, optional
        ``--progress``/``--no-progress``; by default the rule of this module decides.
    unit : str
    """
    if comm.rank != 0:
        return _NoBar()
    mode = progress_mode(enabled)
    if mode == NONE:
        return _NoBar()
    if mode == LINES:
        return LineProgress(total, description, unit, sys.stderr)
    from tqdm import tqdm

    at_terminal = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=description,
        unit=unit,
        unit_scale=total >= 10000,  # 98.0k frames, but 2/10 rather than 2.00/10.0
        dynamic_ncols=at_terminal,
        # forwarded by the launcher: the pipe has no width of its own
        ncols=None if at_terminal else int(os.environ.get("COLUMNS", "100")),
        file=sys.stderr,
        leave=False,
    )


class JobShare:
    """Advances rank 0's display for its own share of the work, counted in the whole job's units.

    Every rank works on an equal share at about the same pace (collective writes keep them
    together), so rank 0 having done a fraction f of its share shows f of the job's
    *total*. :meth:`finish` shows the whole *total*. Safe to call from a worker thread.
    """

    def __init__(self, bar, total, mine):
        self.bar, self.total, self.mine = bar, total, mine
        self.done = self.shown = 0
        self.lock = threading.Lock()

    def update(self, n):
        with self.lock:
            self.done += n
            self._show(self.total * self.done // self.mine if self.mine else 0)

    def finish(self):
        with self.lock:
            self._show(self.total)

    def _show(self, target):
        target = min(target, self.total)
        if target > self.shown:
            self.bar.update(target - self.shown)
            self.shown = target
