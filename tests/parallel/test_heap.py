"""The command line keeps freed heap memory instead of faulting it in again."""

import subprocess
import sys
import textwrap

import pytest

from h5mdtool.parallel.heap import keep_freed_heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")

# Frees *pieces* arrays of *size* float64 100 times over, in a fresh process: 100 pieces of
# 100 KB (below the mmap threshold) as zlib's state per compressed chunk, or one 4 MB
# temporary array as a block of frames.
CHURN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from h5mdtool.parallel.heap import keep_freed_heap
    applied = keep_freed_heap() if sys.argv[1] == "keep" else None
    pieces, size = int(sys.argv[2]), int(sys.argv[3])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        arrays = [np.ones(size) for _ in range(pieces)]
        del arrays
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def churn_faults(mode, pieces, size):
    done = subprocess.run([sys.executable, "-c", CHURN, mode, str(pieces), str(size)],
                          capture_output=True, text=True, check=True)
    applied, faults = done.stdout.split()
    return applied, int(faults)


def test_small_pieces_freed_at_the_top_of_the_heap_are_kept():
    _, default_faults = churn_faults("default", 100, 12_500)
    applied, kept_faults = churn_faults("keep", 100, 12_500)
    assert applied == "True"
    assert default_faults > 50_000  # ~2000 pages faulted again per round (10 MB trimmed)
    assert kept_faults * 10 < default_faults


def test_large_temporaries_stay_on_the_heap():
    # glibc's dynamic threshold keeps reusing a freed 4 MB block; fixing the trim threshold
    # alone would map and fault in every one of them (~1000 pages each)
    _, default_faults = churn_faults("default", 1, 500_000)
    applied, kept_faults = churn_faults("keep", 1, 500_000)
    assert applied == "True"
    assert kept_faults <= default_faults + 100
    assert kept_faults < 5_000


def test_user_settings_win(monkeypatch):
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        with monkeypatch.context() as patch:
            patch.setenv(name, "131072")
            assert keep_freed_heap() is False


def test_command_line_applies_it(monkeypatch):
    import h5mdtool.cli.main as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_heap", lambda: calls.append(True))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert calls == [True]
