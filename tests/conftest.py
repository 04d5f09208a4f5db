"""Shared fixtures: communicators, a directory shared by all ranks, real trajectories.

Tests marked ``mpi`` run serially in ``make test-serial`` and again on every rank under
``mpirun -n 2`` and ``-n 3`` (``tests/mpi_pytest.py``); they must make the same collective
calls on every rank. Other tests run serially only.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest

from h5mdtool.parallel.mpi import resolve

warnings.filterwarnings("ignore", category=DeprecationWarning)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(ROOT, "tools", "mpirun.sh")
UNDER_MPI = "H5MDTOOL_TEST_SHARED_DIR" in os.environ


def pytest_collection_modifyitems(config, items):
    if not UNDER_MPI:
        return
    skip = pytest.mark.skip(reason="serial-only test")
    for item in items:
        if "mpi" not in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def offsets_cache_home():
    """``XDG_CACHE_HOME`` of the session and of the commands it runs: a directory of its
    own, so the offsets cache (:mod:`h5mdtool.formats.offsetcache`) never writes into the
    user's, and one session's entries never serve another's."""
    path = tempfile.mkdtemp(prefix="h5mdtool-cache-")
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = path
    yield path
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def comm():
    """MPI.COMM_WORLD under mpirun with several ranks, else the serial stand-in."""
    return resolve()


@pytest.fixture(scope="session")
def session_dir(comm):
    """A directory every rank sees, for the whole session."""
    base = os.environ.get("H5MDTOOL_TEST_SHARED_DIR")
    path = None
    if comm.rank == 0:
        path = tempfile.mkdtemp(prefix="session-", dir=base)
    path = comm.bcast(path)
    yield path
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared_tmp(comm, session_dir, request):
    """A fresh directory per test, the same path on every rank."""
    path = None
    if comm.rank == 0:
        path = tempfile.mkdtemp(prefix=request.node.name[:40].replace("/", "_") + "-", dir=session_dir)
    return comm.bcast(path)


@pytest.fixture(scope="session")
def adk():
    """Adenylate kinase in vacuum: PSF topology and a 98-frame DCD (3341 atoms)."""
    from MDAnalysisTests.datafiles import DCD, PSF

    return PSF, DCD


@pytest.fixture(scope="session")
def solvated():
    """Solvated adenylate kinase: GRO topology, 10-frame XTC and TRR (47681 atoms)."""
    from MDAnalysisTests.datafiles import GRO, TRR, XTC

    return {"topology": GRO, "XTC": XTC, "TRR": TRR}


def write_xtc(path, positions_nm, steps, times, box_nm=None):
    """Write an XTC with MDAnalysis's low-level writer (positions in nm)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    box = np.diag([5.0, 5.0, 5.0]).astype(np.float32) if box_nm is None else box_nm
    with XTCFile(path, "w") as handle:
        for xyz, step, time in zip(positions_nm, steps, times):
            handle.write(np.asarray(xyz, np.float32), box, int(step), float(time))


@pytest.fixture(scope="session")
def adk_frames(adk):
    """The AdK DCD's positions in nm, float32, shape (98, 3341, 3)."""
    from MDAnalysis.lib.formats.libdcd import DCDFile

    with DCDFile(adk[1]) as handle:
        return (handle.readframes().xyz / 10.0).astype(np.float32)


@pytest.fixture(scope="session")
def adk_segments(comm, session_dir, adk_frames):
    """The AdK trajectory as three XTC segments (40, 30, 28 frames), steps 0, 10, 20, ..."""
    directory = os.path.join(session_dir, "segments")
    if comm.rank == 0:
        os.makedirs(directory)
        bounds = [(0, 40), (40, 70), (70, 98)]
        for number, (a, b) in enumerate(bounds):
            frames = np.arange(a, b)
            write_xtc(os.path.join(directory, f"part{number}.xtc"), adk_frames[a:b], frames * 10, frames * 2.0)
        frames = np.arange(98)
        write_xtc(os.path.join(directory, "whole.xtc"), adk_frames, frames * 10, frames * 2.0)
    comm.Barrier()
    return {
        "parts": [os.path.join(directory, f"part{n}.xtc") for n in range(3)],
        "whole": os.path.join(directory, "whole.xtc"),
    }


def run_h5mdtool(args, ranks=None, timeout=120, **kwargs):
    """Run the installed command line (under mpirun with *ranks* ranks if given)."""
    command = [sys.executable, "-m", "h5mdtool"] + list(args)
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def run_script_without_plugin_path(script, args, ranks=None, timeout=300, cwd=None):
    """Run the repository's *script* (a path under the clone, or absolute) in a fresh
    interpreter, in *cwd*, under mpirun with *ranks* ranks if given, without
    ``HDF5_PLUGIN_PATH``: as a user runs an example or a benchmark helper, which must
    register hdf5plugin's filters itself."""
    command = [sys.executable, os.path.join(ROOT, script)] + [str(arg) for arg in args]
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    environment = {key: value for key, value in os.environ.items() if key != "HDF5_PLUGIN_PATH"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd=cwd)
