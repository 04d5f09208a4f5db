"""root_call: rank 0's result on every rank, and the other ranks' wait for it timed apart."""

import time

import pytest

from h5mdtool.parallel.mpi import root_call, timed_root_waits


def _slow_answer():
    time.sleep(0.5)
    return 42


@pytest.mark.mpi
def test_the_other_ranks_wait_for_rank_0_is_timed_apart(comm):
    calls = []
    with timed_root_waits(lambda: calls.append(("before", time.perf_counter())),
                          lambda: calls.append(("after", time.perf_counter()))):
        assert root_call(comm, _slow_answer) == 42
    if comm.rank == 0:  # rank 0 works, and on one rank no one waits
        assert calls == []
    else:
        assert [name for name, _ in calls] == ["before", "after"]
        assert calls[1][1] - calls[0][1] >= 0.4  # rank 0's work, waited for
    calls.clear()
    assert root_call(comm, _slow_answer) == 42  # outside the block: not timed
    assert calls == []
