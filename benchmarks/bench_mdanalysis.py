"""MDAnalysis through h5mdtool's reader against MDAnalysis on the XTC, peers in the same run.

On the AdK trajectory (600x; 100x with ``--quick``) and its conversions by h5mdtool
(uncompressed, ``--precision 0.001``, ``--compression gzip`` and ``zstd``), MDAnalysis 2.x
user code, timed inside a fresh process from opening the Universe to the end of the work
(imports excluded: they cost the same on every side), median of ``--repeat`` runs, the
sides interleaved:

* iterating every frame (``for ts in u.trajectory: pass``) through
  ``h5mdtool.mdanalysis.Universe``: >= 3x faster than on the XTC, for every conversion;
* 1000 random frames (``u.trajectory[i]``, the same seeded frames): <= 1.5x the XTC's time
  (MDAnalysis with its offsets, built in the warm-up);
* ``rms.RMSD(u, select="name CA").run()`` and ``rms.RMSF(u.select_atoms("name CA")).run()``
  through the reader (uncompressed and ``--precision 0.001``): >= 3x faster than on the XTC.
"""

import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ROOT, check, run_sizes, timed  # noqa: E402
from data import repeated_xtc, topology  # noqa: E402
from bench_rmsd import converted  # noqa: E402

#: The user code, timed from opening the Universe; argv: side (xtc|h5mdtool), work, topology, trajectory.
WORK = (
    "import sys, time, warnings; warnings.simplefilter('ignore')\n"
    "import numpy as np, MDAnalysis as mda; from MDAnalysis.analysis import rms\n"
    "import h5mdtool.mdanalysis as h5mda\n"
    "side, work, top, path = sys.argv[1:5]\n"
    "started = time.perf_counter()\n"
    "u = mda.Universe(top, path) if side == 'xtc' else h5mda.Universe(path, topology=top)\n"
    "if work == 'iterate':\n"
    "    for ts in u.trajectory: pass\n"
    "elif work == 'random':\n"
    "    for i in np.random.default_rng(2026).integers(0, len(u.trajectory), 1000): u.trajectory[int(i)]\n"
    "elif work == 'rmsd':\n"
    "    rms.RMSD(u, select='name CA').run()\n"
    "elif work == 'rmsf':\n"
    "    rms.RMSF(u.select_atoms('name CA')).run()\n"
    "print(time.perf_counter() - started)\n"
)


def _inner_seconds(arguments):
    done = subprocess.run([sys.executable, "-c", WORK, *arguments], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    if done.returncode != 0:
        raise RuntimeError(f"benchmark failed: {' '.join(arguments)}\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def timed_work(entries, repeat):
    """Median in-process seconds of each (key, label, arguments), interleaved over *repeat* rounds."""
    times = {key: [] for key, _, _ in entries}
    for _ in range(repeat):
        for key, _, arguments in entries:
            times[key].append(_inner_seconds(arguments))
    results = {}
    for key, label, arguments in entries:
        median = statistics.median(times[key])
        print(f"  {label:<62s} {median:8.3f} s  (runs: {', '.join(f'{t:.3f}' for t in times[key])})", flush=True)
        results[key] = {"label": label, "arguments": arguments, "seconds": median, "runs": times[key]}
    return results


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    top = topology()
    files = {
        "uncompressed": converted(xtc, repeats),
        "precision 0.001": converted(xtc, repeats, "--precision", "0.001"),
        "gzip": converted(xtc, repeats, "--compression", "gzip"),
        "zstd": converted(xtc, repeats, "--compression", "zstd"),
    }
    print(f"\n== MDAnalysis through h5mdtool.mdanalysis, AdK {repeats}x", flush=True)
    timed("warm-up (XTC offsets; every input into the page cache)",
          [sys.executable, "-c", WORK, "xtc", "iterate", top, xtc])
    for path in files.values():
        with open(path, "rb") as handle:
            while handle.read(64 * 1024**2):
                pass
    result = {"repeats": repeats, "checks": []}
    for work in ("iterate", "random", "rmsd", "rmsf"):
        chosen = files if work in ("iterate", "random") else {k: files[k] for k in ("uncompressed", "precision 0.001")}
        entries = [("xtc", f"{work}: MDAnalysis on the XTC", ["xtc", work, top, xtc])]
        entries += [(name, f"{work}: through h5mdtool.mdanalysis, {name}", ["h5mdtool", work, top, path])
                    for name, path in chosen.items()]
        measured = timed_work(entries, repeat)
        result[work] = measured
        xtc_seconds = measured["xtc"]["seconds"]
        for name in chosen:
            mine = measured[name]["seconds"]
            if work == "random":
                result["checks"].append(check(f"random frames, {name} / XTC", mine / xtc_seconds, 1.5,
                                              higher_is_better=False))
            else:
                result["checks"].append(check(f"{work}: XTC / {name}", xtc_seconds / mine, 3.0))
    return result


def main():
    run_sizes(__doc__, bench, "mdanalysis")


if __name__ == "__main__":
    main()
