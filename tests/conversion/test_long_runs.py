"""Runs past step 2**31 (4.3 us at 2 fs): XTC and TRR headers store the step in 32 bits, and
GROMACS (checked with 2022.5: ``init-step = 2147483640``) writes it modulo 2**32, so step
2147483648 is stored as -2147483648. convert refused such a file (``frame 4 has step
-2147483648 after step 2147483646: steps must increase``); now the steps are restored, said
in a note, and segments, overlaps and genuine decreases are handled as before.
"""

import os

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5mdtool import compare_with_source, convert, split
from h5mdtool.parallel.errors import InputError, OverlapError
from h5mdtool.formats import scan
from h5mdtool.formats.base import STEP_MODULUS, unwrap_steps
from h5mdtool.check.validate import validate_manifest

from conftest import run_h5mdtool
from formats_oracle import compare_output, source_frames

TRAJ = "particles/trajectory"


def stored(steps):
    """What a 32-bit signed header field holds for *steps*."""
    return ((np.asarray(steps, np.int64) + 2**31) % STEP_MODULUS) - 2**31


true_steps = st.tuples(
    st.integers(0, STEP_MODULUS - 1),
    st.lists(st.integers(1, 2**31 - 1), min_size=0, max_size=40),
).map(lambda pair: np.cumsum([pair[0], *pair[1]]).astype(np.int64))


@settings(max_examples=300, deadline=None)
@given(true_steps)
def test_unwrap_restores_steps_that_start_below_2_to_the_32(steps):
    np.testing.assert_array_equal(unwrap_steps(stored(steps)), steps)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**62), st.lists(st.integers(1, 2**31 - 1), min_size=2, max_size=40), st.data())
def test_unwrap_continues_a_previous_segment_at_any_step(first, increments, data):
    steps = np.cumsum([first, *increments]).astype(np.int64)
    cut = data.draw(st.integers(1, len(steps) - 1))
    np.testing.assert_array_equal(unwrap_steps(stored(steps[cut:]), near=steps[cut - 1]), steps[cut:])


def test_unwrap_keeps_overlaps_and_small_decreases():
    # a restart 50 steps back, across the wrap: still 50 steps back, so still an overlap
    np.testing.assert_array_equal(unwrap_steps(stored([2**31 + 10]), near=2**31 + 60), [2**31 + 10])
    np.testing.assert_array_equal(unwrap_steps([100, 50]), [100, 50])
    np.testing.assert_array_equal(unwrap_steps([5, 10, 20]), [5, 10, 20])


def _write(path, fmt, steps, positions):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    box = np.diag([6.0, 6.0, 6.0]).astype(np.float32)
    if fmt == "xtc":
        with XTCFile(path, "w") as handle:
            for xyz, step in zip(positions, stored(steps)):
                handle.write(xyz, box, int(step), float(step % 100000))
    else:
        with TRRFile(path, "w") as handle:
            for xyz, step in zip(positions, stored(steps)):
                handle.write(xyz, xyz * 0.5, None, box, int(step), float(step % 100000), 0.0, len(xyz))


@pytest.fixture(scope="module")
def positions():
    return (np.random.default_rng(7).random((12, 30, 3)) * 6).astype(np.float32)


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["xtc", "trr"])
def test_convert_restores_steps_past_2_to_the_31(comm, shared_tmp, fmt, positions):
    steps = 2**31 - 6 + 2 * np.arange(12)  # frames 3... are stored negative
    path = os.path.join(shared_tmp, f"md.{fmt}")
    if comm.rank == 0:
        _write(path, fmt, steps, positions)
    comm.Barrier()
    output = os.path.join(shared_tmp, "out.h5md")
    summary = convert(path, output, comm=comm, progress=False, compression="gzip", chunk_frames=5)
    assert summary["n_frames"] == 12
    assert any("9 frame(s) store their step modulo 2^32" in note and "written as steps 2147483648 to 2147483664" in note
               for note in summary["notes"]), summary["notes"]
    if comm.rank == 0:
        frames = source_frames(path, fmt.upper())
        for frame, step in zip(frames, steps):
            frame["step"] = int(step)  # MDAnalysis gives the stored (wrapped) steps
        compare_output(output, frames)
    report = compare_with_source([output], [path], comm=comm, progress=False)
    assert report["n_differing"] == 0 and report["compared_frames"] == 12
    comm.Barrier()


