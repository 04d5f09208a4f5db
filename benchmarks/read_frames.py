"""Read every frame of an H5MD file one at a time, as frame-by-frame analysis does.

``python read_frames.py FILE`` (serial) or ``mpirun -n N python read_frames.py FILE``
(each rank reads a balanced block of frames through MPI-IO).
"""

import sys

import numpy as np

from h5mdtool.h5md.codecs import register_plugins
from h5mdtool.parallel.mpi import balanced_slices, open_h5, resolve


def main(path):
    comm = resolve()
    register_plugins()  # files written with hdf5plugin's filters (zstd, lz4, blosc2)
    with open_h5(path, "r", comm) as handle:
        value = handle["particles/trajectory/position/value"]
        start, stop = balanced_slices(value.shape[0], comm.size)[comm.rank]
        frame = np.empty(value.shape[1:], dtype=value.dtype)
        for i in range(start, stop):
            value.read_direct(frame, np.s_[i])
        comm.Barrier()


if __name__ == "__main__":
    main(sys.argv[1])
