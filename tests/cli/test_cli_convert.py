"""The convert command line: summaries, --help, bad inputs, and failures under mpirun."""

import json
import os
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import ROOT, run_h5mdtool, write_xtc
from h5mdtool.cli.main import cli

OPTIONS = [
    "--output", "--topology", "--select", "--start", "--stop", "--step", "--velocities",
    "--forces", "--on-overlap", "--chunk-frames", "--contiguous", "--compression",
    "--compression-level", "--shuffle", "--stripe-count", "--stripe-size", "--block-size",
    "--author", "--force", "--progress", "--json",
]


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_help_explains_every_option():
    result = invoke("convert", "--help")
    assert result.exit_code == 0
    for option in OPTIONS:
        assert option in result.output
    assert "bytes" in result.output and "nm" in result.output


def test_summary_and_json(tmp_path, adk):
    output = str(tmp_path / "adk.h5md")
    result = invoke("convert", adk[1], "-o", output, "--no-progress")
    assert result.exit_code == 0, result.output
    assert "98 frames x 3341 atoms" in result.output
    assert "frames/s" in result.output
    result = invoke("convert", adk[1], "-o", output, "--force", "--json", "--stop", "10", "--compression", "gzip")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["n_frames"] == 10
    assert summary["layout"]["compression"] == "gzip"
    assert summary["layout"]["compression_level"] == 4
    assert summary["bytes"] == os.path.getsize(output)


