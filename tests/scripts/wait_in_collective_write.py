"""Run under mpirun -n 2 with the command line's signal handling: rank 0 enters a collective
write into a gzip-filtered dataset and waits there for rank 1, which sleeps first.

Used to check that a signal reaches a rank whose main thread is inside HDF5/MPI-IO (C code
where Python cannot run its handlers): the temporary registered with cleanup_on_abort goes.
"""

import sys
import time

import numpy as np

from h5mdtool.parallel import interrupts
from h5mdtool.parallel.mpi import RowWriter, cleanup_on_abort, open_h5, resolve
from h5mdtool.parallel.outputs import remove_quietly


def main(path):
    interrupts.install()
    comm = resolve()
    with cleanup_on_abort(lambda: remove_quietly(path)):
        handle = open_h5(path, "w", comm)
        dataset = handle.create_dataset("x", (2, 1000, 3), "f4", chunks=(1, 1000, 3), compression="gzip")
        writer = RowWriter(comm)
        if comm.rank == 1:
            time.sleep(60)
        writer.write(dataset, comm.rank, np.ones((1, 1000, 3), "f4"))
        handle.close()


if __name__ == "__main__":
    main(sys.argv[1])
