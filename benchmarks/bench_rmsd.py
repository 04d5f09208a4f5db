"""bench rmsd benchmark (issues 5 and 13), whole commands, peers in the same run.

On the AdK trajectory (600x; 100x with ``--quick``) converted by h5mdtool: ``h5mdtool bench
rmsd`` (blocks engine, 1 rank) against MDAnalysis ``rms.RMSD(u, select="name CA").run()``.

* uncompressed (1, N, 3) chunks: >= 12x faster than MDAnalysis on the same file, >= 3x
  faster than MDAnalysis on the XTC;
* the default lossy layout (``--precision 0.001``: int32 pm, shuffle + zstd): >= 3x faster
  than MDAnalysis on the XTC, and faster than ``h5mdtool bench rmsd`` on the XTC;
* ``--compression zstd`` (lossless): <= 1.5x the time on the uncompressed file;
* gzip: 2 ranks >= 1.6x faster than 1 rank.

h5mdtool decompresses in as many threads as a rank may use cores (2 here on 1 rank), while
MDAnalysis reads in one: the compressed layouts are also timed on one core (``taskset -c
0``), and the rank scaling with one core per rank (``--bind-to core``) as well as unbound
(``--bind-to none``; Open MPI binds 1 or 2 ranks to one core each by default).
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import H5MDTOOL, ONE_CORE, check, mpirun_bound, mpirun_unbound, run_sizes, timed  # noqa: E402
from data import DATA, repeated_xtc, topology  # noqa: E402

MDA_RMSD = (
    "import sys, warnings; warnings.simplefilter('ignore')\n"
    "import MDAnalysis as mda; from MDAnalysis.analysis import rms\n"
    "rms.RMSD(mda.Universe(sys.argv[1], sys.argv[2]), select='name CA').run()\n"
)


def converted(xtc, repeats, *options, name=None):
    name = name or f"rmsd_{repeats}x{'_' + '_'.join(options).replace('-', '') if options else ''}.h5md"
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        subprocess.run([H5MDTOOL, "convert", xtc, "-o", path, "--no-progress", *options], check=True, stdout=subprocess.DEVNULL)
    return path


def with_topology(xtc, repeats):
    """The uncompressed H5MD carrying AdK's topology (``convert -t``): ``bench rmsd`` on it
    needs no ``-t``, and rank 0 resolves ``name CA`` from the stored arrays."""
    return converted(xtc, repeats, "--topology", topology(), name=f"rmsd_{repeats}x_topology.h5md")


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    top = topology()
    plain = with_topology(xtc, repeats)  # the file scaling and start-up read, without -t: one copy cached
    gzip = converted(xtc, repeats, "--compression", "gzip")
    zstd = converted(xtc, repeats, "--compression", "zstd")
    lossy = converted(xtc, repeats, "--precision", "0.001")
    print(f"\n== bench rmsd, AdK {repeats}x", flush=True)
    run = [H5MDTOOL, "bench", "rmsd"]
    result = {"repeats": repeats}
    timed("warm-up (XTC offsets; every input into the page cache)", [sys.executable, "-c", MDA_RMSD, top, xtc])
    for path in (plain, gzip, zstd, lossy):
        with open(path, "rb") as handle:
            while handle.read(64 * 1024**2):
                pass
    result["h5mdtool_h5md"] = timed("h5mdtool bench rmsd on the H5MD (blocks, 1 rank)", run + [plain, "-t", top], repeat)
    result["mda_h5md"] = timed("MDAnalysis rms.RMSD on the same H5MD", [sys.executable, "-c", MDA_RMSD, top, plain])
    result["mda_xtc"] = timed("MDAnalysis rms.RMSD on the XTC", [sys.executable, "-c", MDA_RMSD, top, xtc], repeat)
    result["h5mdtool_lossy"] = timed("h5mdtool bench rmsd on --precision 0.001 (int32 pm + zstd)", run + [lossy, "-t", top], repeat)
    result["h5mdtool_xtc"] = timed("h5mdtool bench rmsd on the XTC", run + [xtc, "-t", top], repeat)
    result["h5mdtool_zstd"] = timed("h5mdtool bench rmsd on --compression zstd", run + [zstd, "-t", top], repeat)
    result["h5mdtool_lossy_1_core"] = timed("h5mdtool bench rmsd on --precision 0.001, 1 core",
                                            ONE_CORE + run + [lossy, "-t", top], repeat)
    result["h5mdtool_zstd_1_core"] = timed("h5mdtool bench rmsd on --compression zstd, 1 core",
                                           ONE_CORE + run + [zstd, "-t", top], repeat)
    result["gzip_1"] = timed("h5mdtool bench rmsd on gzip H5MD, 1 rank (unbound)", mpirun_unbound(1) + run + [gzip, "-t", top], repeat)
    result["gzip_2"] = timed("h5mdtool bench rmsd on gzip H5MD, 2 ranks (unbound)", mpirun_unbound(2) + run + [gzip, "-t", top], repeat)
    result["gzip_1_core"] = timed("h5mdtool bench rmsd on gzip H5MD, 1 rank on 1 core",
                                  mpirun_bound(1) + run + [gzip, "-t", top], repeat)
    result["gzip_2_cores"] = timed("h5mdtool bench rmsd on gzip H5MD, 2 ranks, 1 core each",
                                   mpirun_bound(2) + run + [gzip, "-t", top], repeat)
    mine = result["h5mdtool_h5md"]["seconds"]
    result["checks"] = [
        check("MDAnalysis on H5MD / h5mdtool", result["mda_h5md"]["seconds"] / mine, 12.0),
        check("MDAnalysis on XTC / h5mdtool", result["mda_xtc"]["seconds"] / mine, 3.0),
        check("MDAnalysis on XTC / h5mdtool on --precision 0.001", result["mda_xtc"]["seconds"] / result["h5mdtool_lossy"]["seconds"], 3.0),
        check("h5mdtool on XTC / h5mdtool on --precision 0.001", result["h5mdtool_xtc"]["seconds"] / result["h5mdtool_lossy"]["seconds"], 1.0),
        check("h5mdtool on zstd / on uncompressed", result["h5mdtool_zstd"]["seconds"] / mine, 1.5, higher_is_better=False),
        check("gzip H5MD: 2 ranks over 1 (unbound)", result["gzip_1"]["seconds"] / result["gzip_2"]["seconds"], 1.6),
        check("gzip H5MD: 2 ranks over 1, one core per rank",
              result["gzip_1_core"]["seconds"] / result["gzip_2_cores"]["seconds"], 1.6),
        check("MDAnalysis on XTC / h5mdtool on --precision 0.001, 1 core",
              result["mda_xtc"]["seconds"] / result["h5mdtool_lossy_1_core"]["seconds"], 3.0),
        check("h5mdtool on zstd, 1 core / on uncompressed", result["h5mdtool_zstd_1_core"]["seconds"] / mine, 1.5,
              higher_is_better=False),
    ]
    return result


def main():
    run_sizes(__doc__, bench, "rmsd")


if __name__ == "__main__":
    main()
