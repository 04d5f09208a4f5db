"""Helpers shared by the benchmark scripts: timing whole commands, peak memory, results."""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from data import DATA

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
VENV_BIN = os.path.dirname(sys.executable)
H5MDTOOL = os.path.join(VENV_BIN, "h5mdtool")
MPIRUN = os.path.join(ROOT, "tools", "mpirun.sh")
# Every benchmark times the scans of XTC inputs as a first run sees them: the offsets cache
# (h5mdtool.formats.offsetcache) is off unless a benchmark turns it on (bench_inspect.py
# times a lookup), so figures do not depend on what an earlier run left in it.
os.environ.setdefault("H5MDTOOL_OFFSETS_CACHE", "off")

#: One process on one core (``taskset``): h5mdtool then compresses and decompresses in one
#: thread, the per-core baseline of rank scaling.
ONE_CORE = ["taskset", "-c", "0"]


def mpirun_bound(n_ranks):
    """``mpirun -n N`` with each rank bound to its own core (Open MPI's and MPICH's flag)."""
    return [MPIRUN, "-n", str(n_ranks), "--bind-to", "core"]


def mpirun_unbound(n_ranks):
    """``mpirun -n N`` with every rank free to run on every core.

    Open MPI binds each rank to a core by default when there are at most 2 ranks, so a
    plain ``mpirun -n 1`` confines h5mdtool's threads (decoding, compression) to one core.
    """
    return [MPIRUN, "-n", str(n_ranks), "--bind-to", "none"]

_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "t = time.perf_counter() - t\n"
    "print(t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
)


_WRITE_BYTES = (
    "import sys\n"
    "size, piece = int(sys.argv[2]), int(sys.argv[3])\n"
    "block = memoryview(bytes(piece))\n"
    "with open(sys.argv[1], 'wb', buffering=0) as handle:\n"
    "    for offset in range(0, size, piece):\n"
    "        handle.write(block[: size - offset])\n"
)


def write_bytes_command(path, size, piece=4 << 20):
    """A command writing *size* zero bytes into a new file at *path*, *piece* bytes per ``write``.

    Timed next to a converter, it shows what the machine charges for putting that many
    bytes into the page cache of a new file, whoever writes them. The size of each write
    matters on some machines (see docs/performance.md), so pass the size the converter uses.
    """
    return [sys.executable, "-c", _WRITE_BYTES, path, str(size), str(piece)]


def run(command, env=None):
    """Run *command* once; return (seconds, peak RSS of its largest process in MiB).

    A fresh wrapper process measures it, so ``ru_maxrss`` covers this command only.
    """
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE] + list(command),
        capture_output=True, text=True, env=env,
    )
    try:
        seconds, maxrss, code = done.stdout.split()
    except ValueError:
        raise RuntimeError(f"benchmark wrapper failed: {done.stderr}") from None
    if int(code) != 0:
        raise RuntimeError(f"command failed ({code}): {' '.join(command)}")
    return float(seconds), int(maxrss) / 1024.0


def output_of(command, env=None):
    """Run *command* once and return its standard output; a failure raises with the end of
    its standard error."""
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return done.stdout


def _named_inputs(arguments, outputs=()):
    """The benchmark inputs a command line names: its arguments that are files under
    ``benchmarks/data``, and the files of a directory there (a split trajectory; its
    ``manifest.json`` stands for them too), *outputs* left out."""
    skipped = {os.path.abspath(path) for path in outputs}
    found = []
    for argument in arguments:
        path = os.path.abspath(str(argument))
        if path in skipped or not path.startswith(DATA + os.sep):
            continue
        if os.path.basename(path) == "manifest.json":
            path = os.path.dirname(path)
        if os.path.isdir(path):
            found += [os.path.join(path, name) for name in sorted(os.listdir(path))
                      if os.path.isfile(os.path.join(path, name))]
        elif os.path.isfile(path):
            found.append(path)
    return found


