"""MDAnalysis's rms.RMSD with h5mdtool's MPIBackend: 2 ranks against 1 (one core each).

The AdK trajectory (600x: 58800 frames; 100x with ``--quick``) converted to H5MD by
``h5mdtool convert`` with its defaults, then ``RMSD(u, select="name CA").run(backend=
MPIBackend(), unsupported_backend=True)`` under ``mpirun -n 1`` and ``-n 2`` with each rank
bound to its own core, in turns (1, 2, 1, 2, ...). Timed inside the script: the slowest
rank's ``run()``, from a barrier to the end (importing MDAnalysis and opening the Universe,
the same for any backend, are left out). Target: 2 ranks at least 1.7x faster than 1 rank.
The busiest rank's CPU seconds are printed too: on a machine shared with other jobs they
show what dividing the frames gained when the ranks did not get their cores.
The serial backend on 1 rank is timed too, to show what the MPI backend costs on one rank.
The Universe is h5mdtool's reader when this h5mdtool has it, else MDAnalysis's H5MD reader.
"""

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import check, mpirun_bound, output_of, run_sizes, warm_inputs  # noqa: E402
from data import DATA, repeated_xtc, topology  # noqa: E402

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mdanalysis_run.py")


def _run(command):
    warm_inputs(command)
    return json.loads(output_of(command).strip().splitlines()[-1])


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    h5md = os.path.join(DATA, f"adk_{repeats}x_backend.h5md")
    if not os.path.exists(h5md):
        subprocess.run([sys.executable, "-m", "h5mdtool", "convert", xtc, "-t", topology(), "-o", h5md,
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    print(f"\n== rms.RMSD with MPIBackend, AdK {repeats}x ({os.path.getsize(h5md) / 1e6:.0f} MB H5MD)", flush=True)
    entries = {"serial_1": (1, "serial"), "mpi_1": (1, "mpi"), "mpi_2": (2, "mpi")}
    runs = {key: [] for key in entries}
    for _ in range(repeat):
        for key, (ranks, backend) in entries.items():
            command = mpirun_bound(ranks) + [sys.executable, RUNNER, topology(), h5md, "--backend", backend]
            runs[key].append(_run(command))
    result = {"repeats": repeats, "reader": runs["mpi_1"][0]["reader"]}
    for key, (ranks, backend) in entries.items():
        seconds = [run["run_seconds"] for run in runs[key]]
        cpu = [run["cpu_seconds"] for run in runs[key]]
        result[key] = {"seconds": statistics.median(seconds), "runs": seconds, "cpu_seconds": statistics.median(cpu),
                       "cpu_runs": cpu, "ranks": ranks, "backend": backend, "t_compute_last": runs[key][-1]["t_compute"]}
        print(f"  RMSD.run(backend={backend}), {ranks} rank(s) ({result['reader']} reader)  "
              f"{result[key]['seconds']:8.2f} s  (runs: {', '.join(f'{s:.2f}' for s in seconds)}; CPU s of the "
              f"busiest rank: {', '.join(f'{s:.2f}' for s in cpu)})", flush=True)
    assert len({round(run["mean_rmsd"], 9) for key in runs for run in runs[key]}) == 1, "the runs' RMSDs differ"
    # on a machine shared with other jobs a rank may get a fraction of its core: the CPU time
    # says what the division of the work gained, whatever the other jobs took
    cpu_ratio = result["mpi_1"]["cpu_seconds"] / result["mpi_2"]["cpu_seconds"]
    print(f"  -> CPU seconds of the busiest rank, 1 rank / 2 ranks: {cpu_ratio:.2f}x (for information)")
    result["cpu_1_over_2"] = cpu_ratio
    result["checks"] = [check("RMSD run, MPIBackend: 1 rank time / 2 ranks time",
                              result["mpi_1"]["seconds"] / result["mpi_2"]["seconds"], 1.7)]
    return result


def main():
    run_sizes(__doc__, bench, "mdanalysis_backend")


if __name__ == "__main__":
    main()
