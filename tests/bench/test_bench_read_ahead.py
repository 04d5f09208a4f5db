"""Reading ahead while rank 0 plans (h5mdtool.bench.read_ahead): the other ranks read whole
frames of their share meanwhile, rank 0 sheds the end of its share to them, the serial part
is only what nobody overlapped, and the results stay those of one rank."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchcheck import check_report, every_report_adds_up  # noqa: F401 - autouse fixture
from h5mdtool import bench_dihedrals, bench_rmsd, convert, read_manifest, split
from h5mdtool.bench import frames as frames_module
from h5mdtool.bench.analysis import AnalysisOptions
from h5mdtool.bench.read_ahead import ReadAhead, planned_share, read_ahead_budget
from h5mdtool.parallel.errors import UsageError
from h5mdtool.parallel.mpi import SerialComm
from h5mdtool.parallel.partition import partition_frames, shed_root_frames


def _needs_ranks(comm):
    if comm.size == 1:
        pytest.skip("needs several ranks (runs under mpirun -n 2 and -n 3)")


def _serial(benchmark, *args, **kwargs):
    """The same benchmark on this rank alone (the oracle of the parallel run)."""
    return benchmark(*args, comm=SerialComm(), read_ahead_mb=0, **kwargs)


def assert_serial_part_is_the_least_wait(report):
    """The run's serial part is the least time another rank waited idle for rank 0's plan,
    and never more than rank 0's setup. A rank that read all its share ahead waits about as
    long as the setup lasts, and its wait ends after the setup by the barrier's latency:
    on 3 ranks sharing 2 cores that latency once exceeded the rank's reading ahead (by
    0.6 ms), and the serial part was rank 0's setup itself."""
    root, others = report["ranks"][0], report["ranks"][1:]
    least = min(r["t_plan_wait"] for r in others)
    assert report["t_serial"] == min(root["t_serial"], least)
    assert report["t_serial"] == pytest.approx(least, abs=0.05)


def _values(result):
    return result["rmsd"] if "rmsd" in result else result["features"]


@pytest.mark.mpi
@pytest.mark.parametrize("benchmark", [bench_rmsd, bench_dihedrals], ids=["rmsd", "dihedrals"])
def test_others_read_their_share_while_rank_0_plans(comm, adk, monkeypatch, benchmark):
    """AdK's 98 frames: the others read all of their share during rank 0's 3 s setup, then
    wait; the serial part is that wait (the least of the others'), not rank 0's setup; rank 0
    hands them the end of its share and the values equal one rank's."""
    _needs_ranks(comm)
    setup = 3.0
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", f"bench-setup:0:{setup}")
    comm.Barrier()
    result = benchmark(adk[1], adk[0], comm=comm)
    expected = _serial(benchmark, adk[1], adk[0]) if comm.rank == 0 else None
    if comm.rank != 0:
        return
    np.testing.assert_array_equal(_values(result), _values(expected))
    report = result["report"]
    check_report(report)
    root, others = report["ranks"][0], report["ranks"][1:]
    partition = report["partition"]
    planned = partition["planned_frames_per_rank"]
    assert root["t_serial"] >= setup and root["n_read_ahead"] == 0 and "t_plan_wait" not in root
    for record in others:
        assert record["n_read_ahead"] == planned[record["rank"]]  # the whole share: a small trajectory
        assert record["t_read_ahead"] > 0 and record["t_io"] >= record["t_read_ahead"]
        assert record["t_init_top"] < 0.05 * setup
        # reading ahead is their work, the rest of rank 0's setup their wait
        assert record["t_plan_wait"] >= setup - record["t_init_traj"] - record["t_io"] - 0.2 * setup
        assert record["t_wait"] >= record["t_plan_wait"]
    assert_serial_part_is_the_least_wait(report)
    assert sum(partition["frames_per_rank"]) == sum(planned) == report["n_analysed"]
    assert partition["frames_per_rank"][0] < planned[0]  # rank 0 gave frames away
    assert all(r["read_ahead_saved"] > 0 for r in others)
    assert partition["read_ahead_saved_frames"] == pytest.approx(sum(r["read_ahead_saved"] for r in others), abs=0.1)
    assert [r["n_frames"] for r in report["ranks"]] == partition["frames_per_rank"]


