"""convert benchmarks (issue 2), whole commands as a user runs them, peers in the same run.

* h5mdtool convert (serial, uncompressed, (1, N, 3) chunks) vs MDAnalysis's H5MDWriter writing
  the same layout: target >= 8x faster;
* the same vs MDAnalysis merely iterating the XTC: target <= 1.25x its time;
* every compressed layout on 2 ranks vs 1 rank: target >= 1.6x faster for gzip, >= 1.8x for
  zstd and the default lossy layout (``--precision 0.001``: int32 pm + zstd). Judged with one core per
  rank (1 rank under ``taskset -c 0``, 2 ranks with ``--bind-to core``): an unbound rank
  decodes in one thread while it compresses in another (gzip: in one thread per core), so
  on this 2-core machine one rank already uses both cores and a second rank has none to
  add; that pair is timed unbound (``--bind-to none``: Open MPI binds 1 or 2 ranks to one
  core each by default) and its ratio printed without a target; zstd and ``--precision
  0.001`` are also timed with ``--parallel-compression ranks`` (each rank compresses its own
  chunks, rank 0 stores them all);
* gzip on one process (unbound): h5mdtool's threads, its default, against HDF5's filter
  (``--threads 0``), in turn: target >= 1.4x faster;
* ``--compression zstd`` vs the uncompressed convert, both on 1 rank (unbound), timed in
  turn: target <= 1.5x;
* peak memory for 600x vs 100x: target <= 1.2x.

Next to the serial convert, in turn with it, a plain program writes the positions' bytes into
a new file, one frame per write as HDF5 writes the chunks: what the machine charges for the
output alone (see docs/performance.md on virtual machines that give freed memory back to the
host).

``--quick`` uses the 100x trajectory only (memory check skipped).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    H5MDTOOL, ONE_CORE, check, machine, mpirun_bound, mpirun_unbound, remove, save, timed, timed_interleaved,
    write_bytes_command,
)
from data import ADK_ATOMS, ADK_FRAMES, DATA, repeated_xtc, topology  # noqa: E402

MDA_ITERATE = (
    "import sys, warnings; warnings.simplefilter('ignore'); import MDAnalysis as mda\n"
    "u = mda.Universe(sys.argv[1], sys.argv[2])\n"
    "for ts in u.trajectory: pass\n"
)
MDA_H5MDWRITER = (
    "import sys, warnings; warnings.simplefilter('ignore'); import MDAnalysis as mda\n"
    "u = mda.Universe(sys.argv[1], sys.argv[2])\n"
    "n = u.atoms.n_atoms\n"
    "with mda.Writer(sys.argv[3], n_atoms=n, chunks=(1, n, 3)) as w:\n"
    "    for ts in u.trajectory: w.write(u.atoms)\n"
)


def convert_command(xtc, output, *options, launcher=()):
    """``h5mdtool convert`` of *xtc* into *output*, after the *launcher* (mpirun, taskset)."""
    return [*launcher, H5MDTOOL, "convert", xtc, "-o", output, "--force", "--no-progress", *options]


#: Compressed layouts timed on 1 and 2 ranks, in turn.
COMPRESSED = {
    "gzip": ("--compression", "gzip"),
    "zstd": ("--compression", "zstd"),
    "precision": ("--precision", "0.001"),
}
#: Speed-up targets of 2 ranks over 1 (one core per rank).
TARGET_2_OVER_1 = {"gzip": 1.6, "zstd": 1.8, "precision": 1.8}


def bench(repeats, repeat, gzip_repeat):
    xtc = repeated_xtc(repeats)
    top = topology()
    out = os.path.join(DATA, f"bench_convert_{repeats}x.h5md")
    peer_out = os.path.join(DATA, f"bench_convert_{repeats}x_mda.h5md")
    print(f"\n== convert, AdK {repeats}x ({os.path.getsize(xtc) / 1e6:.0f} MB XTC)", flush=True)
    timed("warm-up (page cache, MDAnalysis offsets)", [sys.executable, "-c", MDA_ITERATE, top, xtc])
    result = {"repeats": repeats, "xtc_bytes": os.path.getsize(xtc)}
    frame_bytes = ADK_ATOMS * 3 * 4
    position_bytes = frame_bytes * ADK_FRAMES * repeats
    result.update(timed_interleaved([
        ("mda_iterate", "MDAnalysis iterating the XTC", [sys.executable, "-c", MDA_ITERATE, top, xtc]),
        # one chunk of (1, N, 3) per write, as HDF5 writes them
        ("write_only", f"writing {position_bytes / 1e9:.2f} GB, {frame_bytes // 1000} KB per write, nothing else",
         write_bytes_command(out, position_bytes, frame_bytes)),
        ("h5mdtool_serial", "h5mdtool convert, serial, uncompressed", convert_command(xtc, out)),
    ], repeat, outputs=[out]))
    print(f"  .. the machine's cost of writing the positions alone is "
          f"{result['write_only']['seconds'] / result['h5mdtool_serial']['seconds']:.0%} of h5mdtool's time", flush=True)
    result["mda_h5mdwriter"] = timed("MDAnalysis H5MDWriter, chunks (1, N, 3)", [sys.executable, "-c", MDA_H5MDWRITER, top, xtc, peer_out], outputs=[peer_out])
    for name, options in COMPRESSED.items():
        flags = " ".join(options)
        entries = [
            (f"{name}_1_rank", f"h5mdtool convert {flags}, 1 rank (unbound)",
             convert_command(xtc, out, *options, launcher=mpirun_unbound(1))),
            (f"{name}_2_ranks", f"h5mdtool convert {flags}, 2 ranks (unbound)",
             convert_command(xtc, out, *options, launcher=mpirun_unbound(2))),
            (f"{name}_1_core", f"h5mdtool convert {flags}, 1 rank on 1 core",
             convert_command(xtc, out, *options, launcher=ONE_CORE)),
            (f"{name}_2_cores", f"h5mdtool convert {flags}, 2 ranks, 1 core each",
             convert_command(xtc, out, *options, launcher=mpirun_bound(2))),
        ]
        if name != "gzip":
            # the other design: each rank compresses its chunks, rank 0 stores them all
            entries.append((f"{name}_2_cores_ranks", f"h5mdtool convert {flags} --parallel-compression ranks, "
                            "2 ranks, 1 core each",
                            convert_command(xtc, out, *options, "--parallel-compression", "ranks",
                                            launcher=mpirun_bound(2))))
        if name == "gzip":
            # one process: h5mdtool's encoding threads (gzip's default) against HDF5's filter
            entries.insert(1, ("gzip_1_rank_hdf5", "h5mdtool convert --compression gzip --threads 0 (HDF5's "
                               "filter), 1 rank (unbound)",
                               convert_command(xtc, out, *options, "--threads", "0", launcher=mpirun_unbound(1))))
        if name == "zstd":
            # its target is a ratio to the uncompressed convert: time both in turn
            entries.insert(0, ("uncompressed_1_rank", "h5mdtool convert, uncompressed, 1 rank (unbound)",
                               convert_command(xtc, out, launcher=mpirun_unbound(1))))
        result.update(timed_interleaved(entries, gzip_repeat, outputs=[out]))
    remove(out)
    remove(peer_out)
    serial = result["h5mdtool_serial"]["seconds"]
    result["checks"] = [
        check("H5MDWriter time / h5mdtool time", result["mda_h5mdwriter"]["seconds"] / serial, 8.0),
        check("h5mdtool time / MDAnalysis iteration time", serial / result["mda_iterate"]["seconds"], 1.25, higher_is_better=False),
        *(check(f"{name} speed-up, 2 ranks over 1, one core per rank",
                result[f"{name}_1_core"]["seconds"] / result[f"{name}_2_cores"]["seconds"], TARGET_2_OVER_1[name])
          for name in COMPRESSED),
        *(check(f"{name} speed-up, 2 ranks over 1, one core per rank, --parallel-compression ranks",
                result[f"{name}_1_core"]["seconds"] / result[f"{name}_2_cores_ranks"]["seconds"], TARGET_2_OVER_1[name])
          for name in COMPRESSED if name != "gzip"),
        check("zstd convert / uncompressed convert (1 rank, unbound)",
              result["zstd_1_rank"]["seconds"] / result["uncompressed_1_rank"]["seconds"], 1.5, higher_is_better=False),
        check("gzip, 1 process: HDF5's filter / h5mdtool's threads",
              result["gzip_1_rank_hdf5"]["seconds"] / result["gzip_1_rank"]["seconds"], 1.4),
    ]
    result["unbound_2_over_1"] = {name: result[f"{name}_1_rank"]["seconds"] / result[f"{name}_2_ranks"]["seconds"]
                                  for name in COMPRESSED}
    for name, ratio in result["unbound_2_over_1"].items():
        print(f"  .. {name} speed-up, 2 ranks over 1, unbound (no target: one rank already uses both cores): "
              f"{ratio:.2f}", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100x trajectory only")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the fast commands (median reported)")
    parser.add_argument("--gzip-repeat", type=int, default=2, help="runs of each compressed convert, 1 and 2 ranks in turn")
    args = parser.parse_args()
    document = {"machine": machine(), "runs": []}
    if document["machine"]["free_page_reporting"]:
        print("note: this machine gives freed memory back to its host (free page reporting), so the "
              "time of large writes varies between runs; see docs/performance.md", flush=True)
    sizes = [100] if args.quick else [100, 600]
    for repeats in sizes:
        document["runs"].append(bench(repeats, args.repeat, args.gzip_repeat))
    if not args.quick:
        small, large = document["runs"]
        document["memory_check"] = check(
            "peak memory 600x / 100x (h5mdtool convert, serial)",
            large["h5mdtool_serial"]["peak_mib"] / small["h5mdtool_serial"]["peak_mib"], 1.2, higher_is_better=False,
        )
    save("convert_quick" if args.quick else "convert", document)


if __name__ == "__main__":
    main()
