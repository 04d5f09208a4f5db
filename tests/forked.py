"""Children a test forks itself: their exit code, never a test waiting forever."""

import os
import time


def exit_code_within(pid, timeout):
    """The exit code of child *pid*, or None (the child killed) when it has not ended within *timeout* s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None
