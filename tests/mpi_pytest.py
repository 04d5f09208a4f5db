"""Run pytest on every MPI rank: ``mpirun -n N python tests/mpi_pytest.py [pytest args]``.

Each rank gets its own ``--basetemp`` (pytest's numbered temporary directories are not safe
to create from several processes at once) inside one shared directory, announced to the
tests through ``H5MDTOOL_TEST_SHARED_DIR``. Rank 0 prints pytest's report; the other ranks
keep theirs in a log that is shown only when they fail. The exit status is the worst of all
ranks, so a failure on any rank fails the run.
"""

import os
import shutil
import sys
import tempfile

from mpi4py import MPI


def main():
    import pytest

    comm = MPI.COMM_WORLD
    rank = comm.rank
    shared = comm.bcast(tempfile.mkdtemp(prefix="h5mdtool-mpi-tests-") if rank == 0 else None)
    os.environ["H5MDTOOL_TEST_SHARED_DIR"] = shared
    args = sys.argv[1:] + [f"--basetemp={shared}/rank{rank}"]
    log_path = os.path.join(shared, f"pytest-rank{rank}.log")
    saved_stdout = None
    if rank != 0:
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.close(log)
    code = int(pytest.main(args))
    if saved_stdout is not None:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
    codes = comm.allgather(code)
    if rank != 0 and code != 0:
        with open(log_path) as report:
            sys.stderr.write(f"---- pytest on rank {rank} (exit {code}) ----\n{report.read()}")
    comm.Barrier()
    if rank == 0:
        print(f"mpi_pytest: {comm.size} ranks, exit codes {codes}")
        shutil.rmtree(shared, ignore_errors=True)
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
