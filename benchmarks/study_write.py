"""One timed write of a study layout, serial or under mpirun (worker of ``study_layouts.py``).

``[mpirun -n N] python study_write.py POSITIONS.npy KEY CHUNK_FRAMES OUTPUT [--q NM]``

Each rank loads its share of the XTC-decoded positions from the ``.npy`` cache into memory
first (not timed), then all ranks write OUTPUT with collective calls (``write_file``). Rank
0 prints one JSON line: the write time (creation to close, slowest rank), the file size and
every rank's per-round timeline.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from layout_candidates import XTC_GRID_NM, candidates, write_file  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("positions")
    parser.add_argument("key")
    parser.add_argument("chunk_frames", type=int)
    parser.add_argument("output")
    parser.add_argument("--q", type=float, default=XTC_GRID_NM, help="precision Q in nm (bound Q/2)")
    args = parser.parse_args()

    import hdf5plugin  # noqa: F401 - registers the filters

    from h5mdtool.mpi import chunk_aligned_slices, resolve

    comm = resolve()
    candidate = candidates(args.q)[args.key]
    every = np.load(args.positions, mmap_mode="r")
    n_frames = len(every)
    begin, stop = chunk_aligned_slices(n_frames, min(args.chunk_frames, n_frames), comm.size)[comm.rank]
    local = np.array(every[begin:max(stop, begin + 1)])
    stored_range = None
    if candidate.nbit:
        low, high = candidate.representation.encode(local).min(), candidate.representation.encode(local).max()
        stored_range = (min(comm.allgather(int(low))), max(comm.allgather(int(high))))
    result = write_file(args.output, candidate, local, args.chunk_frames, comm, n_frames=n_frames, local_start=begin,
                        stored_range=stored_range)
    seconds = max(comm.allgather(result["seconds"]))
    timelines = comm.gather(result["timeline"])
    if comm.rank == 0:
        print(json.dumps({"key": args.key, "chunk_frames": args.chunk_frames, "ranks": comm.size,
                          "seconds": seconds, "bytes": os.path.getsize(args.output), "timelines": timelines}))


if __name__ == "__main__":
    main()
