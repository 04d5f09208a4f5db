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
