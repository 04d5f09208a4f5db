"""benchmarks/read_frames.py, which bench_layouts.py times on every layout, in a fresh
interpreter, serially and on 2 ranks (regression: it opened Zstandard-compressed files
without registering hdf5plugin's filters and `make bench` stopped in bench_layouts.py once
`import h5mdtool` no longer loaded them)."""

import os

import pytest
from conftest import run_h5mdtool, run_script_without_plugin_path

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
    done = run_script_without_plugin_path(os.path.join("benchmarks", "read_frames.py"), [zstd_file], ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
