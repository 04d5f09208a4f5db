"""Inspect benchmark: the frame offsets of the AdK XTC (600x: 58,800 frames; 100x with
``--quick``) found by 1 rank and by 2 ranks together (:mod:`h5mdtool.formats.xdrscan`).

Each run times ``scan_segment(path, comm=comm)`` inside one process per rank (the
slowest rank, after a barrier; the best of *repeat* scans, so MPI start-up and imports are
left out), and saves the offsets. Targets: 2 ranks take at most 0.6x the time of 1 rank,
and find the same offsets. Then 1 rank again with the offsets cache on
(:mod:`h5mdtool.formats.offsetcache`, in a directory of its own): the first scan keeps the
offsets, the others find them (a lookup and its sample of headers walked again); target: at
most 0.1x the scan, the same offsets. The CPU seconds of each rank are printed beside the times: on a
loaded machine the ranks share their cores with other jobs, and the CPU time shows the
work each one did.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import MPIRUN, ROOT, check, run_sizes, warm  # noqa: E402
from data import repeated_xtc  # noqa: E402

SCAN = """
import json, sys, time
import numpy as np
from h5mdtool.formats import scan_segment
from h5mdtool.parallel.mpi import resolve
comm = resolve()
path, repeat, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
best = None
for _ in range(repeat):
    comm.Barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    segment = scan_segment(path, comm=comm)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    slowest = max(comm.allgather(wall))
    cpus = comm.allgather(cpu)
    if best is None or slowest < best[0]:
        best = (slowest, cpus)
if comm.rank == 0:
    np.save(out + ".npy", segment.offsets)
    with open(out, "w") as handle:
        json.dump({"seconds": best[0], "cpu_seconds": best[1], "n_frames": segment.n_frames}, handle)
"""


def scan(path, n_ranks, repeat, directory, cache=None):
    """Best scan time on *n_ranks* ranks, each rank's CPU seconds, and the offsets found;
    with the offsets cache in directory *cache* when given (else off)."""
    out = os.path.join(directory, f"scan-{n_ranks}{'-cached' if cache else ''}.json")
    launcher = [MPIRUN, "-n", str(n_ranks)] if n_ranks > 1 else []
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cache is not None:
        env.update(H5MDTOOL_OFFSETS_CACHE="on", XDG_CACHE_HOME=cache)
    subprocess.run(launcher + [sys.executable, "-c", SCAN, path, str(repeat), out], check=True, env=env)
    with open(out) as handle:
        result = json.load(handle)
    result["offsets"] = np.load(out + ".npy")
    cpus = ", ".join(f"{c:.3f}" for c in result["cpu_seconds"])
    what = "offsets cache, 1 rank" if cache else f"scan on {n_ranks} rank(s)"
    print(f"  {what}: {result['seconds']:.3f} s (best of {repeat}; CPU s per rank: {cpus})",
          flush=True)
    return result


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    print(f"\n== XTC frame offsets, AdK {repeats}x ({os.path.getsize(xtc) / 1e6:.0f} MB, {98 * repeats} frames)",
          flush=True)
    warm([xtc])
    with tempfile.TemporaryDirectory() as directory:
        one = scan(xtc, 1, max(repeat, 3), directory)
        two = scan(xtc, 2, max(repeat, 3), directory)
        cached = scan(xtc, 1, max(repeat, 3), directory, cache=os.path.join(directory, "cache"))
    same = bool(np.array_equal(one["offsets"], two["offsets"]))
    same_cached = bool(np.array_equal(one["offsets"], cached["offsets"]))
    print(f"  offsets identical: {same} ({len(one['offsets']) - 1} frames)")
    ratio = two["seconds"] / one["seconds"]
    cpu_ratio = max(two["cpu_seconds"]) / one["cpu_seconds"][0]
    print(f"  -> CPU seconds of the busiest of 2 ranks / of 1 rank: {cpu_ratio:.2f} (the work each rank did)")
    result = {"repeats": repeats, "seconds_1": one["seconds"], "seconds_2": two["seconds"],
              "cpu_seconds_1": one["cpu_seconds"], "cpu_seconds_2": two["cpu_seconds"], "cpu_ratio": cpu_ratio,
              "offsets_identical": same, "seconds_cached": cached["seconds"], "cached_identical": same_cached}
    result["checks"] = [check("2-rank scan / 1-rank scan", ratio, 0.6, higher_is_better=False),
                        check("offsets identical (1 = yes)", float(same), 1.0),
                        check("offsets cache lookup / 1-rank scan", cached["seconds"] / one["seconds"], 0.1,
                              higher_is_better=False),
                        check("offsets from the cache identical (1 = yes)", float(same_cached), 1.0)]
    return result


def main():
    run_sizes(__doc__, bench, "inspect")


if __name__ == "__main__":
    main()
