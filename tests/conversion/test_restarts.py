"""Segments that overlap because a run was restarted from a checkpoint.

A run that crashed at step K after its last checkpoint at step C < K is restarted from C; with
``gmx mdrun -noappend`` the restart's file starts again at step C. The earlier file's frames
from C to K come from the crashed run, which the restart does not continue: kept, they splice
two diverged runs at K. ``--on-overlap later`` keeps the restart's frames (gmx trjcat's rule:
"in case of double time frames the one in the later file is used"); ``first`` (formerly
``drop``, the only choice) keeps the earlier file's. The oracle is MDAnalysis reading the
source files, with the frames each rule keeps chosen here.
"""

import os
import tempfile

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5mdtool import convert, split
from h5mdtool.conversion.append import append
from h5mdtool.parallel.errors import InputError, OverlapError

from conftest import run_h5mdtool
from formats_oracle import compare_output, source_frames

TRAJ = "particles/trajectory"


def write_trr(path, steps, seed, velocity_every=1):
    """A TRR of 6 atoms at *steps* (time 0.002 ps per step): positions and velocities drawn from
    *seed* (so two runs' copies of a step differ), velocities every *velocity_every* frames."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile

    rng = np.random.default_rng(seed)
    box = np.diag([4.0, 4.0, 4.0]).astype(np.float32)
    with TRRFile(path, "w") as handle:
        for number, step in enumerate(steps):
            xyz = (rng.random((6, 3)) * 4).astype(np.float32)
            velocities = (rng.random((6, 3)) - 0.5).astype(np.float32) if number % velocity_every == 0 else None
            handle.write(xyz, velocities, None, box, int(step), float(step) * 0.002, 0.0, 6)


def kept_later(step_lists):
    """Per segment, the frames gmx trjcat's rule keeps: those before the first step of every
    later segment (the segments' steps increase)."""
    kept = []
    for number, steps in enumerate(step_lists):
        restart = min((later[0] for later in step_lists[number + 1:]), default=None)
        kept.append([frame for frame, step in enumerate(steps) if restart is None or step < restart])
    return kept


def kept_first(step_lists):
    """Per segment, the frames past the last step kept so far."""
    kept, last = [], None
    for steps in step_lists:
        frames = [frame for frame, step in enumerate(steps) if last is None or step > last]
        kept.append(frames)
        if frames:
            last = steps[frames[-1]]
    return kept


KEEP = {"later": kept_later, "first": kept_first, "drop": kept_first}


def expected_frames(paths, kept):
    return [frame for path, frames in zip(paths, kept) for number, frame in enumerate(source_frames(path, "TRR"))
            if number in frames]


segment_steps = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 8), st.sampled_from((1, 2, 5))).map(
        lambda t: [t[0] + t[2] * i for i in range(t[1])]),
    min_size=2, max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segment_steps, st.sampled_from(("later", "first", "drop")), st.sampled_from((1, 3)))
def test_convert_keeps_the_frames_each_rule_names(step_lists, policy, chunk_frames):
    with tempfile.TemporaryDirectory() as directory:
        paths = [os.path.join(directory, f"part{n}.trr") for n in range(len(step_lists))]
        for seed, (path, steps) in enumerate(zip(paths, step_lists)):
            write_trr(path, steps, seed)
        kept = KEEP[policy](step_lists)
        output = os.path.join(directory, "out.h5md")
        if not any(kept):
            with pytest.raises(InputError, match="no frame is left"):
                convert(paths, output, on_overlap=policy, progress=False)
            return
        summary = convert(paths, output, on_overlap=policy, progress=False, chunk_frames=chunk_frames)
        expected = expected_frames(paths, kept)
        assert summary["n_frames"] == len(expected)
        compare_output(output, expected)
        dropped = sum(len(steps) - len(frames) for steps, frames in zip(step_lists, kept))
        assert bool(dropped) == any("--on-overlap" in note for note in summary["notes"]), summary["notes"]


