"""XTC and TRR frame offsets found by all ranks together equal the serial scan's exactly.

Files are written with MDAnalysis's libmdaxdr writers (frames of varied sizes, so the byte
ranges of the ranks cut frames at varied places), then possibly damaged (a byte changed,
the file cut short). The oracle is the serial scan (h5mdtool's, every header checked),
itself checked against MDAnalysis's own offsets on undamaged files: the collective scan
must give the same segment, or the same error word for word. Serial tests simulate 1 to 8
ranks in one process (:func:`~h5mdtool.formats.xdrscan.walk_piece` per range, then the
join); the mpi-marked tests run the real collective on 2 and 3 ranks.
"""

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5mdtool.formats import scan_segment
from h5mdtool.formats.registry import REGISTRY
from h5mdtool.formats.xdrscan import byte_ranges, chained, compact, expand, join_pieces, summary, walk_piece
from h5mdtool.parallel.errors import InputError

#: A float32 whose bits are the big-endian int32 *value* (coordinates that mimic header words).
def _word(value):
    return np.frombuffer(struct.pack(">i", value), ">f4")[0]


@st.composite
def trajectories(draw):
    """(kind, n_atoms, frames): frames of positions (and for TRR which sections it holds)."""
    kind = draw(st.sampled_from(["XTC", "TRR"]))
    n_atoms = draw(st.sampled_from([1, 3, 9, 10, 40, 150]))
    n_frames = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n_frames):
        spread = draw(st.sampled_from([0.01, 1.0, 50.0]))  # compressed sizes differ with the spread
        xyz = (rng.random((n_atoms, 3)) * spread).astype(np.float32)
        if draw(st.booleans()):  # a copy of a header's first words among the coordinates
            magic = 1995 if kind == "XTC" else 1993
            words = [magic, n_atoms] if kind == "XTC" else [magic, 13, 12]
            flat = xyz.reshape(-1)
            at = draw(st.integers(0, max(0, len(flat) - len(words))))
            for k, value in enumerate(words[: len(flat) - at]):
                flat[at + k] = _word(value)
        sections = draw(st.sampled_from(["x", "xv", "xvf", "v"])) if kind == "TRR" else "x"
        frames.append((xyz, sections))
    return kind, n_atoms, frames


