"""Rank scaling of ``h5mdtool bench rmsd``: 2 ranks against 1, the serial part, the model.

On the AdK trajectory (600x: 58,800 frames; 100x with ``--quick``): the uncompressed H5MD
``convert -t adk.psf`` writes (``bench rmsd`` reads the topology stored in it, as a user's
``bench rmsd md.h5md`` does), the XTC itself, and the XTC split into 2 parts
(``split --nparts 2``), these two with ``-t adk.psf``.
Each input is run by ``h5mdtool bench rmsd`` (fit ``name CA``, blocks engine, ``--repeat 1``,
so every run pays a fresh process's imports as a user's does) under ``mpirun -n 1`` and
``-n 2`` with each rank bound to its own core, in turns (1, 2, 1, 2, ...); the figures are
the reports' ``t_total`` (median of the runs), from the command's first timed phase to the
last rank's end.

* E(2) = t(1) / (2 t(2)): target >= 0.9 on each input;
* the serial part (rank 0 alone resolving the analysis while the other rank waits: the
  2-rank reports' ``t_serial``) against the 1-rank ``t_total``: target <= 2%;
* the scaling model of ``h5mdtool bench report --model`` (``h5mdtool/bench/model.py``),
  fitted on the fastest 1- and 2-rank runs: its t(2) against the median measured t(2)
  (target within 10%), and at 600x its E(16) for the H5MD and the XTC at 6000x (target >= 0.8),
  taking this machine's 600x phases with the parallel work (``t_io + t_compute``) ten times
  larger and every other phase as measured: an extrapolation, printed as such.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_rmsd import with_topology  # noqa: E402
from common import H5MDTOOL, check, mpirun_bound, output_of, run_sizes, warm_inputs  # noqa: E402
from data import DATA, repeated_xtc, topology  # noqa: E402

from h5mdtool.bench.model import fit, predict  # noqa: E402

#: Growth of the parallel work from the 600x inputs to the 6000x ones the E(16) target names.
WORK_SCALE_6000X = 10


def split_parts(xtc, repeats):
    """The XTC split into 2 parts (a directory with manifest.json), made once."""
    out = os.path.join(DATA, f"scaling_{repeats}x_parts")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        subprocess.run([H5MDTOOL, "split", xtc, "--nparts", "2", "-o", out, "--force", "--no-progress"],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def bench_report(path, n_ranks, report):
    """One ``bench rmsd`` run on *n_ranks* ranks (one core each); its report's only run.
    An H5MD input carries its topology; the others are given the PSF."""
    stored = path.endswith(".h5md")
    command = mpirun_bound(n_ranks) + [H5MDTOOL, "bench", "rmsd", path, *([] if stored else ["-t", topology()]),
                                       "--no-progress", "--out", report, "--force"]
    warm_inputs(command)
    output_of(command)
    with open(report) as handle:
        document = json.load(handle)
    return document["runs"][0]


def scaled(parameters, factor):
    """Model parameters with the parallel work *factor* times larger (the 1-rank time too)."""
    grown = dict(parameters, p=parameters["p"] * factor)
    one = grown["s"] + grown["q"] + grown["c"] + grown["p"] + grown.get("o", 0.0)
    grown["measured"] = {1: one}
    return grown


def bench_input(label, path, repeat, scratch):
    runs = {1: [], 2: []}
    for number in range(repeat):
        for n_ranks in runs:
            runs[n_ranks].append(bench_report(path, n_ranks, os.path.join(scratch, f"{n_ranks}-{number}.json")))
    t = {n: statistics.median(run["t_total"] for run in runs[n]) for n in runs}
    serial_2 = statistics.median(run["t_serial"] for run in runs[2])
    for n in runs:
        totals = ", ".join(f"{run['t_total']:.2f}" for run in runs[n])
        serials = ", ".join(f"{run['t_serial']:.3f}" for run in runs[n])
        print(f"  {label}, {n} rank{'s' if n > 1 else ''}: t_total {t[n]:6.2f} s  (runs: {totals}; "
              f"serial part: {serials} s)", flush=True)
    parameters = fit(runs)
    model_2 = predict(parameters, 2)["log"]["t_total"]
    result = {"runs": runs, "t_total": t, "efficiency_2": t[1] / (2 * t[2]), "serial_2": serial_2,
              "serial_over_t1": serial_2 / t[1], "model": parameters, "model_t2": model_2,
              "model_t2_over_measured": model_2 / t[2]}
    result["model_e16"] = predict(parameters, 16)["log"]["efficiency"]
    print(f"  .. model: s {parameters['s']:.3f} s, q {parameters['q']:.3f} s, o {parameters['o']:.3f} s, "
          f"r {parameters['r']:.2f}, p {parameters['p']:.3f} s, "
          f"k {parameters['k']:.2f}, a {parameters['a']:.3f} s; t(2) {model_2:.2f} s against {t[2]:.2f} s measured; "
          f"E(16) at this size {result['model_e16']:.2f}", flush=True)
    return result


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    inputs = {"H5MD, uncompressed": with_topology(xtc, repeats), "XTC": xtc, "XTC, 2 parts": split_parts(xtc, repeats)}
    print(f"\n== bench rmsd scaling, AdK {repeats}x, 1 and 2 ranks (one core each)", flush=True)
    result = {"repeats": repeats, "inputs": {}}
    checks = []
    scratch = tempfile.mkdtemp(prefix="h5mdtool-scaling-")
    try:
        for label, path in inputs.items():
            measured = result["inputs"][label] = bench_input(label, path, repeat, scratch)
            checks.append(check(f"{label}: E(2)", measured["efficiency_2"], 0.9))
            checks.append(check(f"{label}: serial part at 2 ranks / 1-rank t_total", measured["serial_over_t1"],
                                0.02, higher_is_better=False))
            checks.append(check(f"{label}: model t(2) off the measured t(2) by (fraction)",
                                abs(measured["model_t2_over_measured"] - 1), 0.1, higher_is_better=False))
            if label in ("H5MD, uncompressed", "XTC") and repeats == 600:
                grown = scaled(measured["model"], WORK_SCALE_6000X)
                e16 = measured["e16_6000x"] = predict(grown, 16)["log"]["efficiency"]
                checks.append(check(f"{label}: modelled E(16) at 6000x (600x phases here, parallel work x"
                                    f"{WORK_SCALE_6000X})", e16, 0.8))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["checks"] = checks
    return result


def main():
    run_sizes(__doc__, bench, "scaling")


if __name__ == "__main__":
    main()