@pytest.mark.mpi
def test_segments_and_parts_across_the_wrap_and_past_2_to_the_32(comm, shared_tmp, positions):
    """Segments cut at the 2**31 and 2**32 boundaries, the second starting on a positive stored
    step that only the previous segment places (2**32 + 4); split parts converted back."""
    steps = 2**32 - 14 + 3 * np.arange(12)
    directory = os.path.join(shared_tmp, "segments")
    paths = [os.path.join(directory, f"s{n}.xtc") for n in range(2)]
    if comm.rank == 0:
        os.makedirs(directory)
        _write(paths[0], "xtc", steps[:6], positions[:6])
        _write(paths[1], "xtc", steps[6:], positions[6:])
    comm.Barrier()
    assert stored(steps[6]) > 0 and stored(steps[0]) < 0
    whole = os.path.join(shared_tmp, "whole.h5md")
    convert(paths, whole, comm=comm, progress=False)
    with h5py.File(whole, "r") as handle:
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/step"][()], steps)
    parts = os.path.join(shared_tmp, "parts")
    split(paths, parts, 3, comm=comm, progress=False)
    comm.Barrier()
    if comm.rank == 0:  # the manifest's steps are the parts' (MAN015 said "holds steps 10-19")
        assert not validate_manifest(os.path.join(parts, "manifest.json"))[0].errors
    part_paths = sorted(os.path.join(parts, name) for name in os.listdir(parts) if name.endswith(".xtc"))
    report = compare_with_source(part_paths, paths, comm=comm, progress=False)
    assert report["n_differing"] == 0 and report["compared_frames"] == 12, report["differing"]
    again = os.path.join(shared_tmp, "again.h5md")
    convert(part_paths, again, comm=comm, progress=False)
    with h5py.File(again, "r") as handle:
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/step"][()], steps)
    comm.Barrier()


def test_an_overlap_across_the_wrap_is_still_an_overlap(tmp_path, positions):
    """A restart 6 steps back whose steps are stored wrapped: refused, or its first copies kept."""
    first = 2**31 - 6 + 2 * np.arange(6)  # up to 2**31 + 4
    second = 2**31 - 2 + 2 * np.arange(6)  # restarts at 2**31 - 2 (stored positive, then negative)
    paths = [str(tmp_path / "a.xtc"), str(tmp_path / "b.xtc")]
    _write(paths[0], "xtc", first, positions[:6])
    _write(paths[1], "xtc", second, positions[6:])
    with pytest.raises(OverlapError, match="starts at step 2147483646 but .* already reached step 2147483652"):
        scan(paths)
    index = scan(paths, on_overlap="drop")
    kept = np.concatenate([segment.step[segment.skip:] for segment in index.segments])
    np.testing.assert_array_equal(kept, np.concatenate([first, second[4:]]))


def test_steps_that_truly_decrease_are_still_refused(tmp_path, positions):
    path = str(tmp_path / "back.xtc")
    _write(path, "xtc", [100, 200, 150], positions[:3])
    with pytest.raises(InputError, match="frame 2 has step 150 after step 200"):
        convert(path, str(tmp_path / "out.h5md"), progress=False)
    assert os.listdir(tmp_path) == ["back.xtc"]


def test_the_note_is_printed(tmp_path, positions):
    path = str(tmp_path / "md.trr")
    _write(path, "trr", 2**31 - 2 + np.arange(4), positions[:4])
    result = run_h5mdtool(["convert", path, "-o", str(tmp_path / "out.h5md"), "--no-progress"])
    assert result.returncode == 0, result.stderr
    assert "md.trr: 2 frame(s) store their step modulo 2^32 (the TRR header holds 32 bits): written as steps " \
           "2147483648 to 2147483649" in result.stdout + result.stderr


@pytest.mark.mpi
def test_append_continues_the_steps_of_the_file(comm, shared_tmp, positions):
    """The new segment starts at 2**32 + 2: stored as 2, placed after the file's last step."""
    steps = 2**32 - 10 + 3 * np.arange(12)
    paths = [os.path.join(shared_tmp, f"s{n}.xtc") for n in range(2)]
    if comm.rank == 0:
        _write(paths[0], "xtc", steps[:4], positions[:4])
        _write(paths[1], "xtc", steps[4:], positions[4:])
    comm.Barrier()
    from h5mdtool.conversion.append import append

    target = os.path.join(shared_tmp, "grown.h5md")
    convert(paths[0], target, comm=comm, progress=False, compression="zstd", chunk_frames=3)
    append(paths[1], target, comm=comm, progress=False)
    with h5py.File(target, "r") as handle:
        np.testing.assert_array_equal(handle[f"{TRAJ}/position/step"][()], steps)
    comm.Barrier()


def test_a_negative_step_right_after_small_ones_is_not_taken_for_a_wrap(tmp_path, positions):
    """Stored -5 after step 100 is nearer to 100 than 2**32 - 5 is: an overlap, as before."""
    paths = [str(tmp_path / "a.xtc"), str(tmp_path / "b.xtc")]
    _write(paths[0], "xtc", [90, 100], positions[:2])
    _write(paths[1], "xtc", [-5 + STEP_MODULUS, 5 + STEP_MODULUS], positions[2:4])  # stored -5, 5
    with pytest.raises(OverlapError, match="starts at step -5 but .* already reached step 100"):
        scan(paths)
    index = scan(paths, on_overlap="drop")
    assert "stored_step" not in index.segments[1].details
    np.testing.assert_array_equal(index.segments[1].step, [-5, 5])
    assert index.segments[1].skip == 2
