"""MDAnalysis through h5mdtool's reader against MDAnalysis on the XTC, peers in the same run.

Two systems: the AdK trajectory repeated 600 times (58800 frames x 3341 atoms; 100 times
with ``--quick``) and the solvated AdK repeated (1000 frames x 47681 atoms; 300 with
``--quick``), each with its conversions by h5mdtool's defaults (uncompressed,
``--precision 0.001``, ``--compression gzip`` and ``--compression zstd``). MDAnalysis 2.x
user code runs in a fresh process per measurement; the work is timed once the Universe is
open (opening is printed beside it: parsing the topology costs the same on both sides),
median of ``--repeat`` runs, the sides interleaved. Wall time decides; the CPU seconds of
the process (every thread) are printed beside it, since on a shared machine the reader's
decoding threads may not get the second core. Targets, on every conversion:

* iterating every frame (``for ts in u.trajectory: pass``) through
  ``h5mdtool.mdanalysis.Universe``: >= 3x faster than on the XTC;
* 1000 random frames (``u.trajectory[i]``, the same seeded frames): <= 1.5x the XTC's
  time (MDAnalysis with its offsets, built in the warm-up);
* ``rms.RMSD(u, select="name CA").run()`` and ``rms.RMSF(u.select_atoms("name CA")).run()``
  through the reader: >= 3x faster than on the XTC.

Every row runs without ``HDF5_USE_FILE_LOCKING`` in the environment. The same random
frames on AdK in 4-frame chunks (``--chunk-frames 4``: 160 KB chunks, the layout
docs/mdanalysis.md advises for random access; the solvated system's default chunks
already hold one frame) are printed for comparison, without a target.

MDAnalysis with h5mdtool's MPIBackend on 2 ranks against 1 (target >= 1.7x) is measured by
``bench_mdanalysis_backend.py`` when h5mdtool has ``h5mdtool.mdanalysis.backend``; this
script says where it is (:func:`mpi_backend_hook`).
"""

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import H5MDTOOL, ROOT, check, machine, output_of, save, warm_inputs  # noqa: E402
from data import DATA, repeated_solvated_xtc, repeated_xtc, solvated_topology, topology  # noqa: E402

#: The user code; argv: side (xtc|h5mdtool), work, topology, trajectory. Prints JSON: seconds
#: to open the Universe, wall and CPU seconds of the work.
WORK = (
    "import json, sys, time, warnings; warnings.simplefilter('ignore')\n"
    "import numpy as np, MDAnalysis as mda; from MDAnalysis.analysis import rms\n"
    "import h5mdtool.mdanalysis as h5mda\n"
    "side, work, top, path = sys.argv[1:5]\n"
    "started = time.perf_counter()\n"
    "u = mda.Universe(top, path) if side == 'xtc' else h5mda.Universe(path, topology=top)\n"
    "opened, cpu = time.perf_counter(), time.process_time()\n"
    "if work == 'iterate':\n"
    "    for ts in u.trajectory: pass\n"
    "elif work == 'random':\n"
    "    for i in np.random.default_rng(2026).integers(0, len(u.trajectory), 1000): u.trajectory[int(i)]\n"
    "elif work == 'rmsd':\n"
    "    rms.RMSD(u, select='name CA').run()\n"
    "elif work == 'rmsf':\n"
    "    rms.RMSF(u.select_atoms('name CA')).run()\n"
    "print(json.dumps({'open': opened - started, 'seconds': time.perf_counter() - opened,\n"
    "                  'cpu': time.process_time() - cpu}))\n"
)
#: Conversions measured: label -> h5mdtool convert options.
LAYOUTS = {
    "uncompressed": [],
    "precision 0.001": ["--precision", "0.001"],
    "gzip": ["--compression", "gzip"],
    "zstd": ["--compression", "zstd"],
}
#: Conversions of AdK whose random access is printed without a target (the advised layout).
RANDOM_ACCESS_LAYOUTS = {
    "precision 0.001, 4-frame chunks": ["--precision", "0.001", "--chunk-frames", "4"],
    "zstd, 4-frame chunks": ["--compression", "zstd", "--chunk-frames", "4"],
}


