"""tools/mpirun.sh, the launcher the Makefile, the tests and the benchmarks use."""

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import MPIRUN

#: Each rank prints its PML between markers: Open MPI forwards the ranks' output as it comes,
#: so two ranks' lines may run together ("^ucx^ucx" on a loaded machine).
PRINT_PML = "import os; print('pml=' + os.environ.get('OMPI_MCA_pml', '<unset>') + ';', flush=True)"
FAST_NETWORK_DEVICES = ("/sys/class/infiniband/*", "/dev/hfi1*", "/dev/ipath*")


def open_mpi():
    try:
        launcher = os.environ.get("MPIEXEC", "mpirun")  # as tools/mpirun.sh chooses it
        version = subprocess.run([launcher, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "open mpi" in version.lower()


pytestmark = pytest.mark.skipif(not open_mpi(), reason="tools/mpirun.sh sets the PML for Open MPI only")


def pml_seen_by_ranks(ranks, environment):
    done = subprocess.run([MPIRUN, "-n", str(ranks), sys.executable, "-c", PRINT_PML],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return re.findall(r"pml=([^;]*);", done.stdout)


def test_ob1_asked_for_on_a_node_without_fast_network_devices():
    if any(glob.glob(pattern) for pattern in FAST_NETWORK_DEVICES):
        pytest.skip("this node has Omni-Path or InfiniBand devices: the PML is left to Open MPI")
    environment = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_pml"}
    assert pml_seen_by_ranks(2, environment) == ["ob1", "ob1"]


def test_the_users_own_pml_is_kept():
    environment = dict(os.environ, OMPI_MCA_pml="^ucx")
    assert pml_seen_by_ranks(2, environment) == ["^ucx", "^ucx"]
