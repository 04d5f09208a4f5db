"""GROMACS-style time selections: the frames ``bench rmsd -b/-e/--dt`` pick.

``bench rmsd -b/-e/--dt`` pick frames by time, as ``gmx rms`` does; that needs the time of
every frame before the work is divided. Rank 0 takes them from its scan of the input
(:func:`h5mdtool.bench_input.frame_times`: every frame header of XTC/TRR, DCD's header,
H5MD's time datasets), without decoding a frame.
"""

import numpy as np

from .errors import UsageError

FLOAT32_EPS = float(np.finfo(np.float32).eps)


def _multiple_of(times, dt):
    """GROMACS's ``bRmod``: t is a whole multiple of dt, within 2 float32 epsilons of t."""
    tolerance = 2 * FLOAT32_EPS
    quotient = np.trunc((times + tolerance * times) / dt)
    return np.abs(times - dt * quotient) <= tolerance * np.abs(times)


def select_by_time(times, begin=None, end=None, dt=None):
    """Frame numbers whose time is in ``[begin, end]`` and a whole multiple of *dt* (all in ps).

    Times are compared as float32 ("real" in GROMACS). ``gmx`` keeps the same frames of TRR
    files; on XTC files it measures dt from the first frame when no -b is given, and it
    keeps the first frame at or after -b even when it lies past -e.

    Raises
    ------
    UsageError
        If *dt* is not positive, *end* is before *begin*, or no frame is selected.
    """
    if dt is not None and dt <= 0:
        raise UsageError(f"--dt must be a positive time in ps, got {dt}")
    if begin is not None and end is not None and end < begin:
        raise UsageError(f"-e {end} ps is before -b {begin} ps")
    times = np.asarray(times, np.float32).astype(np.float64)
    keep = np.ones(len(times), bool)
    if begin is not None:
        keep &= times >= float(np.float32(begin))
    if end is not None:
        keep &= times <= float(np.float32(end))
    if dt is not None:
        keep &= _multiple_of(times, float(np.float32(dt)))
    frames = np.flatnonzero(keep)
    if len(frames) == 0:
        span = f"{times.min():g}-{times.max():g} ps" if len(times) else "no frames"
        raise UsageError(f"-b {begin} -e {end} --dt {dt} selects none of the {len(times)} frames (times {span})")
    return frames