def converted(xtc, options):
    """*xtc* converted by ``h5mdtool convert`` with *options* (next to it; made once)."""
    stem = os.path.splitext(os.path.basename(xtc))[0]
    suffix = "_".join(option.lstrip("-") for option in options)
    path = os.path.join(DATA, f"mda_{stem}{'_' + suffix if suffix else ''}.h5md")
    if not os.path.exists(path):
        subprocess.run([H5MDTOOL, "convert", xtc, "-o", path + ".partial.h5md", "--no-progress", "--force", *options],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(path + ".partial.h5md", path)
    return path


def _measure(arguments):
    env = {key: value for key, value in os.environ.items() if key != "HDF5_USE_FILE_LOCKING"}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return json.loads(output_of([sys.executable, "-c", WORK, *arguments], env).strip().splitlines()[-1])


def timed_work(entries, repeat):
    """Medians (work wall, CPU, open) of each (key, label, arguments), interleaved over
    *repeat* rounds; the files each run reads are read into the page cache just before it."""
    runs = {entry[0]: [] for entry in entries}
    for _ in range(repeat):
        for key, _, arguments in entries:
            warm_inputs(arguments)
            runs[key].append(_measure(arguments))
    results = {}
    for key, label, arguments in entries:
        got = runs[key]
        median = {name: statistics.median(run[name] for run in got) for name in ("seconds", "cpu", "open")}
        walls = ", ".join(f"{run['seconds']:.2f}" for run in got)
        print(f"  {label:<52s} {median['seconds']:7.3f} s  CPU {median['cpu']:7.3f} s  open {median['open']:5.2f} s"
              f"  (runs: {walls})", flush=True)
        results[key] = {"label": label, "arguments": arguments, **median, "runs": got}
    return results


def bench_system(name, xtc, top, repeat, random_layouts=()):
    """Every work on the XTC and on each conversion of *xtc*, and random access on the
    conversions *random_layouts* (labels -> options) too; the checks against the targets."""
    files = {label: converted(xtc, options) for label, options in LAYOUTS.items()}
    extra = {label: converted(xtc, options) for label, options in dict(random_layouts).items()}
    print(f"\n== MDAnalysis through h5mdtool.mdanalysis, {name}", flush=True)
    _measure(["xtc", "iterate", top, xtc])  # MDAnalysis's XTC offsets, made once and stored beside the XTC
    result = {"system": name, "xtc": xtc, "checks": []}
    for work in ("iterate", "random", "rmsd", "rmsf"):
        chosen = {**files, **extra} if work == "random" else files
        entries = [("xtc", f"{work}: MDAnalysis on the XTC", ["xtc", work, top, xtc])]
        entries += [(label, f"{work}: through h5mdtool.mdanalysis, {label}", ["h5mdtool", work, top, path])
                    for label, path in chosen.items()]
        measured = timed_work(entries, repeat)
        result[work] = measured
        xtc_wall, xtc_cpu = measured["xtc"]["seconds"], measured["xtc"]["cpu"]
        for label in files:
            mine = measured[label]
            if work == "random":
                cpu_ratio = mine["cpu"] / xtc_cpu
                outcome = check(f"{name}: random frames, {label} / XTC", mine["seconds"] / xtc_wall, 1.5,
                                higher_is_better=False)
            else:
                cpu_ratio = xtc_cpu / mine["cpu"]
                outcome = check(f"{name}: {work}, XTC / {label}", xtc_wall / mine["seconds"], 3.0)
            outcome["cpu_ratio"] = cpu_ratio
            print(f"     (CPU seconds, same ratio: {cpu_ratio:.2f})", flush=True)
            result["checks"].append(outcome)
        if work == "random":
            for label in extra:
                print(f"  -> {name}: random frames, {label} / XTC: "
                      f"{measured[label]['seconds'] / xtc_wall:.2f} (no target; CPU {measured[label]['cpu'] / xtc_cpu:.2f})",
                      flush=True)
    return result


def mpi_backend_hook():
    """Where the MPIBackend target (2 ranks >= 1.7x faster than 1) is measured, if anywhere.

    It needs ``h5mdtool.mdanalysis.backend``; ``bench_mdanalysis_backend.py`` measures it
    (``make bench`` runs every ``bench_*.py``). Returns what was found, for the results.
    """
    backend = os.path.join(ROOT, "h5mdtool", "mdanalysis", "backend.py")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_mdanalysis_backend.py")
    if os.path.exists(backend) and os.path.exists(script):
        note = "MPIBackend, 2 ranks over 1: measured by bench_mdanalysis_backend.py"
    elif os.path.exists(backend):
        note = "MPIBackend, 2 ranks over 1: NOT MEASURED (h5mdtool.mdanalysis.backend exists, its benchmark does not)"
    else:
        note = "MPIBackend, 2 ranks over 1: NOT MEASURED (no h5mdtool.mdanalysis.backend in this h5mdtool)"
    print(f"\n  -> {note}", flush=True)
    return note


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="AdK 100x and the solvated system's 300 frames")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every measurement (median reported)")
    args = parser.parse_args()
    repeats, copies = (100, 30) if args.quick else (600, 100)
    runs = [bench_system(f"AdK {repeats}x", repeated_xtc(repeats), topology(), args.repeat, RANDOM_ACCESS_LAYOUTS),
            bench_system(f"solvated AdK {copies * 10} frames", repeated_solvated_xtc(copies), solvated_topology(),
                         args.repeat)]
    document = {"machine": machine(), "load_average": os.getloadavg(), "runs": runs, "mpi_backend": mpi_backend_hook()}
    save("mdanalysis_quick" if args.quick else "mdanalysis", document)


if __name__ == "__main__":
    main()
