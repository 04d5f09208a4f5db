"""What `make demo`, `make test` and `make bench` install: GROMACS only for the targets
that compare against it (docs/installation.md)."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _installer_calls(target):
    """The tools/install.sh command lines `make TARGET` would run (make -n prints them)."""
    result = subprocess.run(["make", "-n", "-C", ROOT, target, "VENV=/nonexistent-venv"], capture_output=True,
                            text=True, check=True)
    return [line for line in result.stdout.splitlines() if "tools/install.sh" in line]


@pytest.mark.parametrize("target", ["install", "demo"])
def test_install_and_demo_leave_gromacs_out(target):
    calls = _installer_calls(target)
    assert calls and all("--with-gromacs" not in call for call in calls), calls


@pytest.mark.parametrize("target", ["test", "bench", "bench-quick"])
def test_test_and_bench_install_gromacs(target):
    calls = _installer_calls(target)
    assert calls and all("--with-gromacs" in call for call in calls), calls


def test_installer_refuses_unknown_arguments_before_doing_anything(tmp_path):
    venv = tmp_path / "venv"
    result = subprocess.run(["bash", os.path.join(ROOT, "tools", "install.sh"), "--gromacs"], capture_output=True,
                            text=True, env=dict(os.environ, VENV=str(venv)), timeout=60)
    assert result.returncode == 2 and "usage: tools/install.sh [--with-gromacs]" in result.stderr
    assert not venv.exists()


FAKE_PYTHON = r"""#!/bin/bash
# Stands for the venv's python: records pip's command lines, and answers the installer's
# import checks as a venv without mpi4py and h5py would, until pip has installed them.
here=$(dirname "$0")/..
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "${*:3}" >> "$here/pip-calls"
    case "$*" in *" h5py"*) touch "$here/has-h5py" ;; *" mpi4py"*) touch "$here/has-mpi4py" ;; esac
    exit 0
fi
if [ "$1" = "-c" ]; then
    case "$2" in
        *"import mpi4py, numpy"*) [ -e "$here/has-mpi4py" ] ;;
        *"get_config().mpi"*) [ -e "$here/has-h5py" ] ;;
        *print*) echo "h5py (fake)" ;;
        *) exit 0 ;;
    esac
    exit $?
fi
exit 0
"""


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="the installer needs mpicc before it builds anything")
def test_source_builds_never_take_a_wheel_from_pips_cache(tmp_path):
    """Regression: with HDF5_DIR naming HDF5 1.14.5, the installer installed the h5py wheel
    pip had cached from an earlier build against Debian's HDF5 1.10.8 (pip keys a wheel
    built from source by the package's version alone)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    environment = dict(os.environ, VENV=str(venv), HDF5_DIR=str(tmp_path / "site-hdf5"))
    result = subprocess.run(["bash", os.path.join(ROOT, "tools", "install.sh")], capture_output=True, text=True,
                            env=environment, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (venv / "pip-calls").read_text().splitlines()
    builds = [call for call in calls if "--no-binary=" in call]
    assert {call.split("--no-binary=")[1].split()[0] for call in builds} == {"h5py", "mpi4py"}, calls
    assert all("--no-cache-dir" in call.split() for call in builds), builds
