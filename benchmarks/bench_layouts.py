"""Layout table (issue 6), like Jakupovic & Beckstein 2021's: size and read time of one trajectory stored
several ways, serial and on 2 ranks, with the XTC beside them.

For the 9800-frame AdK trajectory (100x; ``--repeats 600`` for the long one): h5py
auto-chunked (as pyh5md or plain h5py write it), ``(1, N, 3)`` chunks, planner chunks
(``--chunk-frames auto``), contiguous, gzip levels 1, 4 (the default) and 9, zstd, and
``--precision 0.001`` with its default codec (zstd), gzip (built-in filters only), blosc2 and
lz4. Targets: the default lossy layout <= 1.0x the XTC's size, its built-in variant <= 1.1x,
zstd <= gzip level 4's size, on AdK and on the solvated system (MDAnalysisTests' solvated
AdK repeated 30 times, 300 frames of 47681 atoms: sizes only, with x, y and z chunked
together and apart, ``--split-xyz``). For each AdK file: its size relative to the XTC, the time to read every frame one at a
time (``read_frames.py``) on 1 and 2 ranks, and, when the ``bench`` command is installed,
``h5mdtool bench rmsd`` on 1 and 2 ranks.
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import H5MDTOOL, HERE, MPIRUN, check, machine, remove, save, timed  # noqa: E402
from data import DATA, repeated_xtc, topology  # noqa: E402
from study_layouts import solvated_xtc  # noqa: E402

LAYOUTS = {
    "chunks (1, N, 3)": [],
    "planner chunks (auto)": ["--chunk-frames", "auto"],
    "contiguous": ["--contiguous"],
    "gzip level 1": ["--compression", "gzip", "--compression-level", "1"],
    "gzip level 4 (the default)": ["--compression", "gzip"],
    "gzip level 9": ["--compression", "gzip", "--compression-level", "9"],
    "zstd (lossless)": ["--compression", "zstd"],
    "precision 0.001 (default: int32 pm, shuffle + zstd)": ["--precision", "0.001"],
    "precision 0.001 + gzip (built-in filters only)": ["--precision", "0.001", "--compression", "gzip"],
    "precision 0.001 + blosc2 (bit shuffle + zstd)": ["--precision", "0.001", "--compression", "blosc2"],
    "precision 0.001 + lz4 (bitshuffle + LZ4)": ["--precision", "0.001", "--compression", "lz4"],
}

#: Layouts whose size is measured on the solvated system (convert options).
SOLVATED_LAYOUTS = {
    "gzip level 4": ["--compression", "gzip"],
    "zstd": ["--compression", "zstd"],
    "precision 0.001": ["--precision", "0.001"],
    "precision 0.001, x y z together": ["--precision", "0.001", "--no-split-xyz"],
    "precision 0.001 + gzip": ["--precision", "0.001", "--compression", "gzip"],
    "precision 0.001 + gzip, x y z together": ["--precision", "0.001", "--compression", "gzip", "--no-split-xyz"],
}

AUTO_CHUNK = (
    "import sys, h5py\n"
    "src, dst = sys.argv[1:3]\n"
    "with h5py.File(src, 'r') as f, h5py.File(dst, 'w') as g:\n"
    "    for name in f:\n"
    "        f.copy(f[name], g, name=name)\n"
    "    value = f['particles/trajectory/position/value']\n"
    "    del g['particles/trajectory/position/value']\n"
    "    d = g.create_dataset('particles/trajectory/position/value', shape=value.shape, dtype=value.dtype,\n"
    "                         chunks=True, maxshape=(None,) + value.shape[1:])\n"
    "    for a in range(0, value.shape[0], 1000):\n"
    "        d[a:a + 1000] = value[a:a + 1000]\n"
    "    d.attrs['unit'] = 'nm'\n"
    "    print(d.chunks)\n"
)


def has_bench_command():
    return subprocess.run([H5MDTOOL, "bench", "--help"], capture_output=True).returncode == 0


def solvated_sizes():
    """Sizes of the solvated system's layouts against its XTC, and the size checks on them."""
    xtc = solvated_xtc(30)
    xtc_size = os.path.getsize(xtc)
    print(f"\n== layouts, solvated AdK 300 frames x 47681 atoms: XTC {xtc_size / 1e6:.1f} MB", flush=True)
    size = {}
    for label, options in SOLVATED_LAYOUTS.items():
        path = os.path.join(DATA, "layout_solvated.h5md")
        timed(f"write: {label} (2 ranks)", [MPIRUN, "-n", "2", H5MDTOOL, "convert", xtc, "-o", path, "--force",
                                             "--no-progress", *options], outputs=[path])
        size[label] = os.path.getsize(path) / xtc_size
        print(f"  {label}: {os.path.getsize(path) / 1e6:.1f} MB = {size[label]:.3f} x XTC", flush=True)
        remove(path)
    checks = [
        check("solvated: --precision 0.001 size / XTC size", size["precision 0.001"], 1.0, higher_is_better=False),
        check("solvated: --precision 0.001 --compression gzip size / XTC size", size["precision 0.001 + gzip"], 1.1,
              higher_is_better=False),
        check("solvated: zstd size / gzip level 4 size", size["zstd"] / size["gzip level 4"], 1.0, higher_is_better=False),
    ]
    return {"xtc_bytes": xtc_size, "size_vs_xtc": size}, checks


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=100, help="AdK copies (100: 9800 frames)")
    parser.add_argument("--quick", action="store_true", help="same as the default size; accepted for make bench-quick")
    args = parser.parse_args()
    xtc = repeated_xtc(args.repeats)
    top = topology()
    xtc_size = os.path.getsize(xtc)
    reader = [sys.executable, os.path.join(HERE, "read_frames.py")]
    bench = has_bench_command()
    rows = []
    print(f"\n== layouts, AdK {args.repeats}x: XTC {xtc_size / 1e6:.0f} MB", flush=True)
    files = {}
    for label, options in LAYOUTS.items():
        path = os.path.join(DATA, f"layout_{len(files)}.h5md")
        timed(f"write: {label} (2 ranks)", [MPIRUN, "-n", "2", H5MDTOOL, "convert", xtc, "-o", path, "--force", "--no-progress", *options], outputs=[path])
        files[label] = path
    auto = os.path.join(DATA, "layout_autochunked.h5md")
    remove(auto)
    chunks = subprocess.run([sys.executable, "-c", AUTO_CHUNK, files["chunks (1, N, 3)"], auto], capture_output=True, text=True, check=True).stdout.strip()
    files = {f"h5py auto-chunked {chunks}": auto, **files}
    for label, path in files.items():
        row = {"layout": label, "bytes": os.path.getsize(path), "size_vs_xtc": os.path.getsize(path) / xtc_size}
        print(f"  {label}: {row['bytes'] / 1e6:.0f} MB = {row['size_vs_xtc']:.2f} x XTC", flush=True)
        row["read_1"] = timed("    read every frame, 1 rank", reader + [path])["seconds"]
        row["read_2"] = timed("    read every frame, 2 ranks", [MPIRUN, "-n", "2"] + reader + [path])["seconds"]
        if bench:
            for ranks in (1, 2):
                row[f"rmsd_{ranks}"] = timed(f"    bench rmsd, {ranks} rank(s)", [MPIRUN, "-n", str(ranks), H5MDTOOL, "bench", "rmsd", path, "--topology", top, "--no-progress"])["seconds"]
        rows.append(row)
    document = {"machine": machine(), "repeats": args.repeats, "xtc_bytes": xtc_size, "rows": rows}
    size = {row["layout"].split(" (")[0]: row["size_vs_xtc"] for row in rows}
    document["checks"] = [
        check("--precision 0.001 (default codec) size / XTC size", size["precision 0.001"], 1.0, higher_is_better=False),
        check("--precision 0.001 --compression gzip size / XTC size", size["precision 0.001 + gzip"], 1.1, higher_is_better=False),
        check("zstd size / gzip level 4 size", size["zstd"] / size["gzip level 4"], 1.0, higher_is_better=False),
    ]
    document["solvated"], solvated_checks = solvated_sizes()
    document["checks"] += solvated_checks
    print("\n| layout | size (MB) | x XTC | read 1 rank (s) | read 2 ranks (s) |" + (" rmsd 1 (s) | rmsd 2 (s) |" if bench else ""))
    print("| --- | --- | --- | --- | --- |" + (" --- | --- |" if bench else ""))
    print(f"| XTC | {xtc_size / 1e6:.0f} | 1.00 | | |" + (" | |" if bench else ""))
    for row in rows:
        line = f"| {row['layout']} | {row['bytes'] / 1e6:.0f} | {row['size_vs_xtc']:.2f} | {row['read_1']:.2f} | {row['read_2']:.2f} |"
        if bench:
            line += f" {row['rmsd_1']:.2f} | {row['rmsd_2']:.2f} |"
        print(line)
    for path in files.values():
        remove(path)
    save("layouts", document)


if __name__ == "__main__":
    main()
