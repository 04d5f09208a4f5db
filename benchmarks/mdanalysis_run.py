"""One timed MDAnalysis analysis run, with h5mdtool's MPIBackend (run by bench_mdanalysis_backend.py).

    mpirun -n N python mdanalysis_run.py TOPOLOGY TRAJECTORY [--backend mpi|serial]

Prints one JSON line on rank 0: the seconds of ``run()`` (the slowest rank's, from a barrier
before it to the end of every rank's run), the CPU seconds of the busiest rank in it, the
seconds of opening the Universe, the frames, and the backend's per-rank compute times.
"""

import argparse
import json
import time

import numpy as np


def open_universe(topology, trajectory):
    try:
        from h5mdtool.mdanalysis import Universe
    except ImportError:
        import MDAnalysis as mda

        return mda.Universe(topology, trajectory), "MDAnalysis"
    return Universe(trajectory, topology=topology), "h5mdtool"


def main():
    from MDAnalysis.analysis.rms import RMSD

    from h5mdtool.mdanalysis import MPIBackend

    parser = argparse.ArgumentParser()
    parser.add_argument("topology")
    parser.add_argument("trajectory")
    parser.add_argument("--backend", choices=["mpi", "serial"], default="mpi")
    args = parser.parse_args()
    backend = MPIBackend()
    comm = backend.comm
    started = time.perf_counter()
    universe, reader = open_universe(args.topology, args.trajectory)
    opened = time.perf_counter() - started
    analysis = RMSD(universe, select="name CA")
    comm.Barrier()
    started, cpu = time.perf_counter(), time.process_time()
    if args.backend == "mpi":
        analysis.run(backend=backend, unsupported_backend=True)
    else:
        analysis.run()
    seconds = comm.allgather((time.perf_counter() - started, time.process_time() - cpu))
    if comm.rank == 0:
        print(json.dumps({"run_seconds": max(wall for wall, _ in seconds),
                          "cpu_seconds": max(cpu for _, cpu in seconds), "open_seconds": opened, "reader": reader,
                          "n_frames": int(analysis.n_frames), "ranks": comm.size,
                          "mean_rmsd": float(np.mean(analysis.results.rmsd[:, 2])),
                          "t_compute": backend.last_run["t_compute"] if args.backend == "mpi" else None}))


if __name__ == "__main__":
    main()
