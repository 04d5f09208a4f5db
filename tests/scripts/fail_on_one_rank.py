"""Run under mpirun: rank 1 fails with an unexpected error while rank 0 waits in a collective.

The entry_point decorator must end the whole job (MPI_Abort) with the rank named, after
running the registered clean-up, instead of leaving rank 0 waiting forever.
"""

import sys

from h5mdtool.parallel.mpi import cleanup_on_abort, entry_point


@entry_point
def job(marker, *, comm=None):
    with open(marker, "w") as handle:
        handle.write("temporary")
    with cleanup_on_abort(lambda: __import__("os").remove(marker)):
        if comm.rank == 1:
            raise RuntimeError("simulated failure on one rank")
        comm.Barrier()


if __name__ == "__main__":
    job(sys.argv[1] + f".rank{__import__('h5mdtool.parallel.mpi').parallel.mpi.resolve().rank}")