def test_a_crashed_run_and_its_restart(tmp_path):
    """Checkpoint at step 200, crash after step 300, restart from 200: later keeps 0-100 of the
    crashed run and 200-500 of the restart; first splices the crashed run's 300 to the restart's 400."""
    crashed, restart = str(tmp_path / "md.part0001.trr"), str(tmp_path / "md.part0002.trr")
    write_trr(crashed, [0, 100, 200, 300], seed=1)
    write_trr(restart, [200, 300, 400, 500], seed=2)
    with pytest.raises(OverlapError, match="--on-overlap later keeps the restart's frames"):
        convert([crashed, restart], str(tmp_path / "refused.h5md"), progress=False)
    later = str(tmp_path / "later.h5md")
    summary = convert([crashed, restart], later, on_overlap="later", progress=False)
    assert any("md.part0001.trr: dropped its last 2 frame(s) (steps 200 to 300): a later segment restarts" in note
               for note in summary["notes"]), summary["notes"]
    crashed_frames, restart_frames = source_frames(crashed, "TRR"), source_frames(restart, "TRR")
    compare_output(later, crashed_frames[:2] + restart_frames)
    first = str(tmp_path / "first.h5md")
    convert([crashed, restart], first, on_overlap="first", progress=False)
    compare_output(first, crashed_frames + restart_frames[2:])


def test_a_restart_that_supersedes_a_whole_segment(tmp_path):
    paths = [str(tmp_path / f"p{n}.trr") for n in range(3)]
    for seed, (path, steps) in enumerate(zip(paths, [[0, 10, 20], [30, 40], [20, 30, 40, 50]])):
        write_trr(path, steps, seed)
    output = str(tmp_path / "o.h5md")
    summary = convert(paths, output, on_overlap="later", progress=False)
    assert any("p1.trr: dropped its last 2 frame(s) (steps 30 to 40, the whole segment)" in note
               for note in summary["notes"]), summary["notes"]
    compare_output(output, source_frames(paths[0], "TRR")[:2] + source_frames(paths[2], "TRR"))


def test_the_cli_takes_later_first_and_the_old_name_drop(tmp_path):
    crashed, restart = str(tmp_path / "a.trr"), str(tmp_path / "b.trr")
    write_trr(crashed, [0, 1, 2, 3], seed=1)
    write_trr(restart, [2, 3, 4], seed=2)
    for policy, frames in (("later", 5), ("first", 5), ("drop", 5)):
        output = str(tmp_path / f"{policy}.h5md")
        done = run_h5mdtool(["convert", crashed, restart, "-o", output, "--on-overlap", policy, "--no-progress"])
        assert done.returncode == 0, done.stderr
        with h5py.File(output, "r") as handle:
            np.testing.assert_array_equal(handle[f"{TRAJ}/position/step"][()], np.arange(frames))
    refused = run_h5mdtool(["convert", crashed, restart, "-o", str(tmp_path / "e.h5md")])
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--on-overlap later" in refused.stderr
    help_text = run_h5mdtool(["convert", "--help"]).stdout
    assert "gmx trjcat's rule" in help_text


def restart_pair(comm, directory, crashed_steps, restart_steps, velocity_every=1):
    """Rank 0 writes a crashed run's TRR and its restart's (seeds 1 and 2) in *directory*."""
    crashed, restart = (os.path.join(directory, name) for name in ("a.trr", "b.trr"))
    if comm.rank == 0:
        write_trr(crashed, crashed_steps, seed=1, velocity_every=velocity_every)
        write_trr(restart, restart_steps, seed=2, velocity_every=velocity_every)
    comm.Barrier()
    return crashed, restart


