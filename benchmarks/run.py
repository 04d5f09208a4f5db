"""Run every benchmark in this directory (``make bench``); ``--quick`` for the 100x inputs only."""

import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    status = 0
    for script in sorted(glob.glob(os.path.join(HERE, "bench_*.py"))):
        print(f"\n##### {os.path.basename(script)}", flush=True)
        status |= subprocess.run([sys.executable, script] + sys.argv[1:]).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