@pytest.mark.mpi
def test_rank_0_sheds_what_the_others_read_ahead(comm, adk, monkeypatch):
    """Others slowed to 0.6 s per block of 3 frames read part of their share during rank 0's
    2 s setup, never waiting idle for it; rank 0 keeps fewer frames by about what they read
    (less their compute), and the RMSDs equal one rank's."""
    _needs_ranks(comm)
    slow = ",".join(f"rmsd-block:{rank}:0.6" for rank in range(1, comm.size))
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", f"bench-setup:0:2.0,{slow}")
    comm.Barrier()
    result = bench_rmsd(adk[1], adk[0], comm=comm, block_frames=3)
    expected = _serial(bench_rmsd, adk[1], adk[0]) if comm.rank == 0 else None
    if comm.rank != 0:
        return
    np.testing.assert_array_equal(result["rmsd"], expected["rmsd"])
    report = result["report"]
    partition = report["partition"]
    planned, final = partition["planned_frames_per_rank"], partition["frames_per_rank"]
    for record in report["ranks"][1:]:
        assert 0 < record["n_read_ahead"] < planned[record["rank"]]
        assert record["t_plan_wait"] < 0.7  # reading, not waiting, until rank 0 was done
    assert report["t_serial"] < 0.7 < 2.0 <= report["ranks"][0]["t_serial"]
    given_away = planned[0] - final[0]
    read = [r["n_read_ahead"] for r in report["ranks"][1:]]
    # rank 0 sheds (N - 1) / N of the others' mean lead (their compute is a few microseconds)
    assert given_away == pytest.approx(np.mean(read) * (comm.size - 1) / comm.size, abs=2)
    assert sum(final) == sum(planned)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["H5MD", "H5MD-chunks", "DCD"])
def test_strided_and_chunked_frames_read_ahead_equal_one_rank(comm, shared_tmp, adk, monkeypatch, kind):
    """Regression: frames read ahead one by one (a --step selection) were views of one reused
    buffer, every frame of a block the last one read. Chunks of 7 frames: rank 0 sheds whole
    chunks."""
    _needs_ranks(comm)
    path = adk[1]
    if kind.startswith("H5MD"):
        path = os.path.join(shared_tmp, f"adk-{kind}.h5md")
        convert(adk[1], path, comm=comm, progress=False, compression="none",
                chunk_frames=7 if kind == "H5MD-chunks" else None)
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "bench-setup:0:0.5")
    for options in ({"step": 3}, {"start": 5, "stop": 90}):
        comm.Barrier()
        result = bench_rmsd(path, adk[0], comm=comm, block_frames=4, **options)
        expected = _serial(bench_rmsd, path, adk[0], **options) if comm.rank == 0 else None
        if comm.rank != 0:
            continue
        np.testing.assert_array_equal(result["rmsd"], expected["rmsd"])
        records = result["report"]["ranks"]
        assert all(r["n_read_ahead"] > 0 for r in records[1:]), records
        if kind == "H5MD-chunks":  # every rank's frames are whole chunks but at the selection's ends
            frames = result["rmsd"][:, 0].astype(int)
            for record in records:
                if record["n_frames"]:
                    first, last = record["first_frame"], record["last_frame"]
                    assert first == frames[0] or first % 7 == 0 or record["rank"] != 0
                    assert last == frames[-1] or (last + 1) % 7 == 0 or record["rank"] != 0


