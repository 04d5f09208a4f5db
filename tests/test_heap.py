"""The command line keeps freed heap memory instead of faulting it in again for every chunk."""

import subprocess
import sys
import textwrap

import pytest

from h5mdtool.heap import keep_freed_heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")

# Frees 10 MB at the top of the heap 100 times, in pieces below the mmap threshold as zlib does.
CHURN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from h5mdtool.heap import keep_freed_heap
    applied = keep_freed_heap() if sys.argv[1] == "keep" else None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        pieces = [np.ones(12_500) for _ in range(100)]
        del pieces
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def churn_faults(mode, env=None):
    done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True,
                          check=True, env=env)
    applied, faults = done.stdout.split()
    return applied, int(faults)


def test_keeping_freed_heap_stops_refaulting_it():
    _, default_faults = churn_faults("default")
    applied, kept_faults = churn_faults("keep")
    assert applied == "True"
    assert default_faults > 50_000  # ~2000 pages faulted again per round (10 MB trimmed)
    assert kept_faults * 10 < default_faults


def test_user_setting_of_the_threshold_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_heap() is False


def test_command_line_applies_it(monkeypatch):
    import h5mdtool.cli as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_heap", lambda: calls.append(True))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert calls == [True]
