"""Start-up benchmark: what a command costs before it does any work.

* ``h5mdtool --help`` and ``h5mdtool --version``, whole commands (median of the runs):
  target <= 0.3 s each (they import click and the command table only);
* a rank's time from process start to its first read in ``h5mdtool bench rmsd`` on the
  uncompressed H5MD of the AdK trajectory (100x) carrying its topology (``convert -t``), 1
  and 2 ranks: each rank's shell notes the time just before it becomes the Python process,
  and the test hook ``H5MDTOOL_TEST_MARK`` marks the end of its first read (one frame:
  ``--block-frames 1``). Target <= 0.5 s on every rank. Rank 0 resolves ``name CA`` from
  the stored topology before its first read; the other ranks read ahead while it plans (the
  hook marks their first block read ahead; ``python -X importtime`` shows what each
  imports). The same with ``-t adk.psf`` (rank 0 imports MDAnalysis to read the PSF) is
  printed beside it, without a target.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_rmsd import with_topology  # noqa: E402
from common import H5MDTOOL, MPIRUN, check, run_sizes, timed  # noqa: E402
from data import repeated_xtc, topology  # noqa: E402

RANK_VARIABLE = "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"


def first_read(h5md, n_ranks, repeat, topology_file=None):
    """Seconds from each rank's process start to the end of its first read (median of *repeat*
    runs), with the topology stored in *h5md* or, if given, *topology_file*."""
    runs = []
    for _ in range(repeat):
        marks = tempfile.mkdtemp(prefix="h5mdtool-startup-")
        command = (f'date +%s.%N > {marks}/start-{RANK_VARIABLE}; exec {H5MDTOOL} bench rmsd {h5md} '
                   f'{"-t " + topology_file if topology_file else ""} '
                   f'--block-frames 1 --stop 20 --no-progress > /dev/null')
        launcher = [MPIRUN, "-n", str(n_ranks)] if n_ranks > 1 else []
        env = dict(os.environ, H5MDTOOL_TEST_MARK=marks)
        subprocess.run(launcher + ["sh", "-c", command], check=True, env=env)
        seconds = []
        for rank in range(n_ranks):
            with open(os.path.join(marks, f"start-{rank}")) as handle:
                start = float(handle.read())
            seconds.append(os.stat(os.path.join(marks, f"rmsd-block-{rank}")).st_mtime - start)
        runs.append(seconds)
        shutil.rmtree(marks)
    medians = [statistics.median(run[rank] for run in runs) for rank in range(n_ranks)]
    print(f"  process start to first read, {n_ranks} rank(s), {'-t ' + os.path.basename(topology_file) if topology_file else 'stored topology'}: "
          + ", ".join(f"rank {rank} {value:.3f} s" for rank, value in enumerate(medians)), flush=True)
    return medians


def bench(repeats, repeat):
    print("\n== start-up", flush=True)
    result = {"repeats": repeats}
    runs = max(repeat, 5)
    result["help"] = timed("h5mdtool --help", [H5MDTOOL, "--help"], runs)
    result["version"] = timed("h5mdtool --version", [H5MDTOOL, "--version"], runs)
    h5md = with_topology(repeated_xtc(repeats), repeats)
    result["first_read_1"] = first_read(h5md, 1, repeat)
    result["first_read_2"] = first_read(h5md, 2, repeat)
    result["first_read_psf_1"] = first_read(h5md, 1, repeat, topology())
    result["first_read_psf_2"] = first_read(h5md, 2, repeat, topology())
    result["checks"] = [
        check("h5mdtool --help (s)", result["help"]["seconds"], 0.3, higher_is_better=False),
        check("h5mdtool --version (s)", result["version"]["seconds"], 0.3, higher_is_better=False),
        check("process start to first read, 1 rank (s)", max(result["first_read_1"]), 0.5, higher_is_better=False),
        check("process start to first read, slowest of 2 ranks (s)", max(result["first_read_2"]), 0.5,
              higher_is_better=False),
    ]
    return result


def main():
    # the start-up does not depend on the trajectory's length: the 100x input only
    if "--quick" not in sys.argv:
        sys.argv.append("--quick")
    run_sizes(__doc__, bench, "startup")


if __name__ == "__main__":
    main()