@pytest.mark.mpi
@pytest.mark.parametrize("form", ["same", "h5md"])
def test_split_parts_read_ahead_and_rank_0s_end_goes_to_one_rank(comm, shared_tmp, adk, monkeypatch, form):
    """A split trajectory reads ahead too: each rank in its own parts during rank 0's setup.
    Rank 0's end (less than two pieces of PART_PIECE_FRAMES) goes to rank 1 alone, the only
    rank besides rank 0 to open rank 0's part; the values equal one rank's."""
    _needs_ranks(comm)
    outdir = os.path.join(shared_tmp, f"parts-{form}")
    split(adk[1], outdir, 2 * comm.size, comm=comm, format=form, progress=False)
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "bench-setup:0:1.0")
    scanned = []
    original = frames_module.scan_segment
    monkeypatch.setattr(frames_module, "scan_segment", lambda path, **kw: scanned.append(path) or original(path, **kw))
    comm.Barrier()
    result = bench_rmsd(outdir, adk[0], comm=comm, block_frames=4)
    # regression: the parts a rank read ahead (rank 0: its reference's part) were scanned again
    assert len(scanned) == len(set(scanned)) > 0, (comm.rank, scanned)
    monkeypatch.undo()
    expected = _serial(bench_rmsd, outdir, adk[0]) if comm.rank == 0 else None
    if comm.rank != 0:
        return
    np.testing.assert_array_equal(result["rmsd"], expected["rmsd"])
    report = result["report"]
    partition = report["partition"]
    assert partition["scheme"] == "parts" and partition["shared_units"] == 0
    records = report["ranks"]
    planned, final = partition["planned_frames_per_rank"], partition["frames_per_rank"]
    assert all(r["n_read_ahead"] == planned[r["rank"]] for r in records[1:])  # all of it: 98 frames
    assert_serial_part_is_the_least_wait(report)
    assert records[0]["t_serial"] >= 1.0
    planned, final = partition["planned_frames_per_rank"], partition["frames_per_rank"]
    assert final[0] < planned[0] and final[1] > planned[1] and final[2:] == planned[2:]
    parts = [os.path.basename(part.path) for part in read_manifest(outdir).parts]
    root_parts = set(parts[:2])  # 2 parts per rank
    assert set(records[0]["opened"]) <= root_parts
    taken = [r["rank"] for r in records[1:] if root_parts & set(r["opened"])]
    assert taken == [1]  # rank 0's end: its last part, besides rank 1's own two
    assert set(records[1]["opened"]) == set(parts[2:4]) | {parts[1]}


@pytest.mark.mpi
def test_no_read_ahead_when_frames_are_chosen_by_time_or_budget_is_zero(comm, adk):
    _needs_ranks(comm)
    for kwargs in ({"begin": 10.0}, {"read_ahead_mb": 0}):
        result = bench_rmsd(adk[1], adk[0], comm=comm, **kwargs)
        if comm.rank == 0:
            report = result["report"]
            assert all(r["n_read_ahead"] == 0 for r in report["ranks"])
            assert report["partition"]["frames_per_rank"] == report["partition"]["planned_frames_per_rank"]


def test_no_read_ahead_on_one_rank(adk):
    result = bench_rmsd(adk[1], adk[0], comm=SerialComm())
    report = result["report"]
    assert report["ranks"][0]["n_read_ahead"] == 0 and "read_ahead_saved_frames" not in report["partition"]
    assert report["t_serial"] == pytest.approx(report["ranks"][0]["t_serial"])


def test_budget():
    assert read_ahead_budget(SerialComm()) == 0
    assert read_ahead_budget(SerialComm(), 3) == 3 << 20
    with pytest.raises(UsageError, match="read-ahead-mb"):
        bench_rmsd("x.xtc", "x.psf", comm=SerialComm(), read_ahead_mb=-1)


def test_planned_share_is_the_partition_of_the_plan(adk):
    from h5mdtool.bench.inputs import inspect_input

    info = inspect_input([adk[1]])
    for start, stop, step in ((None, None, None), (5, 90, 3), (97, None, None), (200, None, None)):
        options = AnalysisOptions(start=start, stop=stop, step=step)
        frames = np.arange(info.n_frames)[slice(start, stop, step)]
        for n_ranks in (2, 3, 7):
            bounds = partition_frames(frames, n_ranks).bounds
            for rank in range(n_ranks):
                share = planned_share(info, options, n_ranks, rank, 1)
                np.testing.assert_array_equal(share, frames[slice(*bounds[rank])])
    assert planned_share(info, AnalysisOptions(begin=1.0), 2, 1, 1) is None
    assert planned_share(info, AnalysisOptions(step=0), 2, 1, 1) is None  # rank 0's plan refuses it


