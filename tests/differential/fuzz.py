"""The long profile: ``python -m tests.differential.fuzz [EXAMPLES]`` (``make fuzz``).

Draws ``FUZZ_EXAMPLES`` cases (default 3000) from a random seed (``FUZZ_SEED`` to repeat
a run; the seed is printed), runs each serially and on 2 and 3 MPI ranks, continues past
failures and prints ``N cases, F failures`` per rank count, the failures grouped by kind
and where the inputs of failing cases are kept. Exit status 1 when any failure was found
(outside KNOWN.md's categories with ``H5MDTOOL_DIFF_KNOWN=skip``).
"""

import os
import random
import sys

from .known import mode
from .session import run_profile, summary_lines


def main(argv):
    examples = int(argv[0]) if argv else int(os.environ.get("FUZZ_EXAMPLES", "3000"))
    seed_value = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    known_mode = mode()
    print(f"differential fuzz: {examples} cases, seed {seed_value} (FUZZ_SEED={seed_value} repeats this run)", flush=True)
    runner = run_profile(examples, derandomize=False, seed_value=seed_value, log=sys.stdout)
    for line in summary_lines(runner, known_mode):
        print(line)
    failing = runner.unknown_failures() if known_mode == "skip" else runner.failures
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
