"""Read the demo's H5MD files back with MDAnalysis and compare them with their sources.

``python examples/check_roundtrip.py DIR`` checks every frame serially;
``mpirun -n 2 python examples/check_roundtrip.py DIR`` opens the files with MPI-IO
(``driver="mpio"``) and lets each rank check its own share of the frames, as an MPI
analysis would.
"""

import os
import sys
import warnings

import numpy as np


def check(comm, topology, source, written):
    import hdf5plugin  # noqa: F401 - registers Zstd, which the --precision file is compressed with
    import MDAnalysis as mda

    kwargs = {"driver": "mpio", "comm": comm} if comm.size > 1 else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MDAnalysis's DCDReader deprecation notice
        copy = mda.Universe(topology, written, **kwargs)
        reference = mda.Universe(topology, source)
    n_frames = reference.trajectory.n_frames
    same_count = copy.trajectory.n_frames == n_frames
    mine = np.array_split(np.arange(n_frames), comm.size)[comm.rank]
    worst = 0.0
    try:
        for frame in mine:
            a = copy.trajectory[frame].positions
            b = reference.trajectory[frame].positions
            worst = max(worst, float(np.abs(a - b).max()))
            assert copy.trajectory.ts.time == reference.trajectory.ts.time or abs(
                copy.trajectory.ts.time - reference.trajectory.ts.time) < 1e-9
    finally:
        copy.trajectory.close()  # collective under MPI-IO
    worst = comm.allreduce(worst, op=max_op(comm))
    frames = comm.allreduce(len(mine), op=sum_op(comm))
    return frames, worst, same_count


def max_op(comm):
    return None if comm.size == 1 else __import__("mpi4py.MPI").MPI.MAX


def sum_op(comm):
    return None if comm.size == 1 else __import__("mpi4py.MPI").MPI.SUM


def main(directory):
    from MDAnalysisTests.datafiles import DCD, GRO, PSF, XTC

    import h5mdtool

    comm = h5mdtool.resolve_comm()
    mode = f"MPI-IO on {comm.size} ranks" if comm.size > 1 else "serial"
    status = 0
    # (topology, source, file, largest difference allowed in Angstrom): float32 copies agree to
    # rounding; the XTC-grid file stores the XTC's integers, read back within float32 rounding
    cases = ((PSF, DCD, "adk.h5md", 1e-4), (GRO, XTC, "adk_solvated.h5md", 1e-4),
             (GRO, XTC, "adk_solvated_xtcgrid.h5md", 1e-4))
    for topology, source, name, bound in cases:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        frames, worst, same_count = check(comm, topology, source, path)
        ok = same_count and worst <= bound
        status |= not ok
        if comm.rank == 0:
            print(f"{name}: MDAnalysis read {frames} frames ({mode}); "
                  f"max |difference| to {os.path.basename(source)} = {worst:.2g} A -> {'OK' if ok else 'MISMATCH'}")
    sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo-output")
