"""The H5MDTOOL reader under mpirun: each rank opens the file on its own (or all with
MPI-IO) and iterates its share of the frames; the values equal MDAnalysis's H5MDReader's
and the shares cover every frame once. Run on 2 and 3 ranks (tests/mpi_pytest.py)."""

import os

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import h5mdtool
from h5mdtool.parallel.partition import partition_frames


@pytest.fixture(params=[{}, {"compression": "zstd"}, {"precision": 0.001}], ids=["plain", "zstd", "precision"])
def converted(request, comm, shared_tmp, adk):
    path = os.path.join(shared_tmp, "adk.h5md")
    h5mdtool.convert([adk[1]], path, comm=comm, topology=adk[0], progress=False, **request.param)
    comm.Barrier()
    return path


def _share(comm, n_frames):
    """This rank's frames: balanced contiguous blocks."""
    sizes = [n_frames // comm.size + (rank < n_frames % comm.size) for rank in range(comm.size)]
    start = sum(sizes[:comm.rank])
    return start, start + sizes[comm.rank]


@pytest.mark.mpi
@pytest.mark.parametrize("driver", [None, "mpio"])
def test_each_rank_iterates_its_share(comm, converted, driver):
    import warnings

    import MDAnalysis as mda

    import h5mdtool.mdanalysis as h5mda

    if driver == "mpio" and comm.size == 1:
        pytest.skip("MPI-IO needs mpirun")
    kwargs = {"driver": "mpio", "comm": comm} if driver else {}
    ours = h5mda.Universe(converted, **kwargs)  # the topology stored in the file
    assert ours.trajectory._file.id.get_access_plist().get_cache()[2] == 0  # HDF5's chunk cache off
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = mda.Universe(converted, format="H5MD")
    start, stop = _share(comm, len(ours.trajectory))
    seen = []
    for ts, expected in zip(ours.trajectory[start:stop], theirs.trajectory[start:stop]):
        assert ts.frame == expected.frame
        assert_array_equal(ts.positions, expected.positions)
        assert ts.time == expected.time
        seen.append(ts.frame)
    assert len(ours.select_atoms("name CA")) == 214
    everyone = comm.allgather(seen)
    assert sorted(frame for frames in everyone for frame in frames) == list(range(98))
    ours.trajectory.close()  # collective with MPI-IO
    theirs.trajectory.close()


@pytest.mark.mpi
def test_ranks_read_bench_partition_shares_with_timeseries(comm, converted):
    """Each rank reads its whole chunks of the benchmark's partition as one timeseries."""
    import h5mdtool.mdanalysis as h5mda

    ours = h5mda.Universe(converted)
    partition = partition_frames(np.arange(98), comm.size, ours.trajectory.chunk_frames)
    start, stop = partition.bounds[comm.rank]
    atoms = ours.select_atoms("name CA")
    mine = ours.trajectory.timeseries(atoms, start=start, stop=stop)
    every = np.array([atoms.positions for _ in ours.trajectory[start:stop]]).reshape(-1, len(atoms), 3)
    assert_array_equal(mine, every)
    assert sum(comm.allgather(len(mine))) == 98
    ours.trajectory.close()
