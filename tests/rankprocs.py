"""The MPI ranks a launcher started, found in /proc: for tests that signal one rank."""

import os


def _children(pid):
    """Process ids whose parent is *pid* (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                found.append(int(entry))
    return found


def rank_pids(launcher):
    """MPI rank -> process id of the h5mdtool ranks that *launcher* (mpirun) started.

    Only its direct children: a rank's own short-lived children (a fork before an exec)
    share its command line and environment.
    """
    ranks = {}
    for pid in _children(launcher):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environment = dict(
                    item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item
                )
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
        except OSError:
            continue
        if b"h5mdtool" in command and b"OMPI_COMM_WORLD_RANK" in environment:
            ranks[int(environment[b"OMPI_COMM_WORLD_RANK"])] = pid
    return ranks


def rank_pids_of(launcher, marker):
    """Like :func:`rank_pids` for processes whose command line contains *marker*."""
    ranks = {}
    for pid in _children(launcher):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environment = handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
        except OSError:
            continue
        for item in environment.split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK=") and marker.encode() in command:
                ranks[int(item.split(b"=")[1])] = pid
    return ranks
