"""Run an MDAnalysis analysis on an H5MD trajectory, serially or on the ranks of an MPI job.

    h5mdtool convert md.xtc -t md.tpr -o md.h5md
    python examples/parallel_analysis.py md.h5md                         # one process
    mpirun -n 4 python examples/parallel_analysis.py md.h5md             # four ranks
    mpirun -n 4 python examples/parallel_analysis.py md.h5md --analysis ramachandran --check
    mpirun -n 4 python examples/parallel_analysis.py md.tpr md.h5md      # a topology file of your own

The topology is the one ``convert -t`` stored in the file, unless a topology file comes
before the trajectory.

Every rank runs this whole script: it opens its own Universe, builds the same analysis and
calls ``run(backend=MPIBackend(), unsupported_backend=True)``; the backend gives each rank
one block of frames and every rank ends with the whole result. ``--check`` also runs the
analysis serially (MDAnalysis's default backend) on every rank and compares.
"""

import argparse
import time

import numpy as np

from MDAnalysis.analysis.dihedrals import Ramachandran
from MDAnalysis.analysis.rms import RMSD

from h5mdtool.mdanalysis import MPIBackend, Universe


def build(universe, name, select):
    if name == "rmsd":
        return RMSD(universe, select=select), "rmsd"
    return Ramachandran(universe.select_atoms("protein")), "angles"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="[TOPOLOGY] TRAJECTORY",
                        help="the H5MD trajectory, after a topology file unless it carries its own (convert -t)")
    parser.add_argument("--analysis", choices=["rmsd", "ramachandran"], default="rmsd")
    parser.add_argument("--select", default="name CA", help="RMSD fit group (default: name CA)")
    parser.add_argument("--step", type=int, default=None, help="analyse every STEP-th frame")
    parser.add_argument("--out", default=None, help="save the result as .npy (written by rank 0)")
    parser.add_argument("--check", action="store_true", help="also run serially and compare")
    parser.add_argument("--progress", action="store_true", help="show the run's progress (rank 0)")
    args = parser.parse_args()
    if len(args.files) > 2:
        parser.error("give the trajectory, or a topology file and the trajectory")
    *topology, trajectory = args.files

    backend = MPIBackend(progress=args.progress)  # MPI.COMM_WORLD under mpirun, one rank otherwise
    comm = backend.comm
    universe = Universe(trajectory, topology=topology[0] if topology else None)  # h5mdtool's reader
    analysis, key = build(universe, args.analysis, args.select)
    started = time.perf_counter()
    analysis.run(step=args.step, backend=backend, unsupported_backend=True)
    seconds = time.perf_counter() - started
    result = analysis.results[key]

    if args.check:
        serial, _ = build(universe, args.analysis, args.select)
        serial.run(step=args.step)
        assert np.array_equal(serial.results[key], result), "the parallel result differs from the serial one"
    if comm.rank == 0:
        run = backend.last_run
        print(f"{args.analysis}: {analysis.n_frames} frames on {comm.size} rank(s) in {seconds:.2f} s; "
              f"frames per rank {run['partition']['frames_per_rank']}, computing "
              + ", ".join(f"{t:.2f}" for t in run["t_compute"]) + " s"
              + ("; equal to the serial run" if args.check else ""))
        if args.out:
            np.save(args.out, result)


if __name__ == "__main__":
    main()
