"""Progress reaches a person at a terminal, also through mpirun; logs get none or sparse lines;
the bar moves more often than once per block; bench rmsd shows progress."""

import io
import os
import shutil
import subprocess
import sys

import pytest

import h5mdtool.bench.runner as bench_runner
import h5mdtool.conversion.convert as convert_module
from conftest import MPIRUN
from h5mdtool import bench_rmsd, convert
from h5mdtool.parallel import progress
from h5mdtool.parallel.progress import BAR, LINES, NONE, JobShare, LineProgress, progress_mode


class Stream(io.StringIO):
    """Standard error as a terminal, a pipe (*fd*: a launcher forwards it) or captured in the process."""

    def __init__(self, tty, fd=None):
        super().__init__()
        self.tty, self.fd = tty, fd

    def isatty(self):
        return self.tty

    def fileno(self):
        if self.fd is None:
            raise io.UnsupportedOperation("fileno")
        return self.fd


@pytest.fixture(scope="module")
def pipe():
    read, write = os.pipe()
    yield write
    os.close(read)
    os.close(write)


class Recorder:
    """A progress display that keeps every update."""

    def __init__(self, total):
        self.total, self.updates = total, []

    def update(self, n=1):
        self.updates.append(n)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.fixture
def recorded(monkeypatch):
    displays = []

    def fake(total, description, comm, enabled=None, unit="frame"):
        displays.append(Recorder(total))
        return displays[-1]

    monkeypatch.setattr(convert_module, "progress_bar", fake)
    monkeypatch.setattr(bench_runner, "progress_bar", fake)
    return displays


@pytest.mark.parametrize("tty, piped, launched, launcher, enabled, mode", [
    (True, False, False, None, None, BAR),       # a serial run at a terminal
    (False, True, False, None, None, NONE),      # a serial run into a log or a pipe
    (False, False, False, None, True, LINES),    # --progress into a log: lines, no carriage returns
    (False, True, True, True, None, BAR),        # mpirun at a terminal
    (False, True, True, False, None, NONE),      # mpirun 2> log
    (False, True, True, None, None, LINES),      # srun: the launcher's terminal cannot be seen
    (False, False, True, True, None, NONE),      # captured in the process (a test under mpirun at a terminal)
    (True, False, True, None, False, NONE),      # --no-progress
])
def test_the_rule(monkeypatch, pipe, tty, piped, launched, launcher, enabled, mode):
    monkeypatch.setattr(progress, "launcher_terminal", lambda pid=None: launcher)
    monkeypatch.setenv("H5MDTOOL_MPI", "1" if launched else "0")
    assert progress_mode(enabled, Stream(tty, pipe if piped else None)) == mode


def test_sparse_lines_for_logs():
    now = [0.0]
    stream = Stream(False)
    lines = LineProgress(1000, "convert", "frame", stream, interval=30, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 1.0
        lines.update(10)
    lines.close()
    text = stream.getvalue()
    assert "\r" not in text and text.count("\n") == 4  # after 30, 60 and 90 s, and at the end
    assert text.splitlines()[0] == "convert: 300 of 1000 frames (30%) after 30 s, 10 frames/s"
    assert text.splitlines()[-1] == "convert: 1000 of 1000 frames (100%) after 100 s, 10 frames/s"


def test_job_share_counts_the_whole_job():
    bar = Recorder(100)
    share = JobShare(bar, 100, 25)  # rank 0 holds a quarter of the frames
    for _ in range(5):
        share.update(5)
    assert sum(bar.updates) == 100 and len(bar.updates) == 5
    share.finish()
    assert sum(bar.updates) == 100
    idle = Recorder(10)
    JobShare(idle, 10, 0).finish()  # a rank 0 without frames of this group
    assert idle.updates == [10]


def test_convert_moves_the_bar_within_a_block(tmp_path, solvated, recorded):
    """The solvated XTC's 10 frames fit one 32 MiB block: the bar once moved once, at its end."""
    convert(solvated["XTC"], str(tmp_path / "o.h5md"), progress=True)
    (bar,) = recorded
    assert bar.total == 10 and sum(bar.updates) == 10 and len(bar.updates) >= 5


def test_bench_rmsd_shows_progress_per_block(tmp_path, adk, recorded):
    bench_rmsd(adk[1], adk[0], block_frames=10, repeat=2, progress=True)
    assert [bar.total for bar in recorded] == [98, 98]
    assert all(sum(bar.updates) == 98 and len(bar.updates) == 10 for bar in recorded)


def _under_a_terminal(command, stderr_to_file=None):
    """Run *command* with a pseudo-terminal as its standard streams (util-linux script)."""
    shell = " ".join(command) + (f" 2> {stderr_to_file}" if stderr_to_file else "")
    done = subprocess.run(["script", "-qec", shell, "/dev/null"], capture_output=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    # bytes decoded by hand: text mode would turn the bar's carriage returns into newlines
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux script not installed")
def test_mpirun_at_a_terminal_shows_rank_0s_bar(tmp_path, solvated):
    code = ("from h5mdtool.parallel.progress import progress_mode; from h5mdtool.parallel.mpi import resolve; "
            "resolve().rank or print(progress_mode())")
    python = [sys.executable, "-c", f"'{code}'"]
    seen = _under_a_terminal([MPIRUN, "-n", "2", *python])
    assert seen.stdout.split() == ["bar"], seen.stdout + seen.stderr
    logged = _under_a_terminal([MPIRUN, "-n", "2", *python], stderr_to_file=str(tmp_path / "log"))
    assert logged.stdout.split() == ["none"], logged.stdout + logged.stderr
    # the bar itself, forwarded by mpirun to the terminal while the job runs
    output = str(tmp_path / "o.h5md")
    # rounds of one frame, 0.3 s apart: the bar redraws (at most every 0.1 s) however loaded the machine
    done = _under_a_terminal(["H5MDTOOL_TEST_DELAY='convert-round:*:0.3'", MPIRUN, "-n", "2", sys.executable, "-m",
                              "h5mdtool", "convert", solvated["XTC"], "-o", output, "--block-size", "1M"])
    assert done.returncode == 0, done.stdout
    updates = [part for part in done.stdout.split("\r") if part.startswith("convert: ")]
    counts = [int(part.split("|")[2].split("/")[0]) for part in updates]
    assert len(updates) >= 3 and counts == sorted(counts) and counts[-1] > counts[0], done.stdout
    assert "frame/s" in updates[-1] and "frames (" not in done.stdout  # a bar, not the lines for logs
    assert done.stdout.count("wrote ") == 1


def test_a_log_gets_no_bar(tmp_path, solvated):
    env = dict(os.environ, H5MDTOOL_MPI="0")
    done = subprocess.run([sys.executable, "-m", "h5mdtool", "convert", solvated["XTC"], "-o", str(tmp_path / "o.h5md")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stderr == ""
    done = subprocess.run([MPIRUN, "-n", "2", sys.executable, "-m", "h5mdtool", "convert", solvated["XTC"], "-o",
                           str(tmp_path / "p.h5md")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr
