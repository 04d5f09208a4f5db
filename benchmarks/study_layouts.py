"""The compression study (issue 13, part 1): size, write and read speed of H5MD layouts.

Positions are those MDAnalysis's XTC decoder returns for the benchmark trajectories (the
oracle every error is measured against). Phases (``--phases``, all by default):

``sweep``      every candidate of ``layout_candidates.py`` at 32-frame chunks, written
               serially in-process: size relative to the XTC of the same frames, write time,
               maximum error, and reading every frame as a block reader does (whole chunks,
               ``read_direct`` into a reused buffer, integers converted to float32 nm; all
               atoms and the C-alpha span), next to MDAnalysis's XTC decoder on the same
               frames. AdK 100x and the solvated system.
``chunks``     chunk frames 1 to 64 for the short list.
``precision``  Q = 0.01 and 0.0001 nm (bound Q/2), sizes against an XTC written at that
               precision.
``finalists``  AdK 600x: size, block reads, and the whole ``h5mdtool bench rmsd`` command
               against MDAnalysis's ``rms.RMSD`` on the XTC (with the RMSD compared).
``mdanalysis`` MDAnalysis's H5MDReader reading every frame of the finalists (AdK 100x and
               solvated), checked against MDAnalysis reading the XTC.
``parallel``   AdK 100x, compressed layouts: HDF5's collective filtered write on 1 and 2
               ranks against compressing in our own threads + direct chunk write
               (``study_parallel_write.py``), with per-round timelines.

Repetitions interleave the candidates (A B C A B C ...); medians and every run are kept in
``benchmarks/results/study_layouts[_quick].json``; ``study_report.py`` turns that into the
tables and the plot of docs/layouts.md and docs/performance.md. ``--quick``: AdK 10x and
a 60-frame solvated system, fewer candidates; a smoke test of the whole pipeline.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import MPIRUN, RESULTS, machine, remove, save, timed_interleaved  # noqa: E402
from data import repeated_solvated_xtc, repeated_xtc, topology  # noqa: E402
from layout_candidates import XTC_GRID_NM, candidates, max_error_nm, read_blocks, write_file  # noqa: E402

CACHE = os.path.join(RESULTS, "study_cache")
FILES = os.path.join(RESULTS, "study_files")  # with _quick for --quick (set in main)
SHORT_LIST = ["f32-none", "i32-shuffle-gzip4", "i32-shuffle-zstd3", "i32-bshuf-lz4", "i32-blosc2-shuffle-zstd5",
              "i32-blosc2-bitshuffle-zstd5", "f32-sz-abs", "f32-blosc2-bitshuffle-zstd1"]
PRECISION_KEYS = ["f32-sz-abs", "f32-sz3-abs", "f32-zfp-acc", "i32-shuffle-gzip4", "i32-shuffle-zstd3",
                  "i32-bshuf-lz4", "i32-blosc2-bitshuffle-zstd5", "i32-blosc2-shuffle-zstd5"]
FINALISTS = ["f32-none", "f32-shuffle-gzip4", "f32-so3-gzip4", "i32-shuffle-gzip4", "i32-shuffle-zstd3",
             "i32-bshuf-lz4", "i32-blosc2-shuffle-zstd5", "i32-blosc2-bitshuffle-zstd5", "f32-sz-abs",
             "f32-blosc2-bitshuffle-zstd1", "f32-bshuf-lz4"]
MDA_CHUNKED = ["f32-none", "i32-shuffle-gzip4", "i32-bshuf-lz4"]
QUICK_SKIP = ("bzip2", "zstd19", "gzip9", "gzip6")
CHUNKS = [1, 4, 8, 16, 32, 64]
PRECISIONS = [0.01, 0.0001]
MDA_RMSD = (
    "import sys, warnings; warnings.simplefilter('ignore')\n"
    "import numpy as np\n"
    "import MDAnalysis as mda; from MDAnalysis.analysis import rms\n"
    "r = rms.RMSD(mda.Universe(sys.argv[1], sys.argv[2]), select='name CA').run()\n"
    "if len(sys.argv) > 3: np.save(sys.argv[3], r.results.rmsd[:, 2])\n"
)


def plugin_env():
    """The environment with HDF5_PLUGIN_PATH set to hdf5plugin's filters.

    That is how a program that does not ``import hdf5plugin`` (h5mdtool today, MDAnalysis,
    h5dump) finds the filters.
    """
    import hdf5plugin

    return dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def log(message):
    print(message, flush=True)


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


# --- inputs ------------------------------------------------------------------------------

def decode_xtc(path):
    """Every frame of *path* as MDAnalysis's XTC decoder returns it (float32 nm), and steps/times."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(path) as xtc:
        n_frames = len(xtc.offsets)
        xtc.seek(0)
        first = xtc.read()
        positions = np.empty((n_frames,) + first.x.shape, np.float32)
        steps = np.empty(n_frames, np.int64)
        times = np.empty(n_frames, np.float64)
        xtc.seek(0)
        for i in range(n_frames):
            frame = xtc.read()
            positions[i], steps[i], times[i] = frame.x, frame.step, frame.time
    return positions, steps, times


def write_xtc(path, positions, steps, times, precision=1000.0, box=None):
    """Write *positions* (nm) as an XTC at *precision* with MDAnalysis's writer; return its size."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    box = np.zeros((3, 3), np.float32) if box is None else box
    partial = path + ".partial"
    with XTCFile(partial, "w") as xtc:
        for x, step, t in zip(positions, steps, times):
            xtc.write(np.array(x), box, int(step), float(t), precision)
    os.replace(partial, path)
    return os.path.getsize(path)


def solvated_xtc(copies):
    """MDAnalysisTests' solvated AdK (47681 atoms, 10 frames) repeated *copies* times as one XTC.

    Each copy is shifted by a different whole number of XTC grid steps (0.001 nm) along
    each axis, so no two frames of the repeated trajectory are identical; steps and times
    keep increasing. That is not enough for chunks of more than 10 frames (see
    :func:`max_chunk`): the study keeps the solvated system's chunks at 8 frames or fewer.
    """
    return repeated_solvated_xtc(copies, CACHE, box=False)


def dataset(name, xtc, topology_path):
    """Decoded positions (cached as .npy), XTC size and the C-alpha span of one input."""
    import MDAnalysis as mda

    os.makedirs(CACHE, exist_ok=True)
    npy = os.path.join(CACHE, f"{name}.positions.npy")
    if not os.path.exists(npy) or os.path.getmtime(npy) < os.path.getmtime(xtc):
        positions, steps, times = decode_xtc(xtc)
        np.save(npy + ".partial.npy", positions)
        os.replace(npy + ".partial.npy", npy)
        np.save(os.path.join(CACHE, f"{name}.steps.npy"), steps)
        np.save(os.path.join(CACHE, f"{name}.times.npy"), times)
    positions = np.load(npy, mmap_mode="r")
    ca = mda.Universe(topology_path).select_atoms("name CA").indices
    return {"name": name, "xtc": xtc, "topology": topology_path, "npy": npy, "positions": positions,
            "n_frames": int(positions.shape[0]), "n_atoms": int(positions.shape[1]),
            "xtc_bytes": os.path.getsize(xtc), "ca_span": (int(ca.min()), int(ca.max()) + 1), "n_ca": len(ca)}


def xtc_bytes_at(data, q_nm):
    """Size of an XTC of *data*'s frames written at precision 1/q_nm (cached)."""
    path = os.path.join(CACHE, f"{data['name']}_q{q_nm:g}.xtc")
    if not os.path.exists(path):
        steps = np.load(os.path.join(CACHE, f"{data['name']}.steps.npy"))
        times = np.load(os.path.join(CACHE, f"{data['name']}.times.npy"))
        write_xtc(path, data["positions"], steps, times, precision=1.0 / q_nm)
    return os.path.getsize(path)


