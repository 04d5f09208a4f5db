"""bench rmsd on a split trajectory refuses part files that hold other frames than the
manifest records (swapped or copied parts of equal size), in one line and before reading."""

import json
import os
import shutil

import pytest

from conftest import run_h5mdtool
from h5mdtool import bench_rmsd, split
from h5mdtool.parallel.errors import H5mdToolError
from h5mdtool.subfiles.manifest import read_manifest


def _split(comm, directory, source, nparts, fmt):
    split(source, directory, nparts, comm=comm, format=fmt, progress=False)
    comm.Barrier()
    return read_manifest(directory)


def _swap(first, second):
    temporary = first + ".swap"
    os.rename(first, temporary)
    os.rename(second, first)
    os.rename(temporary, second)


@pytest.mark.mpi
@pytest.mark.parametrize("damage", ["swapped", "copied"])
@pytest.mark.parametrize("engine", ["blocks", "frames"])
def test_bench_refuses_swapped_or_copied_parts(comm, shared_tmp, adk, damage, engine):
    """Regression: two H5MD parts of equal size swapped on disk (or one copied over the other)
    were read, giving wrong RMSDs with exit 0; each rank checks the parts it reads."""
    directory = os.path.join(shared_tmp, "parts")
    manifest = _split(comm, directory, adk[1], 2, "h5md")  # 98 frames: two parts of 49, equal sizes
    first, second = (part.path for part in manifest.parts)
    if comm.rank == 0:
        assert os.path.getsize(first) == os.path.getsize(second)
        if damage == "swapped":
            _swap(first, second)
        else:
            shutil.copyfile(first, second)
    comm.Barrier()
    with pytest.raises(H5mdToolError) as caught:
        bench_rmsd(directory, adk[0], comm=comm, engine=engine)
    message = str(caught.value)
    assert "part-0002.h5md" in message or "part-0001.h5md" in message
    expected = "MAN009" if damage == "swapped" else ("MAN008", "MAN009")
    assert any(rule in message for rule in ((expected,) if isinstance(expected, str) else expected)), message


@pytest.mark.mpi
def test_bench_refuses_a_copied_part_no_rank_reads_first(comm, shared_tmp, adk):
    """A part holding another's frames is found by the rank reading it, whichever that is."""
    directory = os.path.join(shared_tmp, "parts")
    manifest = _split(comm, directory, adk[1], 3, "same")
    if comm.rank == 0:  # the last part replaced by a copy of the middle part's frames, sizes fixed
        shutil.copyfile(manifest.parts[1].path, manifest.parts[2].path)
        document = json.load(open(manifest.path))
        document["parts"][2]["bytes"] = os.path.getsize(manifest.parts[2].path)
        json.dump(document, open(manifest.path, "w"))
    comm.Barrier()
    with pytest.raises(H5mdToolError, match="part-0003.dcd.*(MAN008|MAN009)"):
        bench_rmsd(directory, adk[0], comm=comm, start=50)


@pytest.mark.parametrize("ranks", [None, 2, 3])
def test_cli_swapped_parts_one_error_line(tmp_path, adk, ranks):
    directory = str(tmp_path / "parts")
    split(adk[1], directory, 2, format="h5md", progress=False)
    parts = read_manifest(directory).parts
    _swap(parts[0].path, parts[1].path)
    done = run_h5mdtool(["bench", "rmsd", directory, "-t", adk[0]], ranks=ranks)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "MAN009" in errors[0] and "swapped" in errors[0], lines
    assert "Traceback" not in done.stderr
