"""The controller's side of a case pool (see :mod:`.worker` for the protocol).

One :class:`Pool` per rank count: rank count 1 is one plain Python process (serial, no
MPI), 2 and 3 are one ``tools/mpirun.sh -n N`` each, started once and reused for every
case. :meth:`Pool.call` sends a request and returns the outcome of every rank; when the
pool dies (an ``MPI_Abort``, a crash) or a case hangs past its timeout, it returns a
``dead`` outcome with the tail of the pool's log, ends the pool's processes, and the next
call starts a fresh one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .worker import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(ROOT, "tools", "mpirun.sh")
#: Seconds a fresh pool may take to import MDAnalysis, h5py and mpi4py on every rank.
STARTUP_SECONDS = 90


class Pool:
    """Worker processes for one rank count, fed one request at a time."""

    def __init__(self, ranks, base):
        self.ranks = int(ranks)
        self.base = base
        self.process = None
        self.directory = None
        self.number = 0
        self.restarts = 0
        self.history = []
        self.log_path = None
        self._log = None

    # -- life cycle ------------------------------------------------------------------
    def start(self):
        self.directory = tempfile.mkdtemp(prefix=f"pool-n{self.ranks}-", dir=self.base)
        self.number = 0
        self.history = []  # labels of the requests this pool ran since it started
        self.log_path = os.path.join(self.directory, "pool.log")
        self._log = open(self.log_path, "w")
        command = [sys.executable, "-m", "tests.differential.worker", self.directory]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("H5MDTOOL_DEBUG", None)
        env["DIFF_CONTROLLER_PID"] = str(os.getpid())
        if self.ranks > 1:
            command = [MPIRUN, "-n", str(self.ranks)] + command + ["--mpi"]
            # idle ranks yield the CPU inside MPI calls (2 cores shared by up to 6 processes)
            env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        else:
            env["H5MDTOOL_MPI"] = "0"
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        self._started = time.monotonic()

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop(self, kill=False):
        """End the pool: politely (an exit request) or, with *kill*, at once."""
        if self.process is None:
            return
        if not kill and self.alive():
            self._send({"function": "exit"})
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                kill = True
        if kill or self.alive():
            self._kill()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None

    def _kill(self):
        """End mpirun (it ends its ranks), then any rank left, by the ids they wrote."""
        pids = []
        for rank in range(self.ranks):
            try:
                with open(os.path.join(self.directory, f"pid-r{rank}")) as handle:
                    pids.append(int(handle.read().strip()))
            except (OSError, ValueError):
                pass
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self):
        self.stop()
        if self.directory and os.path.isdir(self.directory):
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- requests --------------------------------------------------------------------
    def _send(self, request):
        path = os.path.join(self.directory, f"request-{self.number:06d}.json")
        write_json(path, request)
        number = self.number
        self.number += 1
        return number

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""

    def restart(self):
        """End the pool now; the next call starts a fresh one."""
        if self.process is not None:
            self.stop()

    def call(self, request, timeout, label=None):
        """Run *request* on every rank; return ``{"status": ..., "ranks": [...]}``.

        ``status`` is ``done`` (every rank wrote its outcome), ``dead`` (the pool ended
        before that: abort, crash) or ``hang`` (not done after *timeout* seconds); the
        pool is restarted after the last two.
        """
        if not self.alive():
            if self.process is not None:
                self.stop(kill=True)
                self.restarts += 1
            self.start()
        allowance = timeout
        if self.number == 0:
            allowance += STARTUP_SECONDS
        number = self._send(request)
        self.history.append(label)
        paths = [os.path.join(self.directory, f"outcome-{number:06d}-r{rank}.json") for rank in range(self.ranks)]
        deadline = time.monotonic() + allowance
        poll = 0.002
        while True:
            if all(os.path.exists(p) for p in paths):
                outcomes = []
                for path in paths:
                    with open(path) as handle:
                        outcomes.append(json.load(handle))
                    os.remove(path)
                return {"status": "done", "ranks": outcomes}
            if not self.alive():
                # outcomes written just before a clean exit of the process still count
                time.sleep(0.05)
                if all(os.path.exists(p) for p in paths):
                    continue
                tail = self.log_tail()
                code = self.process.returncode
                self.stop(kill=True)
                self.restarts += 1
                return {"status": "dead", "exit_code": code, "log": tail}
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop(kill=True)
                self.restarts += 1
                return {"status": "hang", "log": tail, "seconds": allowance}
            time.sleep(poll)
            poll = min(0.05, poll * 1.3)
