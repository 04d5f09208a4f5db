"""split benchmark (issue 3): h5mdtool split into 4 parts vs ``gmx trjconv -split``.

Whole commands, the same run: splitting the AdK XTC (600x: 58800 frames, 746 MB; 100x with
``--quick``) into 4 parts with GROMACS (``echo 0 | gmx trjconv -f in.xtc -o out.xtc -split T``,
T a quarter of the trajectory's time span) and with ``h5mdtool split --nparts 4`` on 1 and
2 ranks. Target: h5mdtool at least 6x faster than gmx. Without ``gmx`` on the PATH (Debian:
``apt-get install gromacs``; ``make bench`` installs it as root) that peer is skipped.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import H5MDTOOL, MPIRUN, check, run_sizes, timed  # noqa: E402
from data import DATA, adk_source, repeated_xtc  # noqa: E402


def bench(repeats, repeat):
    xtc = repeated_xtc(repeats)
    n_frames = 98 * repeats
    _, _, dt = adk_source()
    print(f"\n== split into 4 parts, AdK {repeats}x ({os.path.getsize(xtc) / 1e6:.0f} MB XTC)", flush=True)
    result = {"repeats": repeats}
    out = os.path.join(DATA, "split_out")
    gmx_dir = os.path.join(DATA, "split_gmx")
    timed("warm-up (page cache)", ["cat", xtc], outputs=[])
    gmx = shutil.which("gmx")
    if gmx:
        shutil.rmtree(gmx_dir, ignore_errors=True)
        os.makedirs(gmx_dir)
        span = n_frames // 4 * dt
        script = f"cd {gmx_dir} && echo 0 | {gmx} -quiet trjconv -f {xtc} -o {gmx_dir}/out.xtc -split {span:.6f} > /dev/null 2>&1"
        result["gmx"] = timed("gmx trjconv -split (GROMACS)", ["sh", "-c", script], repeat=1)
        result["gmx"]["parts"] = len(os.listdir(gmx_dir))
        shutil.rmtree(gmx_dir, ignore_errors=True)
    else:
        print("  gmx not found: GROMACS peer skipped (apt-get install gromacs)")
    command = [H5MDTOOL, "split", xtc, "--nparts", "4", "-o", out, "--force", "--no-progress"]
    result["h5mdtool_1"] = timed("h5mdtool split --nparts 4, 1 rank", command, repeat, outputs=[out])
    result["h5mdtool_2"] = timed("h5mdtool split --nparts 4, 2 ranks", [MPIRUN, "-n", "2"] + command, repeat, outputs=[out])
    shutil.rmtree(out, ignore_errors=True)
    result["checks"] = []
    if gmx:
        result["checks"].append(check("gmx time / h5mdtool time (1 rank)", result["gmx"]["seconds"] / result["h5mdtool_1"]["seconds"], 6.0))
    result["ranks_2_over_1"] = result["h5mdtool_1"]["seconds"] / result["h5mdtool_2"]["seconds"]
    print(f"  -> 2 ranks vs 1 rank: {result['ranks_2_over_1']:.2f}x")
    return result


def main():
    run_sizes(__doc__, bench, "split")


if __name__ == "__main__":
    main()