@settings(max_examples=300, deadline=None)
@given(n_frames=st.integers(0, 400), step=st.integers(1, 4), n_ranks=st.integers(1, 6),
       chunk=st.sampled_from([1, 1, 3, 26]), data=st.data())
def test_shedding_keeps_every_frame_once_on_chunk_boundaries(n_frames, step, n_ranks, chunk, data):
    selected = np.arange(0, n_frames, step)
    bounds = partition_frames(selected, n_ranks, chunk).bounds
    ahead = [0.0] + [data.draw(st.floats(0, max(b - a, 0))) for a, b in bounds[1:]]
    ranges = shed_root_frames(bounds, sum(ahead), selected, chunk, min_piece=1)
    positions = sorted(p for rank_ranges in ranges for a, b in rank_ranges for p in range(a, b))
    assert positions == list(range(len(selected)))  # every frame exactly once
    for rank in range(1, n_ranks):
        a, b = bounds[rank]
        assert ranges[rank][:1] == ([(a, b)] if b > a else [])  # its own share first, whole
        assert len(ranges[rank]) <= 2
    units = selected // chunk
    for rank_ranges in ranges:
        for a, b in rank_ranges:  # no chunk divided between ranks (but as the partition did)
            inner = {int(x) for x in np.flatnonzero(np.diff(units)) + 1} | {0, len(selected)}
            assert a in inner or a == bounds[0][0] or any(a == lo for lo, _ in bounds)
            assert b in inner or any(b == hi for _, hi in bounds)
    if n_ranks > 1 and chunk == 1:  # balanced to within a frame and rounding
        unread = [b - a - (ahead[r] if r else 0) for r, (a, b) in enumerate(bounds)]
        kept = sum(b - a for a, b in ranges[0])
        others = [unread[r] + sum(b - a for a, b in ranges[r][1:]) for r in range(1, n_ranks)]
        if kept > 0 and unread[0] > np.mean(unread[1:]):
            assert abs(kept - np.mean(others)) <= 1.5


@settings(max_examples=300, deadline=None)
@given(n_frames=st.integers(0, 20000), n_ranks=st.integers(2, 64), min_piece=st.sampled_from([2, 16, 256]),
       lead=st.floats(0, 1), data=st.data())
