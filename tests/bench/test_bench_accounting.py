"""bench rmsd accounting: waiting for another rank is t_wait wherever it happens, rank 0's
serial part is reported apart, stragglers are judged on each rank's own I/O and compute,
and the compute/I-O ratio on the typical (median) rank."""

import os

import pytest

from benchcheck import every_report_adds_up  # noqa: F401 - autouse fixture
from h5mdtool import bench_dihedrals, bench_rmsd, convert
from h5mdtool.bench.runner import summarise
from h5mdtool.bench.timing import PHASES, find_stragglers, work


def _needs_ranks(comm):
    if comm.size == 1:
        pytest.skip("needs several ranks (runs under mpirun -n 2 and -n 3)")


@pytest.mark.mpi
@pytest.mark.parametrize("benchmark", [bench_rmsd, bench_dihedrals], ids=["rmsd", "dihedrals"])
def test_setup_delay_is_the_others_wait_and_the_serial_part(comm, adk, monkeypatch, benchmark):
    """Regression: the other ranks' wait for rank 0's setup was charged to their init_top and
    init_traj as if it were their work; bench dihedrals' report left the serial part out.
    Without reading ahead (tests/bench/test_bench_read_ahead.py: with it) the others wait for
    the whole setup."""
    _needs_ranks(comm)
    setup = 3.0
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", f"bench-setup:0:{setup}")
    comm.Barrier()  # the ranks start together: each one's wait is rank 0's serial part less its own start-up
    result = benchmark(adk[1], adk[0], comm=comm, read_ahead_mb=0)
    if comm.rank != 0:
        return
    report = result["report"]
    root, others = report["ranks"][0], report["ranks"][1:]
    # the serial part: the least any other rank waited idle for rank 0, all of its setup here
    assert root["t_serial"] >= setup and report["t_serial"] == pytest.approx(root["t_serial"], abs=0.05 * setup)
    assert report["t_serial"] == min([root["t_serial"]] + [r["t_plan_wait"] for r in others])
    assert report["serial_fraction"] == pytest.approx(report["t_serial"] / report["t_total"])
    assert sum(root["serial"].values()) == pytest.approx(root["t_serial"])
    for record in others:
        assert "serial" not in record
        assert record["t_init_top"] < 0.05 * setup  # the others resolve nothing themselves
        # while rank 0 worked they imported their decoders (own work), then waited
        assert record["t_wait"] + record["t_init_traj"] >= 0.95 * setup
        assert record["t_wait"] >= root["t_serial"] - record["t_init_traj"] - 0.1 * setup - 0.2
    # the serial part is no one's straggling: rank 0 is judged on its own share
    assert 0 not in [entry["rank"] for entry in report["stragglers"]["ranks"]]


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["H5MD", "DCD"])
def test_wait_for_rank_0s_reading_of_metadata_is_wait(comm, shared_tmp, adk, monkeypatch, kind):
    """Regression: the other ranks' wait while rank 0 alone read the input's metadata (an
    H5MD file's; a DCD, which rank 0 scans alone) was charged to their init_traj as if it
    were their work."""
    _needs_ranks(comm)
    path = adk[1]
    if kind == "H5MD":
        path = os.path.join(shared_tmp, "adk.h5md")
        convert(adk[1], path, comm=comm, progress=False, compression="none")
    inspect = 2.0
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", f"inspect:0:{inspect}")
    comm.Barrier()
    result = bench_rmsd(path, adk[0], comm=comm, read_ahead_mb=0)
    if comm.rank != 0:
        return
    root, others = result["report"]["ranks"][0], result["report"]["ranks"][1:]
    assert root["t_init_traj"] >= inspect  # rank 0's own work
    for record in others:
        assert record["t_init_traj"] < 0.25 * inspect, record
        assert record["t_wait"] >= 0.75 * inspect, record


@pytest.mark.mpi
def test_slow_io_rank_is_a_straggler_although_the_others_waited_for_setup(comm, adk, monkeypatch):
    """Regression: a rank slow in its reading was not named while the others' wait for rank 0
    counted as their work (its extra I/O was below 2x of work diluted by the wait)."""
    _needs_ranks(comm)
    monkeypatch.setenv("H5MDTOOL_TEST_DELAY", "bench-setup:0:4.0,rmsd-block:1:0.4")
    result = bench_rmsd(adk[1], adk[0], comm=comm, block_frames=10, read_ahead_mb=0)
    if comm.rank != 0:
        return
    report = result["report"]
    stragglers = report["stragglers"]
    assert [entry["rank"] for entry in stragglers["ranks"]] == [1], stragglers
    assert stragglers["ranks"][0]["phase"] == "t_io"
    slow = report["ranks"][1]
    delayed = 0.4 * -(-slow["n_frames"] // 10)
    assert work(slow) >= delayed
    assert all(work(r) < work(slow) / 2 for r in report["ranks"] if r["rank"] != 1)


def _record(rank, io, compute, serial=None, init=0.5):
    record = {"rank": rank, "host": "h", "t_init_top": init, "t_init_traj": 0.1, "t_io": io, "t_compute": compute,
              "t_wait": 0.0, "t_comm": 0.01}
    if serial:
        record.update(serial=serial, t_serial=sum(serial.values()))
    record["t_total"] = sum(record[p] for p in PHASES)
    return record


def test_ratio_is_the_typical_ranks():
    """Regression: the ratio was summed over ranks, so one rank stopped in its compute turned
    an I/O-bound run compute-bound."""
    records = [_record(0, 1.0, 0.3), _record(1, 1.0, 0.3), _record(2, 1.0, 100.0)]
    summary = summarise(records, "H5MD")
    assert summary["ratio_compute_io"] == pytest.approx(0.3)
    assert summary["advice"].startswith("I/O-bound")


def test_serial_part_is_left_out_of_rank_0s_work():
    """Rank 0's setup (topology, reference frame read) is not its share of the work."""
    serial = {"t_init_top": 5.0, "t_init_traj": 1.0, "t_io": 2.0, "t_compute": 0.0}
    records = [_record(0, 3.0, 0.5, serial=serial, init=5.0), _record(1, 1.0, 0.5), _record(2, 1.0, 0.5)]
    assert work(records[0]) == pytest.approx(1.5)
    result = find_stragglers(records)
    assert result["ranks"] == []
    assert summarise(records)["t_serial"] == pytest.approx(8.0)


def test_report_shows_the_serial_part_and_the_parallel_parts_efficiency():
    """bench report: each rank count's serial part, and Amdahl's split of the run: the
    efficiency of the rest against the 1-rank run."""
    from h5mdtool.bench.report import _scale

    rows = [{"n_ranks": 1, "t_total": 10.0, "t_serial": 1.0}, {"n_ranks": 4, "t_total": 4.0, "t_serial": 1.0},
            {"n_ranks": 8, "t_total": 3.0, "t_serial": None}]
    baseline = _scale(rows)
    assert baseline["serial_fraction"] == pytest.approx(0.1)
    assert rows[1]["efficiency"] == pytest.approx(10.0 / 4.0 / 4)
    assert rows[1]["parallel_efficiency"] == pytest.approx(9.0 / (4 * 3.0))
    assert rows[2]["parallel_efficiency"] is None
