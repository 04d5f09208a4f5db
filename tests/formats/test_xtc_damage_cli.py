"""Every command that decodes an XTC refuses one whose compressed coordinates are damaged:
exit 1, one ``error:`` line naming the file and the frame, no output left, the same on
every run (MDAnalysis's libmdaxdr read out of bounds there: exit 134 or 136, or RMSDs that
changed from run to run)."""

import os
import re

import numpy as np
import pytest
from conftest import run_h5mdtool, write_xtc
from xtc_samples import damaged_copy

DAMAGED_FRAME = 3
LATE_FRAME = 6


@pytest.fixture(scope="module")
def damaged(tmp_path_factory, adk, adk_frames):
    """An AdK XTC of 8 frames whose frame 3 has damaged coordinates, the intact file and its
    conversion, and the topology."""
    directory = tmp_path_factory.mktemp("damaged-xtc")
    good, bad = str(directory / "good.xtc"), str(directory / "bad.xtc")
    frames = np.arange(8)
    write_xtc(good, adk_frames[:8], frames * 10, frames * 2.0)
    damaged_copy(good, bad, DAMAGED_FRAME)
    late = str(directory / "bad-late.xtc")  # in the last rank's share of 2 or 3 ranks
    damaged_copy(good, late, LATE_FRAME)
    converted = str(directory / "good.h5md")
    done = run_h5mdtool(["convert", good, "-o", converted])
    assert done.returncode == 0, done.stderr
    return {"good": good, "bad": bad, "late": late, "h5md": converted, "topology": adk[0], "directory": directory}


def assert_refused_naming_frame(done, path, ranks=None, frame=DAMAGED_FRAME, together=False):
    """Exit 1 and one ``error:`` line naming file and frame; under mpirun the rank that read
    the frame says so (``error: rank N: ...``), and Open MPI's notice of the ranks' exit
    status follows; *together*: the ranks refused together, no rank aborted the job."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert done.returncode == 1, f"exit {done.returncode}: {done.stderr[-800:]}"
    assert len(errors) == 1 and (ranks or len(lines) == 1), lines
    if together:
        assert "MPI_ABORT" not in done.stderr and "ORTE_ERROR_LOG" not in done.stderr, lines
    assert re.match(rf"error: (rank \d+: )?{re.escape(path)}: XTC frame {frame} at byte \d+ is corrupt",
                    errors[0]), errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.serial_only
@pytest.mark.parametrize("ranks", [None, 2])
def test_convert_refuses(damaged, ranks):
    output = str(damaged["directory"] / f"out-{ranks}.h5md")
    done = run_h5mdtool(["convert", damaged["bad"], "-o", output], ranks=ranks)
    assert_refused_naming_frame(done, damaged["bad"], ranks)
    assert not os.path.exists(output)
    assert not [name for name in os.listdir(damaged["directory"]) if name.endswith(".tmp")]


@pytest.mark.serial_only
def test_split_h5md_refuses(damaged):
    output = str(damaged["directory"] / "parts")
    done = run_h5mdtool(["split", damaged["bad"], "--nparts", "2", "--output-format", "h5md", "-o", output])
    assert_refused_naming_frame(done, damaged["bad"])
    assert not os.path.exists(output)


@pytest.mark.serial_only
@pytest.mark.parametrize("engine,ranks", [("blocks", None), ("frames", None), ("blocks", 2), ("frames", 2),
                                          ("blocks", 3)])
@pytest.mark.parametrize("which", ["bad", "late"])
def test_bench_rmsd_refuses(damaged, engine, ranks, which):
    """Refused by every rank together in one line, whichever rank reads the damaged frame
    (regression, make fuzz case 1087, seed 1746975965: the rank reading frame 15 aborted
    the job, and Open MPI's notice and the other ranks' "error: interrupted" followed)."""
    output = str(damaged["directory"] / f"rmsd-{engine}-{ranks}-{which}.csv")
    for _ in range(2):  # the same every time
        done = run_h5mdtool(["bench", "rmsd", damaged[which], "-t", damaged["topology"], "-s", "name CA",
                             "--engine", engine, "--rmsd-out", output], ranks=ranks)
        assert_refused_naming_frame(done, damaged[which], ranks, DAMAGED_FRAME if which == "bad" else LATE_FRAME,
                                    together=True)
        assert not os.path.exists(output)


@pytest.mark.serial_only
def test_validate_against_reports(damaged):
    """validate reports the source it cannot read as a finding (its report format), exit 1."""
    done = run_h5mdtool(["validate", damaged["h5md"], "--against", damaged["bad"]])
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"AGAINST003 .*{re.escape(damaged['bad'])}: XTC frame {DAMAGED_FRAME} at byte \d+ is corrupt",
                     done.stdout), done.stdout
    assert "Traceback" not in done.stderr
    done = run_h5mdtool(["validate", damaged["h5md"], "--against", damaged["good"]])
    assert done.returncode == 0, done.stdout
