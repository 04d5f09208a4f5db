"""`make demo`'s last check, examples/check_roundtrip.py, on the files the demo writes: run in a
fresh interpreter as the demo runs it, serially and on 2 ranks (regression: it opened the
`--precision xtc` file, compressed with Zstandard, without registering hdf5plugin's filters,
and `make demo` ended in a traceback once `import h5mdtool` no longer loaded them)."""

import os

import pytest
from conftest import run_h5mdtool, run_script_without_plugin_path

pytestmark = pytest.mark.serial_only


@pytest.fixture(scope="module")
def demo_directory(tmp_path_factory):
    from MDAnalysisTests.datafiles import XTC

    directory = tmp_path_factory.mktemp("demo-output")
    for name, options in (("adk_solvated.h5md", ["--compression", "gzip"]),
                          ("adk_solvated_xtcgrid.h5md", ["--precision", "xtc"])):
        done = run_h5mdtool(["convert", XTC, "-o", str(directory / name), "--no-progress"] + options)
        assert done.returncode == 0, done.stderr
    return directory


@pytest.mark.parametrize("ranks", [None, 2])
def test_check_roundtrip_reads_every_demo_file(demo_directory, ranks):
    done = run_script_without_plugin_path(os.path.join("examples", "check_roundtrip.py"), [demo_directory], ranks)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("adk_solvated.h5md", "adk_solvated_xtcgrid.h5md"):
        assert f"{name}: MDAnalysis read 10 frames" in done.stdout and "-> OK" in done.stdout, done.stdout
    assert "MISMATCH" not in done.stdout and "Traceback" not in done.stderr