def test_shedding_in_pieces_of_min_piece_frames(n_frames, n_ranks, min_piece, lead, data):
    """A split trajectory's rank 0 gives its end to as few ranks as pieces of *min_piece*
    frames need (ranks 1 to K), balanced among them, every frame kept once."""
    selected = np.arange(n_frames)
    bounds = partition_frames(selected, n_ranks).bounds
    ahead = [0.0] + [lead * (b - a) for a, b in bounds[1:]]
    ranges = shed_root_frames(bounds, sum(ahead), selected, min_piece=min_piece)
    positions = sorted(p for rank_ranges in ranges for a, b in rank_ranges for p in range(a, b))
    assert positions == list(range(n_frames))
    pieces = {rank: rank_ranges[1] for rank, rank_ranges in enumerate(ranges) if rank and len(rank_ranges) > 1}
    assert sorted(pieces) == list(range(1, len(pieces) + 1))  # ranks 1 to K
    sizes = [b - a for a, b in pieces.values()]
    if len(sizes) > 1:  # several receivers only when each piece holds min_piece frames (and rounding)
        assert min(sizes) >= min_piece - 1 and max(sizes) - min(sizes) <= 1
        unread = [b - a - ahead[r] for r, (a, b) in enumerate(bounds)]
        left = np.mean(unread[1:])
        kept = sum(b - a for a, b in ranges[0])
        assert abs(kept - (left + np.mean(sizes))) <= 1.5  # rank 0 as loaded as a receiver
    if min_piece == 256 and sizes:
        assert len(sizes) <= max(1, sum(sizes) // 256)


def test_shedding_without_a_lead_changes_nothing():
    bounds = [(0, 10), (10, 20), (20, 30)]
    assert shed_root_frames(bounds, 0.0, np.arange(30)) == [[(0, 10)], [(10, 20)], [(20, 30)]]
    assert shed_root_frames([(0, 10)], 0.0, np.arange(10)) == [[(0, 10)]]


def test_saved_frames_count_the_compute_left():
    ahead = ReadAhead()
    ahead.frames = np.arange(100)
    ahead.io_seconds = 0.3  # 3 ms a frame read ahead
    assert ahead.saved_frames(computed=100, compute=0.001) == pytest.approx(100)
    # 60 frames still to compute at 1 ms against 4 ms a frame: a quarter of each is left
    assert ahead.saved_frames(computed=40, compute=0.001) == pytest.approx(100 - 60 * 0.25)
    assert ReadAhead().saved_frames(0, 0.0) == 0.0


@pytest.mark.mpi
def test_a_failure_computing_frames_read_ahead_reads_them_again(comm, adk, monkeypatch):
    """A rank whose first blocks read ahead cannot be computed (here: made to raise) does not
    leave the others alone in the sum of the work done ahead: it drops what it read ahead
    and reads those frames again; the values equal one rank's."""
    _needs_ranks(comm)
    from h5mdtool.bench.engines import BlocksEngine

    original = BlocksEngine.run_read
    calls = []

    def failing_once(self, *args, **kwargs):
        calls.append(1)
        if comm.rank == 1 and len(calls) == 1:
            raise MemoryError("test: no memory for the sample")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BlocksEngine, "run_read", failing_once)
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "bench-setup:0:0.5")
    result = bench_rmsd(adk[1], adk[0], comm=comm)
    expected = _serial(bench_rmsd, adk[1], adk[0]) if comm.rank == 0 else None
    if comm.rank != 0:
        return
    np.testing.assert_array_equal(result["rmsd"], expected["rmsd"])
    records = result["report"]["ranks"]
    assert records[1]["n_read_ahead"] == 0 and records[1]["read_ahead_saved"] == 0.0


@pytest.mark.mpi
def test_rank_0_waiting_for_a_block_read_ahead_charges_wait(comm, adk, monkeypatch):
    """Rank 0's plan is ready while the others are still in a block read ahead (slowed to
    1 s): rank 0 waits for them at a barrier, charged to its t_wait, not to the broadcast
    of the plan (t_comm), which it was before."""
    _needs_ranks(comm)
    slow = ",".join(f"rmsd-block:{rank}:1.0" for rank in range(1, comm.size))
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", slow)
    comm.Barrier()
    result = bench_rmsd(adk[1], adk[0], comm=comm)
    if comm.rank != 0:
        return
    root = result["report"]["ranks"][0]
    assert root["t_wait"] >= 0.5, root
    assert root["t_comm"] < 0.3, root
    for record in result["report"]["ranks"][1:]:
        assert record["n_read_ahead"] > 0


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 500), st.integers(0, 400), st.integers(1, 300), st.sampled_from([1, 1, 4, 26]),
       st.sampled_from([1, 2]))
def test_blocks_read_ahead_grow_from_a_small_first_one(first, n_frames, block_frames, chunk, step):
    """Every frame once and in order, each block ending on a chunk boundary (but the last),
    the first block small (one chunk at least), then each at most twice the one before and
    at most block_frames (whole chunks, one at least)."""
    from h5mdtool.bench.read_ahead import FIRST_BLOCK_FRAMES, growing_blocks

    frames = np.arange(first, first + n_frames * step, step)
    blocks = list(growing_blocks(frames, block_frames, chunk))
    assert np.array_equal(np.concatenate(blocks) if blocks else frames[:0], frames)
    largest = max(block_frames, chunk) if step == 1 else block_frames
    for number, block in enumerate(blocks):
        assert 0 < len(block) <= largest
        if step == 1 and number < len(blocks) - 1:
            assert (block[-1] + 1) % chunk == 0
    if len(blocks) > 1:
        assert len(blocks[0]) <= max(FIRST_BLOCK_FRAMES, chunk)
