"""One run of the harness: a hypothesis profile feeding cases to a :class:`~.runner.Runner`.

Used by the pytest entry (``test_differential.py``, the fixed-seed profile of ``make test``)
and by ``python -m tests.differential.fuzz`` (the long profile of ``make fuzz``). The
hypothesis test body never raises on a failed case: every failure is recorded and the run
goes on, so the counts per rank count are meaningful; callers decide what fails at the end.

Settings: database off (no ``.hypothesis`` directory, nothing carried between runs),
deadline off and the health checks for slow data generation off (a case writes files and
starts MPI jobs); the test profile is ``derandomize=True`` (the same cases on every
machine for a given hypothesis version, which setup.cfg pins); the fuzz profile takes a
seed (printed, so a run can be repeated).
"""

import os
import shutil
import sys
import tempfile
import time
import warnings

from hypothesis import HealthCheck, Phase, given, reject, seed, settings

from .runner import Runner, Unusable
from .strategies import COMMANDS, cases

SLOW_IO_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                  HealthCheck.large_base_example]


def _ranks_from_environment(default="1,2,3"):
    return tuple(int(r) for r in os.environ.get("DIFF_RANKS", default).split(",") if r.strip())


def run_profile(examples, *, derandomize, seed_value=None, ranks=None, commands=None, timeout=None,
                keep_dir=None, log=sys.stderr):
    """Run *examples* cases at every rank count; return the :class:`Runner` (closed)."""
    ranks = ranks or _ranks_from_environment()
    commands = commands or tuple(c for c in os.environ.get("DIFF_COMMANDS", ",".join(COMMANDS)).split(",") if c)
    timeout = timeout or float(os.environ.get("DIFF_TIMEOUT", "120"))
    base = tempfile.mkdtemp(prefix="h5mdtool-differential-", dir=os.environ.get("DIFF_TMP"))
    keep_dir = keep_dir or os.environ.get("DIFF_KEEP_DIR") or tempfile.mkdtemp(prefix="h5mdtool-differential-kept-")
    # the workers' offsets cache: the session's own, never the user's ~/.cache
    saved_cache_home = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.path.join(base, "cache")
    runner = Runner(base, ranks=ranks, timeout=timeout, keep_dir=keep_dir, log=log)
    started = time.monotonic()
    drawn = {"cases": 0, "unusable": 0}

    @settings(max_examples=examples, derandomize=derandomize, database=None, deadline=None,
              suppress_health_check=SLOW_IO_CHECKS, phases=[Phase.explicit, Phase.generate], print_blob=False)
    @given(cases(commands))
    def body(case):
        drawn["cases"] += 1
        try:
            runner.run(case)
        except Unusable:
            drawn["unusable"] += 1
            reject()

    if seed_value is not None and not derandomize:
        body = seed(seed_value)(body)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            body()
    finally:
        runner.close()
        runner.seconds = time.monotonic() - started
        runner.drawn = drawn
        runner.keep_dir_used = keep_dir if os.path.isdir(keep_dir) and os.listdir(keep_dir) else None
        if runner.keep_dir_used is None:
            shutil.rmtree(keep_dir, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
        if saved_cache_home is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = saved_cache_home
    return runner


def summary_lines(runner, known_mode):
    """The closing report: counts per rank count, grouped failures, where the kept files are."""
    lines = [f"differential harness: {runner.drawn['cases']} cases drawn ({runner.drawn['unusable']} unusable), "
             f"{runner.cli_runs} command-line runs, {runner.seconds:.0f} s; known failures: {known_mode}"]
    lines.append(runner.report())
    if runner.keep_dir_used:
        lines.append(f"inputs of failing cases kept in {runner.keep_dir_used} (case.json in each says what failed)")
    return lines