@pytest.mark.mpi
@pytest.mark.parametrize("compression,restart_step", [("none", 50), ("gzip", 50), ("zstd", 40), ("none", 40)])
def test_append_later_replaces_the_files_frames_from_the_restart_on(comm, shared_tmp, compression, restart_step):
    """The file holds steps 0-90 (velocities every 2nd frame: two element groups, chunks of 4
    frames); the restart starts at step 50 (inside a chunk) or 40 (on a chunk boundary): the
    file keeps its frames before it, then grows by the restart's frames on 1-3 ranks."""
    crashed, restart = restart_pair(comm, shared_tmp, range(0, 100, 10), range(restart_step, 170, 10), velocity_every=2)
    target = os.path.join(shared_tmp, "grown.h5md")
    convert(crashed, target, comm=comm, progress=False, chunk_frames=4, compression=compression)
    with pytest.raises(OverlapError, match="--on-overlap later replaces the file's frames from that step on"):
        append(restart, target, comm=comm, progress=False)
    summary = append(restart, target, comm=comm, progress=False, on_overlap="later")
    kept = restart_step // 10
    assert summary["n_frames_before"] == [kept, (kept + 1) // 2]
    added = (170 - restart_step) // 10
    assert summary["n_frames_added"] == [added, (added + 1) // 2]
    assert any(f"last {10 - kept} frame(s) (from step {restart_step} on)" in note for note in summary["notes"])
    reference = os.path.join(shared_tmp, "reference.h5md")
    convert([crashed, restart], reference, comm=comm, progress=False, chunk_frames=4, compression=compression,
            on_overlap="later")
    if comm.rank == 0:
        with h5py.File(target, "r") as grown, h5py.File(reference, "r") as whole:
            np.testing.assert_array_equal(grown[f"{TRAJ}/position/step"][()],
                                          np.r_[0:restart_step:10, restart_step:170:10])
            np.testing.assert_array_equal(grown[f"{TRAJ}/velocity/step"][()],
                                          np.r_[0:restart_step:20, restart_step:170:20])
            for element in ("position", "velocity"):
                np.testing.assert_array_equal(grown[f"{TRAJ}/{element}/value"][()], whole[f"{TRAJ}/{element}/value"][()])
                np.testing.assert_array_equal(grown[f"{TRAJ}/{element}/time"][()], whole[f"{TRAJ}/{element}/time"][()])
        frames = source_frames(crashed, "TRR")[:kept] + source_frames(restart, "TRR")
        with h5py.File(target, "r") as grown:
            np.testing.assert_array_equal(grown[f"{TRAJ}/position/step"][()], [frame["step"] for frame in frames])
            np.testing.assert_allclose(grown[f"{TRAJ}/position/value"][()] * 10,
                                       [frame["positions"] for frame in frames], rtol=1e-6)
            np.testing.assert_allclose(grown[f"{TRAJ}/velocity/value"][()] * 10,
                                       [frame["velocities"] for frame in frames if "velocities" in frame], rtol=1e-6)
    comm.Barrier()


@pytest.mark.mpi
def test_append_later_of_a_restart_before_the_files_first_step(comm, shared_tmp):
    old, restart = restart_pair(comm, shared_tmp, range(100, 140, 10), range(50, 80, 10))
    target = os.path.join(shared_tmp, "grown.h5md")
    convert(old, target, comm=comm, progress=False, chunk_frames=3)
    summary = append(restart, target, comm=comm, progress=False, on_overlap="later")
    assert summary["n_frames_before"] == [0] and summary["n_frames_added"] == [3]
    if comm.rank == 0:
        compare_output(target, source_frames(restart, "TRR"))
    comm.Barrier()


@pytest.mark.mpi
def test_split_later_lists_the_superseded_frames(comm, shared_tmp):
    import json

    crashed, restart = restart_pair(comm, shared_tmp, range(0, 80, 10), range(50, 100, 10))
    outdir = os.path.join(shared_tmp, "parts")
    split([crashed, restart], outdir, 3, comm=comm, on_overlap="later", progress=False)
    if comm.rank == 0:
        with open(os.path.join(outdir, "manifest.json")) as handle:
            manifest = json.load(handle)
        dropped = [entry for entry in manifest["dropped"] if "later" in entry["reason"]]
        assert [(entry["frames"], entry["n_frames"]) for entry in dropped] == [([5, 8], 3)], manifest["dropped"]
        assert os.path.basename(dropped[0]["path"]) == "a.trr"
        parts = sorted(part["path"] for part in manifest["parts"])
        steps = np.concatenate([[frame["step"] for frame in source_frames(os.path.join(outdir, part), "TRR")]
                                for part in parts])
        np.testing.assert_array_equal(steps, np.r_[0:50:10, 50:100:10])
    comm.Barrier()