def write(path, kind, n_atoms, frames, embed_frames=False):
    """Write *frames* with libmdaxdr; with *embed_frames* (TRR), the velocities and forces of
    each frame hold the bytes of two frames of the same atom count (false starts that pass
    the search's two-frame check)."""
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    box = np.diag([5.0, 6.0, 7.0]).astype(np.float32)
    if kind == "XTC":
        with XTCFile(path, "w") as handle:
            for number, (xyz, _) in enumerate(frames):
                handle.write(xyz, box, 10 * number, 0.5 * number)
        return
    fake = _trr_frame_bytes(n_atoms, box) * 2 if embed_frames else b""
    with TRRFile(path, "w") as handle:
        for number, (xyz, sections) in enumerate(frames):
            payload = xyz
            if fake and 24 * n_atoms >= len(fake):
                payload = np.zeros(6 * n_atoms, np.float32)
                payload[: len(fake) // 4] = np.frombuffer(fake, ">f4")
                sections = "xvf"
            velocity = payload[: 3 * n_atoms].reshape(n_atoms, 3) if payload is not xyz else xyz
            forces = payload[3 * n_atoms:].reshape(n_atoms, 3) if payload is not xyz else xyz
            handle.write(xyz if "x" in sections else None, velocity if "v" in sections else None,
                         forces if "f" in sections else None, box, 10 * number, 0.5 * number, 0.0, n_atoms)


def _trr_frame_bytes(n_atoms, box):
    """The bytes of a single-precision TRR frame of *n_atoms* atoms that holds no section
    (no box, positions, velocities or forces): a header alone, 84 bytes, which the walk accepts."""
    sizes = [0] * 10 + [n_atoms, 7, 0]
    return struct.pack(">iii12s13iff", 1993, 13, 12, b"GMX_trn_file", *sizes, 1.5, 0.0)


def damage(path, change):
    """Apply *change*: None, ("byte", fraction, value) or ("cut", fraction)."""
    if change is None:
        return
    size = os.path.getsize(path)
    if change[0] == "cut":
        os.truncate(path, max(1, int(size * change[1])))
        return
    with open(path, "r+b") as handle:
        handle.seek(min(size - 1, int(size * change[1])))
        handle.write(bytes([change[2]]))


changes = st.one_of(
    st.none(),
    st.tuples(st.just("byte"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.floats(0.05, 0.999)),
)


def outcome(function):
    """(segment, None) or (None, the error's message)."""
    try:
        return function(), None
    except InputError as error:
        return None, str(error)


def simulated(path, n_ranks, on_truncated, chain=None):
    """The collective scan of *path* as *n_ranks* ranks would run it, in one process: the
    pieces chained from their summaries and compact forms when they chain (as the ranks do),
    else joined themselves; *chain* (a list) records which happened."""
    cls = REGISTRY[os.path.splitext(path)[1][1:].upper()]
    stat = os.stat(path)
    ranges = byte_ranges(stat.st_size, n_ranks)
    pieces = [walk_piece(cls.walker, path, stat.st_size, byte_range, rank == 0)
              for rank, byte_range in enumerate(ranges)]
    packed = [compact(piece) for piece in pieces]
    summaries = [summary(piece, header, len(payload)) for piece, (header, payload) in zip(pieces, packed)]
    taken = chained(ranges, summaries, stat.st_size)
    if chain is not None:
        chain.append(taken is not None)
    if taken is None:
        return cls.segment(path, stat, *join_pieces(cls, path, stat, on_truncated, ranges, pieces))
    payloads = [payload if t else b"" for (_, payload), t in zip(packed, taken)]
    return cls.segment(path, stat, *expand(cls.walker, path, summaries, payloads, taken), None)


def assert_same_segment(segment, expected):
    assert segment.n_frames == expected.n_frames and segment.n_atoms == expected.n_atoms
    np.testing.assert_array_equal(segment.offsets, expected.offsets)
    np.testing.assert_array_equal(segment.step, expected.step)
    np.testing.assert_array_equal(segment.time, expected.time)
    assert segment.fields.keys() == expected.fields.keys()
    for name in expected.fields:
        np.testing.assert_array_equal(segment.fields[name], expected.fields[name])
    assert segment.details.keys() == expected.details.keys()
    for name, value in expected.details.items():
        if value is None:
            assert segment.details[name] is None
        else:
            np.testing.assert_array_equal(segment.details[name], value)
    assert (segment.size, segment.mtime, segment.dtype, segment.dropped) == \
        (expected.size, expected.mtime, expected.dtype, expected.dropped)


def mdanalysis_offsets(path, kind):
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    with (XTCFile if kind == "XTC" else TRRFile)(path) as handle:
        return np.asarray(handle.offsets, np.int64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trajectory=trajectories(), change=changes, on_truncated=st.sampled_from(["error", "drop"]),
       embed=st.booleans())
def test_simulated_ranks_equal_the_serial_scan(tmp_path, trajectory, change, on_truncated, embed):
    kind, n_atoms, frames = trajectory
    path = str(tmp_path / f"t.{kind.lower()}")
    write(path, kind, n_atoms, frames, embed_frames=embed)
    if change is None:  # the oracle's oracle: MDAnalysis finds the same frames
        serial = scan_segment(path)
        np.testing.assert_array_equal(serial.offsets[:-1], mdanalysis_offsets(path, kind))
    damage(path, change)
    expected, message = outcome(lambda: scan_segment(path, on_truncated=on_truncated))
    for n_ranks in range(1, 9):
        segment, error = outcome(lambda: simulated(path, n_ranks, on_truncated))
        assert error == message, n_ranks
        if expected is not None:
            assert_same_segment(segment, expected)


@pytest.mark.parametrize("kind", ["XTC", "TRR"])
def test_a_sound_files_pieces_chain_from_their_summaries(tmp_path, adk_frames, kind):
    """Frames of a real protein, boxes changing or not: at every rank count the pieces chain
    from their summaries alone and are sent compactly (a few bytes a frame), and the frames
    unpacked are the serial scan's."""
    for npt in (False, True):
        path = str(tmp_path / f"adk-{npt}.{kind.lower()}")
        frames = [(xyz, "xv" if kind == "TRR" else "x") for xyz in adk_frames[:40]]
        write(path, kind, len(adk_frames[0]), frames)
        if npt:  # a box that changes every frame, as at constant pressure
            _vary_boxes(path, kind)
        serial = scan_segment(path)
        for n_ranks in range(1, 9):
            chain = []
            assert_same_segment(simulated(path, n_ranks, "error", chain), serial)
            assert chain == [True], n_ranks
        stat = os.stat(path)
        piece = walk_piece(REGISTRY[kind].walker, path, stat.st_size, (0, stat.st_size), True)
        header, payload = compact(piece)
        per_frame = len(payload) / len(piece["offsets"])
        assert per_frame <= (4 + 4 + 4 + (36 if npt else 0)) + (8 if kind == "TRR" else 0), per_frame


def _vary_boxes(path, kind):
    """Rewrite *path* with a different box in every frame (the positions kept)."""
    import MDAnalysis as mda
    from MDAnalysis.lib.formats.libmdaxdr import TRRFile, XTCFile

    frames = []
    with (XTCFile if kind == "XTC" else TRRFile)(path) as handle:
        for frame in handle:
            frames.append((frame.x.copy(), getattr(frame, "v", None)))
    cls = XTCFile if kind == "XTC" else TRRFile
    with cls(path, "w") as handle:
        for number, (x, v) in enumerate(frames):
            box = np.diag([5.0 + 0.01 * number, 6.0, 7.0 - 0.003 * number]).astype(np.float32)
            if kind == "XTC":
                handle.write(x, box, 10 * number, 0.5 * number)
            else:
                handle.write(x, v, None, box, 10 * number, 0.5 * number, 0.0, len(x))


def test_a_false_start_that_passes_the_check_is_walked_over(tmp_path):
    """Velocities and forces holding two whole frames' bytes: a rank whose range starts
    before them takes them for frames, and the join walks that range again."""
    path = str(tmp_path / "fake.trr")
    frames = [(np.full((60, 3), k, np.float32), "xvf") for k in range(6)]
    write(path, "TRR", 60, frames, embed_frames=True)
    stat = os.stat(path)
    serial = scan_segment(path)
    cls = REGISTRY["TRR"]
    fooled = 0
    for n_ranks in range(2, 40):
        ranges = byte_ranges(stat.st_size, n_ranks)
        pieces = [walk_piece(cls.walker, path, stat.st_size, r, rank == 0) for rank, r in enumerate(ranges)]
        starts = set(serial.offsets.tolist())
        fooled += sum(1 for p in pieces if p["start"] is not None and p["start"] not in starts)
        assert_same_segment(cls.segment(path, stat, *join_pieces(cls, path, stat, "error", ranges, pieces)), serial)
    assert fooled > 0  # the case under test happened


@pytest.mark.mpi
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(trajectory=trajectories(), change=changes, on_truncated=st.sampled_from(["error", "drop"]))
def test_collective_scan_equals_the_serial_scan(comm, shared_tmp, trajectory, change, on_truncated):
    """Every rank draws the same examples (derandomized); rank 0 writes, all scan together.
    Each rank's verdict is gathered, so a failure fails every rank at once (and hypothesis
    shrinks in step)."""
    kind, n_atoms, frames = trajectory
    path = os.path.join(shared_tmp, f"t.{kind.lower()}")
    if comm.rank == 0:
        write(path, kind, n_atoms, frames)
        damage(path, change)
    comm.Barrier()
    expected, message = outcome(lambda: scan_segment(path, on_truncated=on_truncated))
    segment, error = outcome(lambda: scan_segment(path, on_truncated=on_truncated, comm=comm))
    verdict = None
    try:
        assert error == message
        if expected is not None:
            assert_same_segment(segment, expected)
    except AssertionError as failure:
        verdict = f"rank {comm.rank}: {failure}"
    verdicts = [v for v in comm.allgather(verdict) if v]
    comm.Barrier()
    if comm.rank == 0:
        os.remove(path)
    assert not verdicts, verdicts


@pytest.mark.mpi
def test_collective_scan_of_a_damaged_file_raises_together(comm, shared_tmp, adk_frames):
    """A damaged header in the last rank's range: every rank raises the serial scan's error,
    flagged collective, none hangs."""
    path = os.path.join(shared_tmp, "damaged.xtc")
    if comm.rank == 0:
        write(path, "XTC", 3341, [(xyz, "x") for xyz in adk_frames[:30]])
        offsets = scan_segment(path).offsets
        with open(path, "r+b") as handle:
            handle.seek(int(offsets[27]))
            handle.write(struct.pack(">i", 1234))
    comm.Barrier()
    with pytest.raises(InputError) as serial:
        scan_segment(path)
    with pytest.raises(InputError) as collective:
        scan_segment(path, comm=comm)
    assert str(collective.value) == str(serial.value)
    assert "frame 27 at byte" in str(serial.value) and "magic number 1234" in str(serial.value)
    assert collective.value.collective == (comm.size > 1)
