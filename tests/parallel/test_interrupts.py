"""Signals stop every command cleanly: SIGINT, SIGTERM and SIGHUP, serially and under mpirun.

Each test starts the real command line (``python -m h5mdtool``) in its own session, keeps
it writing with the test-only delays of :mod:`h5mdtool.parallel.testhooks`, waits until its
temporary exists, sends the signal (to the process, to ``mpirun``, or to one rank), and
checks: the exit status, one ``error: ... interrupted`` line, no traceback, no temporary
left, nothing published, and that the job ended within a bound (no hang).
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import MPIRUN, ROOT
from rankprocs import rank_pids, rank_pids_of
from h5mdtool.parallel import interrupts

#: Seconds within which an interrupted job must be gone (mpirun itself takes up to 2 s to
#: pass a signal on as SIGTERM and then SIGKILL).
BOUND = 20.0
START_TIMEOUT = 90.0
SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"]
#: What batch systems send before they kill a job (Grid Engine, LSF, Slurm's --signal).
WARNINGS = ["SIGUSR1", "SIGUSR2", "SIGXCPU"]


class Interrupted:
    """Outcome of one interrupted run."""

    def __init__(self, returncode, stdout, stderr, seconds):
        self.returncode, self.stdout, self.stderr, self.seconds = returncode, stdout, stderr, seconds

    @property
    def error_lines(self):
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def _default_signal_actions():
    """In the child: the signals h5mdtool takes only at their default action (SIGHUP, SIGUSR1...)
    back at it, as a terminal or a batch system starts a job. The suite itself may run under
    ``nohup`` (SIGHUP ignored, inherited), where h5mdtool rightly leaves SIGHUP ignored and a
    test sending it would wait in vain."""
    for name in interrupts.ONLY_IF_DEFAULT:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def interrupt(args, ready, signal_name, *, ranks=None, target="launcher", delays="", cwd=None, marks=None):
    """Run ``h5mdtool ARGS``, wait for *ready()*, send the signal to *target*, collect.

    *target*: ``"launcher"`` (the process started, mpirun when *ranks*), or a rank number
    (that rank's process alone). *signal_name* ``"SIGKILL"`` sends kill -9.
    """
    command = [sys.executable, "-m", "h5mdtool"] + list(args)
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    environment = dict(os.environ, H5MDTOOL_TEST_DELAY=delays)
    if marks is not None:
        environment["H5MDTOOL_TEST_MARK"] = marks  # testhooks: DIR/SITE-RANK once a site is reached
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, cwd=cwd, start_new_session=True, preexec_fn=_default_signal_actions)
    output = {}
    reader = threading.Thread(target=lambda: output.update(zip(("stdout", "stderr"), process.communicate())))
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            assert process.poll() is None, "the command ended before it could be interrupted"
            assert time.monotonic() < deadline, "the command did not start writing in time"
            time.sleep(0.05)
        number = getattr(signal, signal_name)
        if target == "launcher":
            pid = process.pid
        else:
            pid = rank_pids(process.pid)[target]
        sent = time.monotonic()
        os.kill(pid, number)
        reader.join(BOUND)
        seconds = time.monotonic() - sent
        hung = reader.is_alive()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        reader.join()
    assert not hung, f"still running {BOUND} s after {signal_name}:\n{output.get('stderr')}"
    return Interrupted(process.returncode, output["stdout"], output["stderr"], seconds)


def assert_one_line(result, rank=None):
    """Exactly one ``error:`` line saying ``interrupted`` (naming *rank* when given and not 0)."""
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    if rank is None:
        assert re.fullmatch(r"error: (rank \d+: )?interrupted", line), result.stderr
    elif rank == 0:
        assert line == "error: interrupted", result.stderr
    else:
        assert line == f"error: rank {rank}: interrupted", result.stderr


def hidden(directory):
    """Temporaries h5mdtool could have left in *directory* (hidden or being removed)."""
    return [name for name in os.listdir(directory) if name.startswith(".") or ".removing-" in name]


# ---------------------------------------------------------------- convert


@pytest.fixture
def convert_job(tmp_path, adk):
    """convert of the AdK DCD one 40 KB frame per write round, 0.4 s per round on every rank."""
    output = tmp_path / "out.h5md"
    args = ["convert", adk[1], "-o", str(output), "--block-size", "40K", "--no-progress"]

    def ready():
        return bool(glob.glob(str(tmp_path / ".out.h5md.h5mdtool-*.tmp")))

    def check(result):
        assert not output.exists(), "an interrupted convert published its output"
        assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)

    return args, ready, check, "convert-round:*:0.4"


@pytest.mark.parametrize("signal_name", SIGNALS + WARNINGS)
def test_convert_interrupted_serially(convert_job, signal_name):
    args, ready, check, delays = convert_job
    result = interrupt(args, ready, signal_name, delays=delays)
    assert result.returncode == 128 + getattr(signal, signal_name)
    assert_one_line(result, rank=0)
    check(result)
    assert result.seconds < 5


@pytest.mark.parametrize("signal_name", SIGNALS + ["SIGUSR1", "SIGUSR2"])
def test_convert_interrupted_through_mpirun(convert_job, signal_name):
    """Open MPI's mpirun passes INT, TERM and HUP on to every rank as SIGTERM (after SIGCONT,
    one second later) and then exits with status 1 whatever the ranks report."""
    args, ready, check, delays = convert_job
    result = interrupt(args, ready, signal_name, ranks=2, delays=delays)
    assert result.returncode != 0
    assert_one_line(result)
    check(result)


@pytest.mark.parametrize("signal_name", SIGNALS + WARNINGS)
def test_convert_interrupted_on_one_rank(convert_job, signal_name):
    args, ready, check, delays = convert_job
    result = interrupt(args, ready, signal_name, ranks=2, target=1, delays=delays)
    assert result.returncode == 128 + getattr(signal, signal_name)
    assert_one_line(result, rank=1)
    check(result)


@pytest.mark.parametrize("target", [0, 1])
def test_ranks_compressing_interrupted_on_one_rank(convert_job, target):
    """--parallel-compression ranks: rank 0 waiting for rank 1's chunks (rank 1 sleeps) or
    rank 1 waiting for rank 0 to take them, stopped: one line, nothing left."""
    args, ready, check, _ = convert_job
    args = args + ["--compression", "zstd", "--parallel-compression", "ranks"]
    result = interrupt(args, ready, "SIGTERM", ranks=2, target=target, delays=f"convert-round:{1 - target}:3")
    assert result.returncode == 143
    assert_one_line(result, rank=target)
    check(result)


def test_convert_interrupted_on_rank_0_waiting_in_a_collective(convert_job):
    """Rank 0 sits in a collective write while rank 1 sleeps: the Python handler cannot run
    there, the watcher thread still ends the job."""
    args, ready, check, _ = convert_job
    result = interrupt(args, ready, "SIGTERM", ranks=2, target=0, delays="convert-round:1:3")
    assert result.returncode == 143
    assert_one_line(result, rank=0)
    check(result)


def test_signal_reaches_a_rank_inside_a_collective_hdf5_write(tmp_path):
    """Rank 0's main thread waits inside H5Dwrite (MPI-IO, C code) for rank 1: the watcher
    thread still removes the file and ends the job."""
    path = str(tmp_path / "data.h5")
    script = os.path.join(ROOT, "tests", "scripts", "wait_in_collective_write.py")
    command = [MPIRUN, "-n", "2", sys.executable, script, path]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (os.path.exists(path) and rank_pids_of(process.pid, script).get(0)):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        time.sleep(2)  # rank 0 is in the collective write by now (rank 1 sleeps 60 s)
        sent = time.monotonic()
        os.kill(rank_pids_of(process.pid, script)[0], signal.SIGTERM)
        _, stderr = process.communicate(timeout=BOUND)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 143, stderr
    assert time.monotonic() - sent < 10
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == ["error: interrupted"]
    assert os.listdir(tmp_path) == []


def test_background_job_of_a_script_stops_on_sigint(tmp_path, adk):
    """The swallowed Ctrl-C: a shell starts background jobs with SIGINT ignored."""
    output = tmp_path / "out.h5md"
    script = (
        f"{sys.executable} -m h5mdtool convert {adk[1]} -o {output} --block-size 40K --no-progress & "
        "pid=$!; "
        f"while ! ls -a {tmp_path} | grep -q h5mdtool; do sleep 0.05; done; "
        "kill -INT $pid; wait $pid"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, H5MDTOOL_TEST_DELAY="convert-round:*:0.4"))
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "error: interrupted"
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- while starting


def importing(marker, rank=None):
    """A ``ready`` test: the h5mdtool process whose command line holds *marker* (the MPI rank
    *rank* when given) has loaded numpy, so it is busy with its imports (about a second of
    numpy, h5py and MDAnalysis) and has not started its work."""
    def ready():
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    command = handle.read()
                if marker.encode() not in command or b"h5mdtool" not in command:
                    continue
                if rank is not None:
                    with open(f"/proc/{entry}/environ", "rb") as handle:
                        if f"OMPI_COMM_WORLD_RANK={rank}".encode() not in handle.read().split(b"\0"):
                            continue
                with open(f"/proc/{entry}/maps") as handle:
                    if "_multiarray_umath" in handle.read():
                        return True
            except (OSError, ValueError):
                continue
        return False

    return ready


@pytest.mark.parametrize("ranks, target", [(None, "launcher"), (2, 0), (2, 1)], ids=["serial", "rank-0", "rank-1"])
def test_sigint_during_the_imports(tmp_path, adk, ranks, target):
    """Regression: Ctrl-C in the first second (serially, or to one rank) printed a
    KeyboardInterrupt traceback from the imports: the handlers came after them."""
    output = tmp_path / "out.h5md"
    args = ["convert", adk[1], "-o", str(output), "--no-progress"]
    result = interrupt(args, importing(str(output), None if target == "launcher" else target), "SIGINT",
                       ranks=ranks, target=target, delays="convert-round:*:0.4")
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr, result.stderr
    assert result.returncode == 130, result.stderr
    if ranks is None:
        assert result.stderr == "error: interrupted\n"
    elif target == 0:
        assert_one_line(result, rank=0)
    else:  # nothing to clean up yet: a rank other than 0 ends quietly (mpirun says which one ended)
        assert result.error_lines == [], result.stderr
    assert not output.exists() and os.listdir(tmp_path) == []


# ---------------------------------------------------------------- split


@pytest.fixture
def split_job(tmp_path, adk):
    """split of the AdK DCD into 40 parts, 0.4 s per part on every rank."""
    output = tmp_path / "parts"
    args = ["split", adk[1], "--nparts", "40", "-o", str(output), "--no-progress"]

    def ready():
        return bool(glob.glob(str(output / ".h5mdtool-*.tmp" / "part-*")))

    def check(result):
        assert not output.exists(), f"left behind: {os.listdir(output) if output.exists() else ''}"
        assert os.listdir(tmp_path) == []

    return args, ready, check, "split-part:*:0.4"


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_split_interrupted_serially(split_job, signal_name):
    args, ready, check, delays = split_job
    result = interrupt(args, ready, signal_name, delays=delays)
    assert result.returncode == 128 + getattr(signal, signal_name)
    assert_one_line(result, rank=0)
    check(result)
    assert result.seconds < 5


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_split_interrupted_through_mpirun(split_job, signal_name):
    args, ready, check, delays = split_job
    result = interrupt(args, ready, signal_name, ranks=2, delays=delays)
    assert result.returncode != 0
    assert_one_line(result)
    check(result)


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_split_interrupted_on_one_rank(split_job, signal_name):
    args, ready, check, delays = split_job
    result = interrupt(args, ready, signal_name, ranks=2, target=1, delays=delays)
    assert result.returncode == 128 + getattr(signal, signal_name)
    assert_one_line(result, rank=1)
    check(result)


@pytest.mark.parametrize("target", ["launcher", 0, 2])
def test_split_on_three_ranks_interrupted(split_job, target):
    args, ready, check, delays = split_job
    result = interrupt(args, ready, "SIGINT", ranks=3, target=target, delays=delays)
    if target == "launcher":
        assert result.returncode != 0
        assert_one_line(result)
    else:
        assert result.returncode == 130
        assert_one_line(result, rank=target)
    check(result)


@pytest.mark.parametrize("target", ["launcher", 2])
def test_convert_on_three_ranks_interrupted(convert_job, target):
    args, ready, check, delays = convert_job
    result = interrupt(args, ready, "SIGTERM", ranks=3, target=target, delays=delays)
    if target == "launcher":
        assert result.returncode != 0
        assert_one_line(result)
    else:
        assert result.returncode == 143
        assert_one_line(result, rank=target)
    check(result)


@pytest.mark.parametrize("ranks,target", [(2, 1), (2, 0), (3, 1)])
def test_split_rank_killed_with_sigkill_leaves_no_temporary(split_job, ranks, target):
    """kill -9 of one rank: mpirun SIGTERMs the others, and one of them removes the
    temporary that the killed rank could not."""
    args, ready, check, delays = split_job
    result = interrupt(args, ready, "SIGKILL", ranks=ranks, target=target, delays=delays)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.error_lines) <= 1, result.stderr
    check(result)


def test_split_into_existing_empty_directory_interrupted_leaves_it_empty(tmp_path, adk):
    output = tmp_path / "parts"
    output.mkdir()
    os.chmod(output, 0o2750)
    args = ["split", adk[1], "--nparts", "40", "-o", str(output), "--no-progress"]
    result = interrupt(args, lambda: bool(glob.glob(str(output / ".h5mdtool-*.tmp" / "part-*"))),
                       "SIGTERM", delays="split-part:*:0.4")
    assert result.returncode == 143
    assert os.listdir(output) == []
    assert os.stat(output).st_mode & 0o7777 == 0o2750


# ---------------------------------------------------------------- other commands


@pytest.mark.parametrize("ranks,signal_name", [(None, "SIGTERM"), (None, "SIGINT"), (2, "SIGINT")])
def test_bench_rmsd_interrupted(tmp_path, adk, ranks, signal_name):
    """A command with no temporary of its own until the end: stopped, one line, no report."""
    import tempfile

    report = tmp_path / "report.json"
    args = ["bench", "rmsd", adk[1], "-t", adk[0], "--repeat", "100000", "--out", str(report), "--no-progress"]
    # signalled once every rank reads frames (a fixed 4 s missed start-up on a loaded machine:
    # the signal came before the handlers, and no line was printed)
    marks = tempfile.mkdtemp(prefix="h5mdtool-marks-")
    every_rank = [os.path.join(marks, f"rmsd-block-{rank}") for rank in range(ranks or 1)]
    try:
        result = interrupt(args, lambda: all(os.path.exists(path) for path in every_rank), signal_name, ranks=ranks,
                           marks=marks)
    finally:
        shutil.rmtree(marks, ignore_errors=True)
    assert result.returncode == (128 + getattr(signal, signal_name) if ranks is None else 1)
    assert_one_line(result, rank=0)
    assert os.listdir(tmp_path) == []


def test_signal_removes_pending_temporaries_of_any_writer(tmp_path):
    """A file named with outputs.temporary_name and not yet published goes on a signal,
    whichever code writes it (bench writes its report this way)."""
    code = (
        "import os, signal, time\n"
        "from h5mdtool.parallel import interrupts, outputs\n"
        "interrupts.install()\n"
        f"name = outputs.temporary_name({str(tmp_path / 'report.json')!r})\n"
        "open(name, 'w').write('half')\n"
        "published = outputs.temporary_name(name + '.other')\n"
        "open(published, 'w').write('done')\n"
        f"outputs.publish(published, {str(tmp_path / 'done.json')!r})\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and done.stderr == "error: interrupted\n"
    assert os.listdir(tmp_path) == ["done.json"]


# ---------------------------------------------------------------- the module itself


def test_library_import_installs_no_handler():
    """Only the command line installs handlers: importing and using the API changes nothing."""
    code = (
        "import signal, h5mdtool, h5mdtool.subfiles.split, h5mdtool.conversion.convert;"
        "print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,"
        " signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.set_wakeup_fd(-1))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True", "-1"], done.stderr


def test_nohup_keeps_sighup_ignored():
    code = ("import signal; from h5mdtool.parallel import interrupts; interrupts.install();"
            "print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is interrupts._note)")
    done = subprocess.run(["nohup", sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_warning_signals_taken_by_something_else_are_left_alone():
    """An ignored (or otherwise handled) SIGUSR1 stays so; the default SIGUSR2 is taken."""
    code = ("import signal; signal.signal(signal.SIGUSR1, signal.SIG_IGN); from h5mdtool.parallel import interrupts;"
            "interrupts.install(); print(signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN,"
            " signal.getsignal(signal.SIGUSR2) is interrupts._note)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_exclusive_refuses_after_a_signal(monkeypatch):
    monkeypatch.setattr(interrupts, "_signalled", signal.SIGTERM)
    with pytest.raises(interrupts.Interrupted) as caught:
        with interrupts.exclusive():
            pass
    assert caught.value.exit_code == 143 and str(caught.value) == "interrupted"