def warm(paths):
    """Read each file of *paths* whole, so that a run timed next finds it in the page cache.

    This machine's kernel pages out page-cache pages left idle for a minute (see
    :func:`proactive_reclaim`), and inputs a few GB large push each other out: an input
    read only before the first of several runs can be read from the disk by a later one.
    Reading it just before each run costs untimed seconds and keeps every timed run on
    the page cache, where the figures are set.
    """
    block = bytearray(16 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(block):
                pass


def warm_inputs(arguments, outputs=()):
    """:func:`warm` the benchmark inputs command line *arguments* names (files and split
    directories under ``benchmarks/data``), its *outputs* left out."""
    warm(_named_inputs(arguments, outputs))


def timed(label, command, repeat=1, env=None, outputs=()):
    """Run *command* *repeat* times; print and return the median time and peak memory.

    Before each run the *outputs* are removed and dirty pages flushed (``os.sync``), so no
    run pays for writing back the previous run's output, and the inputs it names are
    read into the page cache (:func:`warm_inputs`).
    """
    return timed_interleaved([(None, label, command)], repeat, env=env, outputs=outputs)[None]


def timed_interleaved(entries, repeat=1, env=None, outputs=()):
    """Time several commands in turn, *repeat* rounds: A B A B ... (medians, as :func:`timed`).

    A ratio of two commands is measured best this way on a noisy machine: a slow spell
    (another job, the disk writing back) touches both instead of one.

    Parameters
    ----------
    entries : list of (key, label, command)
    repeat : int
    env : dict, optional
        Environment of the commands.
    outputs : paths removed (and flushed) before every run
        The inputs each command names are read into the page cache before it runs (:func:`warm_inputs`).

    Returns
    -------
    dict
        key -> ``{"label", "command", "seconds" (median), "runs", "peak_mib"}``.
    """
    times = {key: [] for key, _, _ in entries}
    peaks = {key: [] for key, _, _ in entries}
    for _ in range(repeat):
        for key, _, command in entries:
            for path in outputs:
                remove(path)
            os.sync()
            warm_inputs(command, outputs)
            seconds, peak = run(command, env=env)
            times[key].append(seconds)
            peaks[key].append(peak)
    results = {}
    for key, label, command in entries:
        median = statistics.median(times[key])
        runs = ", ".join(f"{t:.2f}" for t in times[key])
        print(f"  {label:<58s} {median:8.2f} s  (runs: {runs}; peak {max(peaks[key]):.0f} MiB)", flush=True)
        results[key] = {"label": label, "command": " ".join(command), "seconds": median, "runs": times[key],
                        "peak_mib": max(peaks[key])}
    return results


def check(name, value, target, higher_is_better=True):
    ok = value >= target if higher_is_better else value <= target
    relation = ">=" if higher_is_better else "<="
    print(f"  -> {name}: {value:.2f} (target {relation} {target}) {'PASS' if ok else 'MISS'}", flush=True)
    return {"name": name, "value": value, "target": target, "relation": relation, "pass": ok}


def save(name, document):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as handle:
        json.dump(document, handle, indent=2)
    print(f"  results: {os.path.relpath(path, ROOT)}")
    return path


def machine():
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0], "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "free_page_reporting": free_page_reporting(), "proactive_reclaim": proactive_reclaim()}


def proactive_reclaim(admin="/sys/kernel/mm/damon/admin/kdamonds"):
    """The kernel's DAMON schemes that page out memory left idle, or None (none running).

    Where one runs, page-cache pages of an input not read for a while are written out of
    memory, and the next run reads them from the disk: a benchmark's input is in the page
    cache only if it was read shortly before. Each scheme: the minimum idle time (s), the
    accesses per aggregation interval at most, and the bytes it may page out per second.
    """
    def value(*parts):
        with open(os.path.join(admin, *parts)) as handle:
            return handle.read().strip()

    schemes = []
    try:
        kdamonds = sorted(name for name in os.listdir(admin) if name.isdigit())
    except OSError:
        return None
    for kdamond in kdamonds:
        try:
            if value(kdamond, "state") != "on":
                continue
            for context in sorted(os.listdir(os.path.join(admin, kdamond, "contexts"))):
                if not context.isdigit():
                    continue
                base = (kdamond, "contexts", context)
                aggregation_us = int(value(*base, "monitoring_attrs", "intervals", "aggr_us"))
                for scheme in sorted(os.listdir(os.path.join(admin, *base, "schemes"))):
                    if not scheme.isdigit() or value(*base, "schemes", scheme, "action") != "pageout":
                        continue
                    pattern = (*base, "schemes", scheme, "access_pattern")
                    quota = (*base, "schemes", scheme, "quotas")
                    schemes.append({
                        "min_idle_s": int(value(*pattern, "age", "min")) * aggregation_us / 1e6,
                        "max_accesses": int(value(*pattern, "nr_accesses", "max")),
                        "bytes_per_s": int(value(*quota, "bytes")) * 1000 // max(1, int(value(*quota, "reset_interval_ms"))),
                    })
        except (OSError, ValueError):
            continue
    return schemes or None


def free_page_reporting(directory="/sys/module/page_reporting/parameters"):
    """Settings of a VM's free page reporting (freed memory given back to the host), or None.

    Where it is on, a page the kernel hands out again (to the page cache of a new file, say)
    may first have to be faulted in by the host, which makes writing large files slower.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    settings = {}
    for name in names:
        try:
            with open(os.path.join(directory, name)) as handle:
                settings[name] = handle.read().strip()
        except OSError:
            continue
    return settings


def remove(path):
    import shutil

    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def run_sizes(description, bench, name):
    """Command line of a benchmark: ``bench(repeats, repeat)`` on 100x, and 600x unless --quick."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100x trajectory only")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the fast commands (median reported)")
    args = parser.parse_args()
    runs = [bench(repeats, args.repeat) for repeats in ([100] if args.quick else [100, 600])]
    return save(f"{name}_quick" if args.quick else name, {"machine": machine(), "runs": runs})