@pytest.fixture
def bad_inputs(tmp_path, adk, solvated, adk_frames):
    """Broken trajectories of every kind, built from real ones."""
    paths = {}
    paths["missing"] = str(tmp_path / "missing.xtc")
    paths["empty"] = str(tmp_path / "empty.xtc")
    open(paths["empty"], "wb").close()
    source = open(solvated["XTC"], "rb").read()
    paths["truncated XTC"] = str(tmp_path / "truncated.xtc")
    open(paths["truncated XTC"], "wb").write(source[: len(source) // 2 + 7])
    paths["truncated DCD"] = str(tmp_path / "truncated.dcd")
    open(paths["truncated DCD"], "wb").write(open(adk[1], "rb").read()[:100000])
    paths["garbage"] = str(tmp_path / "garbage.xtc")
    open(paths["garbage"], "wb").write(np.random.default_rng(1).bytes(5000))
    paths["text"] = str(tmp_path / "notes.trr")
    open(paths["text"], "w").write("not a trajectory\n")
    paths["unknown extension"] = str(tmp_path / "frames.nc4")
    open(paths["unknown extension"], "wb").write(source[:1000])
    paths["directory"] = str(tmp_path / "folder.xtc")
    os.mkdir(paths["directory"])
    return paths


MESSAGES = {
    "missing": "no such file",
    "empty": "file is empty",
    "truncated XTC": "ends inside frame 4",
    "truncated DCD": "truncated",
    "garbage": "not an XTC file",
    "text": "not a TRR file",
    "unknown extension": "unknown trajectory extension '.nc4'",
    "directory": "is a directory",
}


@pytest.mark.parametrize("kind", list(MESSAGES))
def test_bad_input_one_line_error(tmp_path, bad_inputs, kind):
    output = tmp_path / "out.h5md"
    result = invoke("convert", bad_inputs[kind], "-o", str(output))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert MESSAGES[kind] in lines[0]
    assert "Traceback" not in result.output
    assert not output.exists()
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_atom_counts_differ(tmp_path, adk, solvated):
    result = invoke("convert", solvated["XTC"], adk[1], "-o", str(tmp_path / "o.h5md"))
    assert result.exit_code == 1
    assert "has 3341 atoms but" in result.output and "47681" in result.output


def test_topology_mismatch_and_empty_selection(tmp_path, adk, solvated):
    out = str(tmp_path / "o.h5md")
    result = invoke("convert", solvated["XTC"], "-t", adk[0], "-s", "name CA", "-o", out)
    assert result.exit_code == 1 and "has 3341 atoms but the trajectory has 47681" in result.output
    result = invoke("convert", adk[1], "-t", adk[0], "-s", "resname NOPE", "-o", out)
    assert result.exit_code == 1 and "matches no atom" in result.output
    result = invoke("convert", adk[1], "-t", adk[0], "-s", "name CA and (", "-o", out)
    assert result.exit_code == 1 and "invalid selection" in result.output


def test_output_directory_missing(tmp_path, adk):
    result = invoke("convert", adk[1], "-o", str(tmp_path / "no" / "such" / "dir" / "o.h5md"))
    assert result.exit_code == 1 and "does not exist" in result.output


@pytest.mark.parametrize("name", ["a" * 250 + ".h5md", "ü" * 122 + ".h5md"])
def test_longest_output_names_are_written(tmp_path, adk, name):
    """An output name the file system accepts (up to 255 bytes) must not fail as a temporary,
    which adds a hidden prefix and a unique suffix to it; interrupted, it is still removed."""
    from h5mdtool.parallel import outputs

    output = tmp_path / name
    result = invoke("convert", adk[1], "-o", str(output), "--stop", "3", "--no-progress")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == [name]
    temporary = outputs.temporary_name(str(tmp_path / name))
    assert len(os.fsencode(os.path.basename(temporary))) + outputs._CLAIM_LENGTH <= 255
    with open(temporary, "wb"):
        pass
    assert outputs.remove_pending_temporaries() == (True, True)
    assert sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize(
    "args",
    [["--contiguous", "--compression", "gzip"], ["--compression", "lzf", "--compression-level", "2"],
     ["--stripe-size", "1000"], ["--stripe-size", "lots"], ["--chunk-frames", "0"], ["--compression", "bzip9"]],
)
def test_usage_errors_exit_2(tmp_path, adk, args):
    result = invoke("convert", adk[1], "-o", str(tmp_path / "o.h5md"), *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.h5md").exists()


def test_debug_shows_traceback(tmp_path):
    result = CliRunner().invoke(cli, ["--debug", "convert", str(tmp_path / "missing.xtc"), "-o", str(tmp_path / "o.h5md")])
    assert result.exit_code != 0
    assert result.exception is not None and "no such file" in str(result.exception)
    os.environ.pop("H5MDTOOL_DEBUG", None)


def test_nothing_written_beside_inputs(tmp_path, adk_frames):
    """No offset or lock files next to the inputs: read-only input directories work."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = str(inputs / "a.xtc")
    write_xtc(path, adk_frames[:20], np.arange(20), np.arange(20.0))
    os.chmod(inputs, 0o555)
    try:
        result = invoke("convert", path, "-o", str(tmp_path / "o.h5md"))
        assert result.exit_code == 0, result.output
        assert os.listdir(inputs) == ["a.xtc"]
    finally:
        os.chmod(inputs, 0o755)


@pytest.fixture
def corrupt_late_frame(tmp_path, adk_frames):
    """An XTC whose frame 80 of 98 repeats another atom count in its header."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    path = str(tmp_path / "corrupt.xtc")
    write_xtc(path, adk_frames, np.arange(98), np.arange(98.0))
    with XTCFile(path) as handle:
        offset = int(handle.offsets[80])
    data = bytearray(open(path, "rb").read())
    data[offset + 52: offset + 56] = struct.pack(">i", 9999)  # the coordinate count
    open(path, "wb").write(data)
    return path


@pytest.mark.parametrize("ranks", [None, 2, 3])
def test_corrupt_late_header_found_by_the_scan(tmp_path, corrupt_late_frame, ranks):
    """Issue 11 defect 3: rank 0 checks every frame header before any rank decodes one."""
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", corrupt_late_frame, "-o", str(output), "--compression", "gzip"], ranks=ranks, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("error:") == 1 and "frame 80" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not output.exists()
    assert os.listdir(tmp_path) == ["corrupt.xtc"]


@pytest.fixture
def nan_late_frame(tmp_path, adk):
    """The AdK DCD with a NaN coordinate in frame 90 of 98: only the rank decoding it fails."""
    from MDAnalysis.lib.formats.libdcd import DCDFile

    path = str(tmp_path / "nan.dcd")
    with DCDFile(adk[1]) as handle:
        header, first, size = handle._header_size, handle._firstframesize, handle._framesize
    data = bytearray(open(adk[1], "rb").read())
    # frame 90's x block: after its record marker (no unit cell in this DCD)
    data[header + 90 * size + 4: header + 90 * size + 8] = struct.pack("<f", float("nan"))
    open(path, "wb").write(data)
    return path


@pytest.mark.parametrize("ranks", [2, 3])
def test_error_on_one_rank_stops_all(tmp_path, nan_late_frame, ranks):
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", nan_late_frame, "-o", str(output), "--compression", "gzip"], ranks=ranks, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"error: rank {ranks - 1}: " in done.stderr and "frame 90" in done.stderr and "non-finite" in done.stderr
    assert done.stderr.count("error:") == 1
    assert "Traceback" not in done.stderr
    assert not output.exists()
    assert os.listdir(tmp_path) == ["nan.dcd"]


def test_collective_error_printed_once(tmp_path, adk):
    output = tmp_path / "out.h5md"
    output.write_text("keep me")
    done = run_h5mdtool(["convert", adk[1], "-o", str(output)], ranks=3)
    assert done.returncode == 1
    assert done.stderr.count("error:") == 1 and "--force" in done.stderr
    assert output.read_text() == "keep me"


def test_parallel_cli_round_trip(tmp_path, adk):
    output = tmp_path / "out.h5md"
    done = run_h5mdtool(["convert", adk[1], "-o", str(output), "--compression", "gzip", "--chunk-frames", "7"], ranks=3)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("wrote ") == 1 and "on 3 rank(s)" in done.stdout
    import MDAnalysis as mda

    copy, source = mda.Universe(adk[0], str(output)), mda.Universe(*adk)
    for a, b in zip(copy.trajectory, source.trajectory):
        np.testing.assert_allclose(a.positions, b.positions, rtol=2.5e-7, atol=1e-6)


def test_unexpected_error_on_one_rank_aborts_job(tmp_path):
    import subprocess
    import sys

    from conftest import MPIRUN

    marker = str(tmp_path / "marker")
    done = subprocess.run(
        [MPIRUN, "-n", "2", sys.executable, os.path.join(ROOT, "tests", "scripts", "fail_on_one_rank.py"), marker],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode != 0
    assert "error: rank 1: RuntimeError: simulated failure on one rank" in done.stderr
    assert not os.path.exists(marker + ".rank1")  # the failing rank ran its clean-up


def test_parallel_run_needs_parallel_h5py(monkeypatch):
    import h5py

    from h5mdtool.parallel.errors import StackError
    from h5mdtool.parallel.mpi import require_parallel_h5py

    class TwoRanks:
        rank, size = 0, 2

    class Config:
        mpi = False

    monkeypatch.setattr(h5py, "get_config", lambda: Config())
    with pytest.raises(StackError, match="built without MPI"):
        require_parallel_h5py(TwoRanks())


def test_progress_bar_on_request(tmp_path, adk):
    result = CliRunner().invoke(cli, ["convert", adk[1], "-o", str(tmp_path / "o.h5md"), "--progress"])
    assert result.exit_code == 0, result.output
    # not a terminal: lines for a log (tests/parallel/test_progress.py has the bar)
    assert "convert: 98 of 98 frames (100%) after " in result.output and "\r" not in result.output
    result = CliRunner().invoke(cli, ["convert", adk[1], "-o", str(tmp_path / "o.h5md"), "--force"])
    assert "convert:" not in result.output  # not a terminal: nothing by default
