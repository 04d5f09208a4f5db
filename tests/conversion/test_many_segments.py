"""Trajectories of many segments (``gmx mdrun -noappend`` parts): every segment stayed open
while reading, so a few hundred parts ran out of file descriptors (``ulimit -n``: convert
said ``part0121.xtc: cannot read XTC frame 0 (XDR read error = notfound)`` at a limit of 128;
``bench rmsd --engine frames`` failed to build the 122nd Universe, ``bench rmsd`` on a split
into 98 H5MD parts failed at a limit of 64). Readers now keep at most
``MAX_OPEN_SEGMENTS`` open; reading in order opens each segment once.
"""

import os
import resource
import subprocess
import sys
import warnings

import numpy as np
import pytest

from h5mdtool import bench_rmsd, compare_with_source, convert, split
from h5mdtool.formats import trajectory as trajectory_module

from conftest import write_xtc
from formats_oracle import compare_output, source_frames


def _segments(comm, directory, adk_frames, per_segment):
    """The AdK frames in XTC segments of *per_segment* frames (steps 10 apart)."""
    frames = np.arange(len(adk_frames))
    starts = frames[::per_segment]
    paths = [os.path.join(directory, f"part{number:04d}.xtc") for number in range(len(starts))]
    if comm.rank == 0:
        os.makedirs(directory, exist_ok=True)
        for path, start in zip(paths, starts):
            chosen = frames[start:start + per_segment]
            write_xtc(path, adk_frames[chosen], chosen * 10, chosen * 2.0)
    comm.Barrier()
    return paths


def _mdanalysis_rmsd(topology, paths):
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        universe = mda.Universe(topology, paths)
        return rms.RMSD(universe, select="name CA").run().results.rmsd


@pytest.mark.mpi
def test_more_segments_than_may_be_open_read_as_mdanalysis_reads_them(comm, shared_tmp, adk, adk_frames, monkeypatch):
    """25 segments through readers that keep 4 open: convert, split, validate --against and
    both bench engines give what MDAnalysis reads (evicted segments are reopened correctly)."""
    monkeypatch.setattr(trajectory_module, "MAX_OPEN_SEGMENTS", 4)
    paths = _segments(comm, os.path.join(shared_tmp, "segments"), adk_frames, 4)
    assert len(paths) == 25
    output = os.path.join(shared_tmp, "out.h5md")
    convert(paths, output, comm=comm, progress=False, compression="gzip", chunk_frames=6)
    comm.Barrier()
    if comm.rank == 0:
        frames = [frame for path in paths for frame in source_frames(path, "XTC")]
        assert len(frames) == 98
        compare_output(output, frames)
    report = compare_with_source([output], paths, comm=comm, progress=False)
    assert report["compared_frames"] == report["n_frames"] == report["source_n_frames"] == 98
    assert report["n_differing"] == 0 and report["box_mismatch"] is None, report
    parts = os.path.join(shared_tmp, "parts")
    split(paths, parts, 3, comm=comm, progress=False)
    expected = _mdanalysis_rmsd(adk[0], paths) if comm.rank == 0 else None
    for inputs in (paths, parts, output):
        for engine in ("blocks", "frames"):
            result = bench_rmsd(inputs, adk[0], comm=comm, engine=engine, block_frames=10)
            if comm.rank == 0:
                np.testing.assert_array_equal(result["rmsd"][:, 0], expected[:, 0])
                np.testing.assert_allclose(result["rmsd"][:, 2], expected[:, 2], rtol=0, atol=2e-4,
                                           err_msg=f"{engine} on {inputs if isinstance(inputs, str) else 'segments'}")
    comm.Barrier()


def _limit_descriptors():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_a_hundred_segments_under_a_descriptor_limit_of_64(tmp_path, adk, adk_frames):
    from h5mdtool.parallel.mpi import SerialComm

    paths = _segments(SerialComm(), str(tmp_path / "segments"), adk_frames, 1)
    assert len(paths) == 98
    output = str(tmp_path / "out.h5md")
    commands = [
        ["convert", *paths, "-o", output, "--no-progress"],
        ["validate", output, "--against", *paths],
        ["split", *paths, "--nparts", "98", "-o", str(tmp_path / "parts"), "--output-format", "h5md", "--no-progress"],
        ["validate", str(tmp_path / "parts")],
    ]
    for engine in ("blocks", "frames"):
        for name, inputs in (("segments", paths), ("parts", [str(tmp_path / "parts")])):
            commands.append(["bench", "rmsd", *inputs, "-t", adk[0], "--engine", engine,
                             "--rmsd-out", str(tmp_path / f"{engine}-{name}.csv")])
    for args in commands:
        done = subprocess.run([sys.executable, "-m", "h5mdtool", *args], capture_output=True, text=True,
                              timeout=300, preexec_fn=_limit_descriptors)
        assert done.returncode == 0, (args[:2], done.stderr[-2000:])
    expected = _mdanalysis_rmsd(adk[0], paths)
    for engine in ("blocks", "frames"):
        for name in ("segments", "parts"):
            found = np.loadtxt(tmp_path / f"{engine}-{name}.csv", delimiter=",", skiprows=1)
            np.testing.assert_allclose(found[:, 2], expected[:, 2], rtol=0, atol=2e-4, err_msg=f"{engine} {name}")