def time_xtc_decoder(xtc):
    """Seconds for MDAnalysis's XTC decoder to decode every frame into a reused buffer."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(xtc) as handle:
        n_frames = len(handle.offsets)
        handle.seek(0)
        n_atoms = handle.read().x.shape[0]
        handle.seek(0)
        buffer = np.empty((n_atoms, 3), np.float32)
        started = time.perf_counter()
        for _ in range(n_frames):
            handle.read_direct_x(buffer)
        return time.perf_counter() - started


# --- measurements ------------------------------------------------------------------------

def max_chunk(data):
    """Largest fair chunk: the solvated system repeats 10 real frames, so a chunk of more than
    10 frames holds a frame and its (shifted) copy, which long-window codecs (zstd) exploit
    (measured: shuffle + Zstd 3 fell from 1.22x the XTC at 16 frames to 1.00x at 64)."""
    return 8 if data["name"].startswith("solvated") else max(CHUNKS)


def sweep_chunk(data):
    return min(32, max_chunk(data))


def file_path(data, key, chunk, q_nm):
    os.makedirs(FILES, exist_ok=True)
    return os.path.join(FILES, f"{data['name']}-{key}-c{chunk}-q{q_nm:g}.h5md")


def use_files_directory(quick):
    """Written files of --quick runs and full runs live apart (each run removes its own)."""
    global FILES
    FILES = os.path.join(RESULTS, "study_files_quick" if quick else "study_files")


def stored_range(candidate, positions):
    if not candidate.nbit:
        return None
    low = high = 0
    for first in range(0, len(positions), 4096):
        block = candidate.representation.encode(positions[first:first + 4096])
        low, high = min(low, int(block.min())), max(high, int(block.max()))
    return (low, high)


def measure_serial(data, entries, repeat, q_nm, phase, read_repeat=3):
    """Write (serial, in-process) each (candidate, chunk), then read them all in turn.

    Writes: *repeat* rounds over the entries (A B C A B C). Reads: *read_repeat* rounds over
    the written files, each a block read of all atoms and of the C-alpha span, with
    MDAnalysis's XTC decoder on the same frames in every round as the reference. Returns
    one row per entry: size, ratio to the XTC (written at precision 1/*q_nm*), maximum
    error against the XTC-decoded positions, and the timings (median, min, max, runs).
    """
    from h5mdtool.parallel.mpi import SerialComm

    comm = SerialComm()
    positions = np.asarray(data["positions"])  # into memory: the write times exclude the disk
    xtc_bytes = data["xtc_bytes"] if abs(q_nm - XTC_GRID_NM) < 1e-12 else xtc_bytes_at(data, q_nm)
    rows = {(c.key, chunk): {"phase": phase, "dataset": data["name"], "key": c.key, "label": c.label,
                             "needs": c.needs, "family": c.family, "representation": c.representation.name,
                             "chunk_frames": chunk, "q_nm": q_nm, "bound_nm": c.bound_nm, "write": [],
                             "read_all": [], "read_ca": [], "error": None, "notes": c.notes}
            for c, chunk in entries}
    load = [os.getloadavg()[0]]
    for rep in range(repeat):
        for candidate, chunk in entries:
            row = rows[(candidate.key, chunk)]
            if row["error"]:
                continue
            path = file_path(data, candidate.key, chunk, q_nm)
            remove(path)
            try:
                result = write_file(path, candidate, positions, chunk, comm,
                                    stored_range=stored_range(candidate, positions))
            except Exception as error:  # noqa: BLE001 - a candidate that fails is reported, not fatal
                row["error"] = f"{type(error).__name__}: {error}"
                log(f"  {candidate.key} chunks {chunk}: FAILED {row['error']}")
                remove(path)
                continue
            row["write"].append(result["seconds"])
            if rep == 0:
                row["bytes"] = os.path.getsize(path)
                row["size_vs_xtc"] = row["bytes"] / xtc_bytes
                row["max_error_nm"] = max_error_nm(path, positions)
                row["within_bound"] = (row["max_error_nm"] <= (row["bound_nm"] or 0.0) + 1e-9
                                       if row["bound_nm"] is not None else row["max_error_nm"] < 1e-6)
    decoder = []
    for _ in range(read_repeat):
        decoder.append(time_xtc_decoder(data["xtc"]))
        for candidate, chunk in entries:
            row = rows[(candidate.key, chunk)]
            if row["error"]:
                continue
            path = file_path(data, candidate.key, chunk, q_nm)
            row["read_all"].append(read_blocks(path)[0])
            row["read_ca"].append(read_blocks(path, span=data["ca_span"])[0])
    load.append(os.getloadavg()[0])
    out = []
    for row in rows.values():
        for name in ("write", "read_all", "read_ca"):
            row[name] = spread(row[name])
        out.append(row)
        if not row["error"]:
            log(f"  {row['key']:<32s} c{row['chunk_frames']:<3d} {row['size_vs_xtc']:6.3f}x XTC  "
                f"err {row['max_error_nm']:.2e} write {row['write']['median']:6.2f} s  read all "
                f"{row['read_all']['median']:6.3f} s  CA {row['read_ca']['median']:6.3f} s")
    log(f"  XTC decoder (MDAnalysis): {statistics.median(decoder):.3f} s; load average {load[0]:.1f} -> {load[1]:.1f}")
    return {"dataset": data["name"], "q_nm": q_nm, "xtc_bytes": xtc_bytes, "n_frames": data["n_frames"],
            "n_atoms": data["n_atoms"], "xtc_decoder": spread(decoder), "load_average": load, "rows": out}


def run_bench_rmsd(data, keys, chunk, repeat):
    """Whole ``h5mdtool bench rmsd`` commands on the finalists vs MDAnalysis's rms.RMSD on the XTC."""
    from common import H5MDTOOL

    reference = os.path.join(CACHE, f"{data['name']}.mda_rmsd.npy")
    entries = [("mda_xtc", "MDAnalysis rms.RMSD (CA) on the XTC",
                [sys.executable, "-c", MDA_RMSD, data["topology"], data["xtc"], reference])]
    outputs = {}
    for key in keys:
        path = file_path(data, key, chunk, XTC_GRID_NM)
        outputs[key] = os.path.join(CACHE, f"{data['name']}-{key}.rmsd.npy")
        entries.append((key, f"h5mdtool bench rmsd, {key}",
                        [H5MDTOOL, "bench", "rmsd", path, "-t", data["topology"], "--no-progress", "--force",
                         "--rmsd-out", outputs[key]]))
    for _, _, command in entries:  # warm-up: offsets, page cache, imports
        subprocess.run(command, capture_output=True, env=plugin_env())
    timings = timed_interleaved(entries, repeat, env=plugin_env())
    expected = np.load(reference)
    rows = []
    for key in keys:
        got = np.load(outputs[key])
        got = got["rmsd"] if got.dtype.names else (got[:, -1] if got.ndim == 2 else got)
        rows.append({"key": key, "seconds": timings[key]["seconds"], "runs": timings[key]["runs"],
                     "vs_mda_xtc": timings["mda_xtc"]["seconds"] / timings[key]["seconds"],
                     "max_rmsd_difference_A": float(np.abs(got - expected).max())})
        log(f"  {key:<32s} bench rmsd {timings[key]['seconds']:.2f} s: {rows[-1]['vs_mda_xtc']:.2f}x faster than "
            f"MDAnalysis on the XTC; RMSD differs by {rows[-1]['max_rmsd_difference_A']:.2e} A")
    return {"mda_xtc": timings["mda_xtc"], "rows": rows}


MDA_READ = (
    "import sys, time, warnings; warnings.simplefilter('ignore')\n"
    "import numpy as np, MDAnalysis as mda\n"
    "top, h5md, xtc = sys.argv[1:4]\n"
    "u = mda.Universe(top, h5md)\n"
    "t = time.perf_counter()\n"
    "for ts in u.trajectory: pass\n"
    "seconds = time.perf_counter() - t\n"
    "v = mda.Universe(top, xtc)\n"
    "t = time.perf_counter()\n"
    "for ts in v.trajectory: pass\n"
    "xtc_seconds = time.perf_counter() - t\n"
    "worst = 0.0\n"
    "for a, b in zip(u.trajectory[::7], v.trajectory[::7]):\n"
    "    worst = max(worst, float(np.abs(u.atoms.positions - v.atoms.positions).max()))\n"
    "print(seconds, xtc_seconds, worst, len(u.trajectory))\n"
)


MDA_PROBE = (
    "import sys, warnings; warnings.simplefilter('ignore')\n"
    "import MDAnalysis as mda\n"
    "u = mda.Universe(sys.argv[1], sys.argv[2]); u.trajectory[0]; print(u.atoms.positions[0])\n"
)


def run_mdanalysis(data, entries, repeat):
    """MDAnalysis's H5MDReader iterating every frame of each file, next to its XTC reader.

    First a probe without HDF5_PLUGIN_PATH (does a plain MDAnalysis install read it?), then
    the timed runs with it.
    """
    rows = {}
    for key, chunk in entries:
        path = file_path(data, key, chunk, XTC_GRID_NM)
        probe = subprocess.run([sys.executable, "-c", MDA_PROBE, data["topology"], path], capture_output=True,
                               text=True, env={k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"})
        rows[(key, chunk)] = {"key": key, "chunk_frames": chunk, "dataset": data["name"], "seconds": [],
                              "xtc_seconds": [], "reads_without_plugin_path": probe.returncode == 0}
    for _ in range(repeat):
        for key, chunk in entries:
            path = file_path(data, key, chunk, XTC_GRID_NM)
            done = subprocess.run([sys.executable, "-c", MDA_READ, data["topology"], path, data["xtc"]],
                                  capture_output=True, text=True, env=plugin_env())
            row = rows[(key, chunk)]
            if done.returncode != 0:
                row["error"] = done.stderr.strip().splitlines()[-1]
                continue
            seconds, xtc_seconds, worst, n_frames = done.stdout.split()
            row["seconds"].append(float(seconds))
            row["xtc_seconds"].append(float(xtc_seconds))
            row["max_difference_A"] = float(worst)
            row["n_frames"] = int(n_frames)
    for row in rows.values():
        row["seconds"], row["xtc_seconds"] = spread(row["seconds"]), spread(row["xtc_seconds"])
        if row["seconds"]:
            log(f"  {row['key']:<32s} c{row['chunk_frames']:<3d} MDAnalysis reads every frame in "
                f"{row['seconds']['median']:6.2f} s (XTC {row['xtc_seconds']['median']:.2f} s), "
                f"max difference {row['max_difference_A']:.2e} A; without HDF5_PLUGIN_PATH: "
                f"{'reads' if row['reads_without_plugin_path'] else 'fails'}")
        else:
            log(f"  {row['key']} c{row['chunk_frames']}: MDAnalysis FAILED {row.get('error')}")
    return list(rows.values())


PARALLEL_KEYS = ["f32-shuffle-gzip4", "i32-shuffle-gzip4", "i32-shuffle-zstd3", "i32-bshuf-lz4",
                 "i32-blosc2-shuffle-zstd5", "i32-blosc2-bitshuffle-zstd5", "f32-blosc2-bitshuffle-zstd1",
                 "f32-sz-abs"]
#: (method, ranks, compression threads per rank) of study_parallel_write.py
PARALLEL_CONFIGS = [("hdf5", 1, 1), ("hdf5", 2, 1), ("pwrite", 1, 1), ("pwrite", 1, 2), ("pwrite", 2, 1),
                    ("gather", 2, 1)]


def run_parallel(data, keys, repeat, chunk=32):
    """Every (layout, method, ranks, threads) of study_parallel_write.py, interleaved."""
    runs = {}
    for rep in range(repeat):
        for key in keys:
            for method, ranks, threads in PARALLEL_CONFIGS:
                path = file_path(data, key, chunk, XTC_GRID_NM) + f".{method}"
                remove(path)
                os.sync()
                command = [MPIRUN, "-n", str(ranks), sys.executable, os.path.join(HERE, "study_parallel_write.py"),
                           data["npy"], key, method, path, "--chunk-frames", str(chunk), "--threads", str(threads)]
                # no HDF5_PLUGIN_PATH here: with it hdf5plugin leaves the filters to HDF5's
                # dynamic loading, whose Bitshuffle and Blosc2 fail to create datasets
                done = subprocess.run(command + (["--check"] if rep == 0 else []), capture_output=True, text=True)
                row = runs.setdefault((key, method, ranks, threads),
                                      {"key": key, "method": method, "ranks": ranks, "threads": threads,
                                       "seconds": [], "check": None})
                if done.returncode != 0:
                    row["error"] = done.stderr[-2000:]
                    log(f"  {key} {method} {ranks} ranks x {threads} threads FAILED")
                else:
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    row["seconds"].append(result["seconds"])
                    row["bytes"] = result["bytes"]
                    row["timelines"] = result["timelines"]
                    if "check" in result:
                        row["check"] = result["check"]
                remove(path)
    rows = list(runs.values())
    for row in rows:
        row["seconds"] = spread(row["seconds"])
    by = {(r["key"], r["method"], r["ranks"], r["threads"]): r for r in rows}
    for key in keys:
        base = by.get((key, "hdf5", 1, 1))
        parts = []
        for method, ranks, threads in PARALLEL_CONFIGS:
            r = by.get((key, method, ranks, threads))
            if r and r["seconds"]:
                parts.append(f"{method} {ranks}x{threads} {r['seconds']['median']:.2f} s"
                             + ("" if r["check"] in (True, None) else " CHECK FAILED"))
        log(f"  {key:<30s} " + "; ".join(parts))
        if base and base["seconds"]:
            for r in rows:
                if r["key"] == key and r["seconds"]:
                    r["speedup_vs_hdf5_1"] = base["seconds"]["median"] / r["seconds"]["median"]
    return rows


# --- main --------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small inputs, fewer candidates (smoke test)")
    parser.add_argument("--phases", default="sweep,chunks,precision,finalists,mdanalysis,parallel",
                        help="comma-separated phases to run (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions of the timed steps")
    parser.add_argument("--keys", default=None, help="comma-separated candidate keys for the sweep (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the written files under benchmarks/results/")
    args = parser.parse_args()
    phases = args.phases.split(",")
    import hdf5plugin  # noqa: F401 - registers the filters
    from MDAnalysisTests.datafiles import GRO

    name = "study_layouts_quick" if args.quick else "study_layouts"
    previous = os.path.join(RESULTS, f"{name}.json")
    document = json.load(open(previous)) if os.path.exists(previous) else {}
    document.setdefault("runs", {})
    document["machine"] = machine()

    def record(phase, value):
        document["runs"][phase] = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "result": value}
        save(name, document)

    use_files_directory(args.quick)
    small = repeated_xtc(10) if args.quick else repeated_xtc(100)
    adk = dataset("adk10" if args.quick else "adk100", small, topology())
    solvated = dataset("solvated60" if args.quick else "solvated300", solvated_xtc(6 if args.quick else 30), GRO)
    table = candidates()
    keys = args.keys.split(",") if args.keys else list(table)
    if args.quick and not args.keys:
        keys = [k for k in keys if not any(s in k for s in QUICK_SKIP)]

    # phases in order of importance: a run stopped early keeps the phases it recorded
    for data, label in ((adk, "sweep-adk"), (solvated, "sweep-solvated")):
        if "sweep" not in phases and label not in phases:
            continue
        chunk = sweep_chunk(data)
        log(f"\n== sweep, {data['name']}: {data['n_frames']} frames x {data['n_atoms']} atoms, XTC "
            f"{data['xtc_bytes'] / 1e6:.1f} MB; {chunk}-frame chunks")
        record(f"sweep-{data['name']}", measure_serial(data, [(table[k], chunk) for k in keys], 1, XTC_GRID_NM,
                                                       "sweep", read_repeat=args.repeat))
    if "finalists" in phases:
        big = adk if args.quick else dataset("adk600", repeated_xtc(600), topology())
        log(f"\n== finalists, {big['name']}: {big['n_frames']} frames, XTC {big['xtc_bytes'] / 1e6:.0f} MB")
        serial = measure_serial(big, [(table[k], 32) for k in FINALISTS], 1, XTC_GRID_NM, "finalists",
                                read_repeat=args.repeat)
        log("  bench rmsd (whole commands)")
        rmsd = run_bench_rmsd(big, FINALISTS, 32, args.repeat)
        record("finalists", {"serial": serial, "bench_rmsd": rmsd})
        if not args.keep and big is not adk:
            for key in FINALISTS:
                remove(file_path(big, key, 32, XTC_GRID_NM))
    if "parallel" in phases:
        log(f"\n== parallel compressed writes, {adk['name']}: HDF5 collective vs own threads + direct chunk write")
        record("parallel", run_parallel(adk, PARALLEL_KEYS, args.repeat))
    if "mdanalysis" in phases:
        result = {}
        for data in (adk, solvated):
            # MDAnalysis opens the dataset afresh for each read (twice per frame), so HDF5's
            # chunk cache never keeps a chunk: multi-frame chunks are decompressed whole for
            # every frame. 32-frame chunks only for three layouts on AdK, to show that cost.
            entries = [(k, 1) for k in FINALISTS] + ([(k, 32) for k in MDA_CHUNKED] if data is adk else [])
            missing = [(k, c) for k, c in entries if not os.path.exists(file_path(data, k, c, XTC_GRID_NM))]
            if missing:
                measure_serial(data, [(table[k], c) for k, c in missing], 1, XTC_GRID_NM, "mdanalysis-files",
                               read_repeat=1)
            log(f"\n== MDAnalysis H5MDReader, every frame, {data['name']}")
            result[data["name"]] = run_mdanalysis(data, entries, 1)
        record("mdanalysis", result)
    if "chunks" in phases:
        for data in (adk, solvated):
            log(f"\n== chunk frames, {data['name']}")
            entries = [(table[k], c) for k in SHORT_LIST for c in CHUNKS if c <= max_chunk(data)]
            record(f"chunks-{data['name']}", measure_serial(data, entries, 1, XTC_GRID_NM, "chunks",
                                                            read_repeat=args.repeat))
    if "precision" in phases:
        for q in PRECISIONS:
            qtable = candidates(q)
            qkeys = [k for k in PRECISION_KEYS if k in qtable] + [k for k in qtable if k.startswith("f32-so")]
            log(f"\n== precision Q = {q} nm (bound {q / 2} nm), {adk['name']}; XTC at precision {1 / q:g}")
            record(f"precision-{q:g}", measure_serial(adk, [(qtable[k], 32) for k in qkeys], 1, q, "precision",
                                                      read_repeat=args.repeat))
    if not args.keep:
        remove(FILES)


if __name__ == "__main__":
    main()
