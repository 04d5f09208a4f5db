"""GROMACS-style frame selections by time: ``-b/-e/--dt`` in ps, as ``gmx`` tools take them.

``convert``, ``split`` and ``bench rmsd`` pick frames by time with the same options. That
needs the time of every frame before the work is divided: rank 0 takes them from its scan
of the input (every frame header of XTC/TRR, DCD's header, H5MD's time datasets) without
decoding a frame, and broadcasts the frame numbers every rank then uses.

The rule, as GROMACS applies it: times are compared as float32 ("real" in GROMACS); a frame
is kept when ``b <= t <= e`` and, with ``dt``, when ``t - t0`` is a whole multiple of dt within
two float32 epsilons of t (GROMACS's ``bRmod``). ``gmx trjconv -dt`` takes ``t0`` as the time
of the first frame it reads at or after ``-b`` ("t MOD dt = first time"): ``dt_origin="first"``.
``bench rmsd`` keeps whole multiples of dt (``t0 = 0``, ``dt_origin="zero"``), which is what
``gmx rms`` picks on trajectories starting at 0 ps.
"""

import numpy as np

from ..parallel.errors import InputError, UsageError

FLOAT32_EPS = float(np.finfo(np.float32).eps)
#: Where ``dt`` counts from: 0 ps, or the first frame at or after ``-b`` (gmx trjconv).
DT_ORIGINS = ("zero", "first")


def _multiple_of(times, origin, dt):
    """GROMACS's ``bRmod(t, t0, dt)``: t - t0 is a whole multiple of dt, within 2 float32 epsilons of t."""
    tolerance = 2 * FLOAT32_EPS
    quotient = np.trunc((times - origin + tolerance * times) / dt)
    return np.abs(times - origin - dt * quotient) <= tolerance * np.abs(times)


def by_time(begin=None, end=None, dt=None):
    """True when any of ``-b``, ``-e``, ``--dt`` is given."""
    return any(value is not None for value in (begin, end, dt))


def check_one_selection(start=None, stop=None, step=None, begin=None, end=None, dt=None):
    """Refuse frames chosen both by number and by time.

    Raises
    ------
    UsageError
        If any of *start*, *stop*, *step* is given with any of *begin*, *end*, *dt*.
    """
    if any(value is not None for value in (start, stop, step)) and by_time(begin, end, dt):
        raise UsageError("choose frames by number (--start/--stop/--step) or by time (-b/-e/--dt), not both")


def select_by_time(times, begin=None, end=None, dt=None, dt_origin="zero"):
    """Frame numbers whose time is in ``[begin, end]`` and on the *dt* grid (all in ps).

    Parameters
    ----------
    times : array of float
        Time of every frame, in ps, in frame order.
    begin, end : float, optional
        First and last time kept (``-b``, ``-e``); no bound when None.
    dt : float, optional
        Keep frames whose time minus the origin is a whole multiple of *dt* (``--dt``).
    dt_origin : {"zero", "first"}
        Origin of the *dt* grid: 0 ps, or the time of the first frame at or after *begin*
        (``gmx trjconv -dt``).

    Returns
    -------
    numpy.ndarray of int64
        Increasing frame numbers.

    Raises
    ------
    UsageError
        If *dt* is not positive, *end* is before *begin* (compared as float32, as the times
        are: ``-b 1000000 -e 999999.99`` keeps the frame at 1000000 ps, as gmx trjconv does),
        or no frame is selected.
    """
    if dt_origin not in DT_ORIGINS:
        raise ValueError(f"dt_origin must be one of {', '.join(DT_ORIGINS)}, got {dt_origin!r}")
    if dt is not None and not dt > 0:
        raise UsageError(f"--dt must be a positive time in ps, got {dt}")
    if begin is not None and end is not None and np.float32(end) < np.float32(begin):
        raise UsageError(f"-e {end} ps is before -b {begin} ps (as float32, as the times are compared)")
    times = np.asarray(times, np.float32).astype(np.float64)
    keep = np.ones(len(times), bool)
    if begin is not None:
        keep &= times >= float(np.float32(begin))
    if dt is not None and keep.any():
        origin = float(times[np.argmax(keep)]) if dt_origin == "first" else 0.0
        keep &= _multiple_of(times, origin, float(np.float32(dt)))
    if end is not None:
        keep &= times <= float(np.float32(end))
    frames = np.flatnonzero(keep)
    if len(frames) == 0:
        span = f"{times.min():g}-{times.max():g} ps" if len(times) else "no frames"
        asked = " ".join(f"{flag} {value:g}" for flag, value in (("-b", begin), ("-e", end), ("--dt", dt))
                         if value is not None)
        raise InputError(f"{asked} selects none of the {len(times)} frames (times {span})")
    return frames


def recorded_times(index, options="-b/-e/--dt"):
    """Every frame's time (ps) of a scanned trajectory, refusing inputs that record none.

    Raises
    ------
    InputError
        If the inputs record no time, or a segment's times are only MDAnalysis's default
        (1 ps per frame) because its format stores none.
    """
    for segment in index.segments:
        if segment.details.get("time_recorded") is False:
            raise InputError(f"{segment.path} records no time (MDAnalysis makes up 1 ps per frame): "
                             f"{options} need the frames' times; choose frames with --start/--stop/--step")
    if index.time is None:
        raise InputError(f"{index.segments[0].path} records no time: {options} need the frames' times; "
                         "choose frames with --start/--stop/--step")
    return np.asarray(index.time, np.float64)


def select_trajectory_frames(index, start=None, stop=None, step=None, begin=None, end=None, dt=None):
    """Frames of a scanned trajectory (after overlaps were dropped) chosen by number or by time.

    By number: Python slice semantics ``[start:stop:step]``. By time: :func:`select_by_time`
    with gmx trjconv's rule (``dt_origin="first"``) over the scanned times.

    Returns
    -------
    numpy.ndarray of int64
        Increasing trajectory frame numbers.

    Raises
    ------
    UsageError
        Both kinds of selection, bad values, or no frame selected.
    InputError
        A time selection on inputs that record no time.
    """
    from . import select_frames

    check_one_selection(start, stop, step, begin, end, dt)
    if by_time(begin, end, dt):
        return select_by_time(recorded_times(index), begin, end, dt, dt_origin="first")
    selected = select_frames(index.n_frames, start, stop, step)
    return np.arange(selected.start, selected.stop, selected.step, dtype=np.int64)


def describe_frames(index, frames, start=None, stop=None, step=None, begin=None, end=None, dt=None):
    """JSON-friendly record of a frame selection: what was asked, how many, first and last time."""
    times = index.time
    record = {"n_frames": len(frames), "n_frames_source": index.n_frames,
              "first_frame": int(frames[0]), "last_frame": int(frames[-1]),
              "first_time": None if times is None else float(times[frames[0]]),
              "last_time": None if times is None else float(times[frames[-1]])}
    if by_time(begin, end, dt):
        record.update(begin_ps=begin, end_ps=end, dt_ps=dt)
    else:
        record.update(start=start, stop=stop, step=step)
    return record


def frames_phrase(record):
    """One phrase for a summary line: ``'10 of 98 frames, 0-900 ps'``."""
    text = f"{record['n_frames']} of {record['n_frames_source']} frame(s)"
    if record.get("first_time") is not None:
        text += f", {record['first_time']:g}-{record['last_time']:g} ps"
    asked = " ".join(f"{flag} {record[key]:g}" for flag, key in (("-b", "begin_ps"), ("-e", "end_ps"),
                                                                     ("--dt", "dt_ps")) if record.get(key) is not None)
    return text + (f" ({asked})" if asked else "")
