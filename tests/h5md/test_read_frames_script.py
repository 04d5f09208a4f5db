"""benchmarks/read_frames.py, which bench_layouts.py times on every layout, in a fresh
interpreter, serially and on 2 ranks (regression: it opened Zstandard-compressed files
without registering hdf5plugin's filters and `make bench` stopped in bench_layouts.py once
`import h5mdtool` no longer loaded them)."""

import os
import subprocess
import sys

import pytest
from conftest import MPIRUN, ROOT, run_h5mdtool

pytestmark = pytest.mark.serial_only


@pytest.fixture(scope="module")
def zstd_file(tmp_path_factory):
    from MDAnalysisTests.datafiles import XTC

    path = tmp_path_factory.mktemp("read-frames") / "zstd.h5md"
    done = run_h5mdtool(["convert", XTC, "-o", str(path), "--no-progress", "--compression", "zstd"])
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize("ranks", [None, 2])
def test_read_frames_reads_a_zstd_file(zstd_file, ranks):
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "read_frames.py"), str(zstd_file)]
    if ranks:
        command = [MPIRUN, "-n", str(ranks)] + command
    environment = {key: value for key, value in os.environ.items() if key != "HDF5_PLUGIN_PATH"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
